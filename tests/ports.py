"""The TCP ports the tests' own launches and servers listen on: one block of PORTS per nox session.

nox runs sessions side by side (``nox --parallel``, as .ci/run does), and two sessions whose sshd or
rendezvous asked for the same port would fail each other's launches. The noxfile gives each session
that launches anything a block of its own in ``AWP_PORT_BASE``; run by hand, the block starts at 29740.
"""

from __future__ import annotations

import os

PORTS = 60  # a block: the highest offset used is the Slurm cluster's srun range (SLURM + 20)
BASE = int(os.environ.get("AWP_PORT_BASE", "29740"))

# offsets in the block, one per listener
LAUNCH_TORCHRUN, LAUNCH_ACCELERATE, LAUNCH_DEEPSPEED, LAUNCH_ACCELERATE_STEP = 1, 2, 3, 4
RECORD_TWO_RANKS = 5
QUICKSTART_RESET, QUICKSTART_MODE = 6, 7
MODULE_JOB = 8
ONE_RANK, ERA_RANKS = 9, 10
MULTINODE_TRAIN, MULTINODE_SSHD, MULTINODE_ENV, MULTINODE_RECORDS = 11, 12, 13, 14
REAL_SSH, REAL_SLURM = 15, 30
NO_LISTENER = 51  # a port where nothing listens (an unreachable server)
RACED_TWO_RANKS = 52
RANKS_JOB = 53  # tests/test_ranks.py's two-rank job
HISTORY_JOB = 54  # a job of a run history, one to three ranks (tests/children/history.py)
AUDIT_SHAPES = 57  # the second of tests/test_audit_shapes.py's two one-rank trainings at once (the first: ONE_RANK)


def port(offset: int) -> int:
    """The port at ``offset`` in this session's block."""
    assert 0 <= offset < PORTS, offset
    return BASE + offset


def one_rank_port_by_default() -> None:
    """Give this process's one-rank engines, and its children's, the block's ONE_RANK port.

    Without it each run's ``set_up_single_process`` asks the kernel for a free port and closes it before the
    rendezvous listens there. That port is an ephemeral one, so any connection another session opens in the
    meantime can take it (seen once in CI: EADDRINUSE). The block's ports lie below the ephemeral range and no
    other session uses them; a session runs its one-rank engines one at a time.
    """
    os.environ.setdefault("MASTER_PORT", str(port(ONE_RANK)))
