"""``doctor`` and ``status`` on any DeepSpeed build: what its scheduler classes do, asked in a child interpreter that
imports deepspeed (3-10 s), as a patched process asks them (probe.py). A number is not the code: a local part, a dev
suffix or a tree numbered plainly ``0.16.0`` that carries another release's code all say too little. The answer is
kept for the very code it asked (probe_cache.py), so that the next call with the same build answers at once."""

from __future__ import annotations

import os
import sys
from typing import Any

from .. import releases, vendor_builds
from . import child, probe_cache


def installed(deepspeed: str | None, cache: bool = True) -> dict[str, Any] | None:
    """What the installed DeepSpeed's scheduler classes do: the answer kept for this very code, else ``probe``'s
    (kept for the next call; neither read nor written without ``cache``); ``answered`` says which. None where the
    patch does nothing (none installed, or older than the table: a patched process probes nothing there either)."""
    if deepspeed is None or releases.deepspeed_support(deepspeed) is releases.Support.UNSUPPORTED:
        return None
    key, why_none = probe_cache.key(deepspeed)
    kept = probe_cache.look_up(key) if key is not None and cache else None
    if kept is not None:
        return kept
    answer = probe(deepspeed)
    return answer if "error" in answer else probe_cache.keep(key, answer, why_none, write=cache)


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
    module = sys.modules.get(probe_cache.MODULE)
    ran = getattr(module, "__file__", None)  # the file the probe ran, for the cache (probe_cache.keep)
    return {"ran": {"file": ran, "sha256": probe_cache.digest(ran) if ran else None},
            "deepspeed": answer.version, "lacks": installed.named_lacks(answer),
            "lacks_changes": installed.lacked_changes(answer),
            "differs_from_table": installed.disagreements(answer), "step_lr": answer.step_lr,
            "verdicts": installed.verdicts(answer.version), "vendor": vendor.name if vendor else None}


if __name__ == "__main__":
    child.emit(_run())
    sys.stdout.flush()
