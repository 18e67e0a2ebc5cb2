"""Child of tests/test_wrapped.py: what apply() wraps in each armed mode, as JSON on stdout.

Each mode is applied in turn and removed again, so every mode's list is its own (apply() never unwraps).
"""

from __future__ import annotations

import json

# imported first: the patch wraps them at apply(), as it would right after their import
import deepspeed.launcher.multinode_runner  # noqa: F401

import accelerate_warmup_patch as awp

patched = {}
for mode in ("reset", "step", "warn"):
    awp.apply(mode=mode)
    patched[mode] = sorted(awp.status()["patched"])
    awp.remove()
print(json.dumps(patched))
