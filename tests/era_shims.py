"""Stand-ins and settings that let DeepSpeed 0.9-0.13 build a real engine on a CPU without IPEX.

The harness calls ``prepare()`` before each run; on DeepSpeed 0.14 and newer it does nothing. What
it does on older releases, and why (each measured: see docs/eras.md):

1. ``oneccl_bindings_for_pytorch``: an empty stand-in module (``tests/era_stubs/``) on sys.path.
   Their CPU accelerator imports it at module top; the real package is a binary that the package
   registry does not carry. Nothing of it is used: the comm backend is gloo (3.).
2. The CPU accelerator is chosen with ``deepspeed.accelerator.set_accelerator(CPU_Accelerator())``.
   Their automatic choice takes CPU only when ``intel_extension_for_pytorch`` imports (otherwise
   CUDA, which has no device here), and ``DS_ACCELERATOR=cpu`` insists on it too; IPEX 2.1.x is yanked.
3. Its comm backend is gloo (``_communication_backend_name``): with its default, ccl, DeepSpeed
   JIT-builds its CCL comm op, which needs oneCCL (CCL_ROOT).
4. 0.9-0.12 only: one rank does not all-reduce its gradients (``engine.enable_backward_allreduce =
   False``, set right after ``DeepSpeedEngine.__init__``): their all-reduce accepts the type name
   ``torch.cpu.FloatTensor``, which no CPU tensor has ("attempting to reduce an unsupported grad
   type: torch.FloatTensor"; 0.13.0 checks dtypes instead); with one rank the reduction is the
   identity. Engines of more ranks are left as they are.

None of it touches the scheduler, the optimizer or ``deepspeed.initialize``, which the patch wraps.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

STUBS = Path(__file__).parent / "era_stubs"
NEEDED_BELOW = (0, 14)  # 0.14.0 made the CPU accelerator fall back to gloo without oneCCL's bindings
ALLREDUCE_NEEDED_BELOW = (0, 13)  # 0.13.0's split_half_float_double_sparse checks dtypes, not type names
_done = False


def needed(below: tuple[int, int] = NEEDED_BELOW) -> bool:
    """Whether the installed DeepSpeed is older than ``below``; read from its metadata, importing nothing
    (not even this package, whose import would arm the patch)."""
    try:
        version = metadata.version("deepspeed")
    except metadata.PackageNotFoundError:
        return False
    return tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < below


def prepare() -> None:
    """Import DeepSpeed and put the CPU settings above in place, once, when the release needs them."""
    global _done
    if _done or not needed():
        return
    _done = True
    if str(STUBS) not in sys.path:
        sys.path.insert(0, str(STUBS))
    if importlib.util.find_spec("deepspeed.accelerator.cpu_accelerator") is None:
        return  # 0.9.0-0.9.2: no CPU accelerator at all, an engine stops at CUDA (docs/eras.md)
    from deepspeed.accelerator import set_accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    accelerator = CPU_Accelerator()
    accelerator._communication_backend_name = "gloo"
    set_accelerator(accelerator)
    if not needed(ALLREDUCE_NEEDED_BELOW):
        return
    from deepspeed.runtime.engine import DeepSpeedEngine

    original = DeepSpeedEngine.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if self.world_size == 1:
            self.enable_backward_allreduce = False

    DeepSpeedEngine.__init__ = __init__  # type: ignore[method-assign]
