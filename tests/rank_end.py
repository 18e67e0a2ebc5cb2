"""How a rank of the tests' multi-rank scripts ends, once it has written what the test reads.

On CPU, a DeepSpeed rank can abort after its last line: `terminate called without an active exception` from a C++
destructor while the interpreter exits (SIGABRT; seen in 3 of 24 two-rank runs on a loaded 2-core machine, on
0.19.8, with the package armed and with it off alike, destroy_process_group() called before; no Python thread of
ours alive: faulthandler shows the main thread alone, past its last frame). The launcher then fails the whole job,
and the test with it, for a fault of neither the package nor the test. So, once every rank has written its file
and the group is gone, the rank leaves at once, skipping the interpreter's teardown; the tests read only the files.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn


def end_rank() -> NoReturn:
    """Wait for every rank, destroy the process group, flush what was written, and exit 0 without the teardown."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    # a rank under mpirun (DeepSpeed's openmpi and mpich launchers, srun) initialised MPI through mpi4py, whose exit
    # hook finalizes it: skipped by os._exit, and mpirun calls a rank that never finalized an abnormal termination
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
