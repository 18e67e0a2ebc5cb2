"""A failed capture of WarmupLR's arguments, injected through the seam that reads a scheduler's
optimizer (tests/test_hooks.py)."""

from __future__ import annotations

from typing import Any

import torch

import accelerate_warmup_patch as awp

awp.apply()
from accelerate_warmup_patch import schedules


def broken(optimizer: Any) -> Any:
    raise RuntimeError("injected fault")
# fault injection through the one public seam that reads a scheduler's optimizer: no real run makes it fail
schedules.torch_optimizer = broken
from deepspeed.runtime.lr_schedules import WarmupLR

optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
WarmupLR(optimizer, warmup_min_lr=0.0, warmup_num_steps=5)
print(optimizer.param_groups[0]["lr"])
