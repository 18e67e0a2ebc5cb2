"""``doctor`` on a DeepSpeed build that is not a release (a local part, a dev or pre suffix): what its scheduler
classes do, asked in a child interpreter that imports deepspeed (seconds), as a patched process asks them
(probe.py). A release's number is enough for the table; a build's is not (``releases.is_release``)."""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import vendor_builds
from . import child


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
