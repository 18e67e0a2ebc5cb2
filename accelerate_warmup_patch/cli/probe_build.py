"""``doctor`` and ``status`` on any DeepSpeed build: what its scheduler classes do, asked in a child interpreter that
imports deepspeed (seconds), as a patched process asks them (probe.py). A number is not the code: a local part, a dev
suffix or a tree numbered plainly ``0.16.0`` that carries another release's code all say too little."""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import releases, vendor_builds
from . import child


def installed(deepspeed: str | None) -> dict[str, Any] | None:
    """``probe`` of the installed DeepSpeed; None where the patch does nothing (none installed, or older than the
    table: a patched process probes nothing there either)."""
    if deepspeed is None or releases.deepspeed_support(deepspeed) is releases.Support.UNSUPPORTED:
        return None
    return probe(deepspeed)


def probe(deepspeed: str, timeout: float = 300) -> dict[str, Any]:
    """What a process of this environment finds the installed build's scheduler classes do; ``{"error": ...}``
    where the child could not say."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    doing = f"probing DeepSpeed {deepspeed}'s scheduler classes (a new interpreter imports torch and DeepSpeed)"
    return child.answer(child.start_module(__name__, [], env), timeout, doing)


def _run() -> dict[str, Any]:
    """In the child (``-m``: the package is imported, and so armed, first): deepspeed's import runs the probe."""
    import deepspeed

    from .. import installed

    answer = installed.probed()
    if answer is None:
        return {"error": f"the probe did not run on DeepSpeed {deepspeed.__version__} (its warning says why)"}
    vendor = vendor_builds.vendor_build(answer.version)
    return {"deepspeed": answer.version, "lacks": installed.named_lacks(answer),
            "lacks_changes": installed.lacked_changes(answer),
            "differs_from_table": installed.disagreements(answer), "step_lr": answer.step_lr,
            "verdicts": installed.verdicts(answer.version), "vendor": vendor.name if vendor else None}


if __name__ == "__main__":
    child.emit(_run())
    sys.stdout.flush()
