"""A user's wrong arguments to each patched callable, patched and unpatched: the errors and what the
package said (tests/test_wrappers.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness
import json
import logging

import torch

import accelerate_warmup_patch as awp

awp.apply()
import deepspeed
import harness
from deepspeed.runtime import lr_schedules

said = []
class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        said.append(record.getMessage())
logging.getLogger("accelerate_warmup_patch").addHandler(Keep())
logging.getLogger("accelerate_warmup_patch").setLevel(logging.DEBUG)
harness.demo.set_up_single_process()
deepspeed.init_distributed(dist_backend="gloo")
model = torch.nn.Linear(4, 4)
engine, *_ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                  config=harness.ds_config(harness.Spec()))
def optimizer() -> Any:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
cosine = lr_schedules.WarmupCosineLR(optimizer(), warmup_num_steps=3, total_num_steps=8)
warmup = lr_schedules.WarmupLR(optimizer(), warmup_num_steps=5)
calls: dict[str, Callable[[], Any]] = {
    "WarmupLR(opt, warmup_steps=10)": lambda: lr_schedules.WarmupLR(optimizer(), warmup_steps=10),
    "WarmupLR()": lambda: lr_schedules.WarmupLR(),
    "WarmupLR(None)": lambda: lr_schedules.WarmupLR(None),
    "WarmupLR(opt, warmup_num_steps='5')": lambda: lr_schedules.WarmupLR(optimizer(), warmup_num_steps="5"),
    "WarmupDecayLR(opt)": lambda: lr_schedules.WarmupDecayLR(optimizer()),
    "WarmupCosineLR(opt, total_steps=8)": lambda: lr_schedules.WarmupCosineLR(optimizer(), total_steps=8),
    "WarmupLR.get_lr(1)": lambda: warmup.get_lr(1),
    "WarmupCosineLR.get_lr_ratio(1)": lambda: cosine.get_lr_ratio(1),
    "engine.load_checkpoint(bogus=1)": lambda: engine.load_checkpoint("/nonexistent", bogus=1),
    "deepspeed.initialize(bogus=1)": lambda: deepspeed.initialize(bogus=1),
}
def outcomes() -> dict[str, list[str] | None]:
    out: dict[str, list[str] | None] = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = None
        except Exception as error:
            out[name] = [type(error).__name__, str(error)]
    return out
said.clear()
patched, said_patched = outcomes(), list(said)
awp.remove()
print("RESULT " + json.dumps([patched, outcomes(), said_patched]))
harness._tear_down()
