"""After a reload, status() lists only what a caller reaches; apply() wraps again (tests/test_core.py)."""

from __future__ import annotations

import importlib

import torch

import accelerate_warmup_patch as awp

awp.apply()
import deepspeed
from deepspeed.runtime import lr_schedules

from accelerate_warmup_patch import upstream

fixes = upstream.methods_to_fix(deepspeed.__version__)
label = "deepspeed.runtime.lr_schedules.WarmupLR.__init__"
assert "deepspeed.initialize" in awp.status()["patched"]
assert (label in awp.status()["patched"]) == (("WarmupLR", "__init__") in fixes)

def first_lr() -> float:
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    lr_schedules.WarmupLR(optimizer, warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=5)
    return float(optimizer.param_groups[0]["lr"])

importlib.reload(lr_schedules)
importlib.reload(deepspeed)
after_reload = awp.status()["patched"]
assert label not in after_reload and "deepspeed.initialize" not in after_reload, after_reload
unfixed = first_lr()  # what the reloaded class does: status() no longer claims it is patched
awp.apply()
assert "deepspeed.initialize" in awp.status()["patched"]
assert (label in awp.status()["patched"]) == (("WarmupLR", "__init__") in fixes)
print("LRS", unfixed, first_lr())
