"""What the probe saw the installed DeepSpeed do, beside what the table says of its release
(tests/test_wrapped.py): one JSON line."""

from __future__ import annotations

import json

import accelerate_warmup_patch as awp

awp.apply()
import deepspeed

from accelerate_warmup_patch import installed

answer = installed.probed()
assert answer is not None, "the probe did not run"
print(json.dumps({"deepspeed": deepspeed.__version__, "probed": sorted(map(list, answer.lacks)),
                  "table": sorted(map(list, installed.table_lacks(answer))), "status": awp.status()["probed"]}))
awp.remove()
