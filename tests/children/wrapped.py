"""Child of tests/test_wrapped.py: what apply() wraps in each armed mode, as JSON on stdout; and what the probe saw
the installed DeepSpeed lack, beside what the table says of its release ("probe").

Each mode is applied in turn and removed again, so every mode's list is its own (apply() never unwraps).
"""

from __future__ import annotations

import json

# imported first: the patch wraps them at apply(), as it would right after their import
import deepspeed.launcher.multinode_runner  # noqa: F401

import accelerate_warmup_patch as awp
from accelerate_warmup_patch import installed

patched: dict[str, object] = {}
for mode in ("reset", "step", "warn"):
    awp.apply(mode=mode)
    patched[mode] = sorted(awp.status()["patched"])
    awp.remove()
answer = installed.probed()
assert answer is not None, "the probe did not run"
table = installed.table_lacks(answer)
patched["probe"] = {"probed": sorted(map(list, answer.lacks_prs)), "table": sorted(map(list, table)),
                    "differs": installed.disagreements(answer)}
print(json.dumps(patched))
