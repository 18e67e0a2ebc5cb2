"""The package's functions on the stack when patch_deepspeed starts, outermost first, while the modules
named in argv are imported in turn (tests/test_activation.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from types import FrameType
from typing import Any

spec = importlib.util.find_spec("accelerate_warmup_patch")
assert spec is not None and spec.origin is not None
package = os.path.dirname(spec.origin) + os.sep
chains: list[list[str]] = []

def profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and frame.f_code.co_name == "patch_deepspeed":
        chain, caller = [], frame.f_back
        while caller is not None:
            if caller.f_code.co_filename.startswith(package) and caller.f_code.co_name != "<module>":
                chain.append(caller.f_code.co_name)
            caller = caller.f_back
        chains.append(chain[::-1])

sys.setprofile(profile)
for name in sys.argv[1:]:
    importlib.import_module(name)
sys.setprofile(None)
print(json.dumps(chains))
