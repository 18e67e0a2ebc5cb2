"""Arming fails at the first deepspeed import: ``broken_arming.py STRICT`` (tests/test_core.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

import accelerate_warmup_patch.api as api


# fault injection: no real run makes arming fail; the seam is the public apply() that arming calls
def apply(**kwargs: Any) -> str:
    raise RuntimeError("injected fault")


api.apply = apply  # type: ignore[assignment]
# after start-up: set at start-up, the package loads at once
os.environ["ACCELERATE_WARMUP_PATCH_STRICT"] = sys.argv[1]
import deepspeed

assert not hasattr(deepspeed.initialize, "__wrapped__")
print("imported")
