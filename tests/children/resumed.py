"""A WarmupLR resumed at iteration 2, then the package imported late: ``resumed.py load|argument|engine``
(tests/test_late_import.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness
import json
import logging
import sys

import harness
import torch

said = []
class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        said.append(f"{record.levelname} {record.getMessage()}")
logger = logging.getLogger("accelerate_warmup_patch")
logger.addHandler(Keep())
logger.setLevel(logging.DEBUG)
from deepspeed.runtime import lr_schedules

ROAD = sys.argv[1]  # load | argument | engine
PARAMS = dict(warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=5, warmup_type="linear")

def train(late: bool) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if ROAD == "argument":
        scheduler = lr_schedules.WarmupLR(optimizer, last_batch_iteration=2, **PARAMS)
    else:
        scheduler = lr_schedules.WarmupLR(optimizer, **PARAMS)
        scheduler.load_state_dict({"last_batch_iteration": 2})
    if late:
        import accelerate_warmup_patch
        accelerate_warmup_patch.apply()
    if ROAD == "engine":
        config = harness.ds_config(harness.Spec())
        del config["optimizer"], config["scheduler"]
        return harness.demo.train_deepspeed(config, model, None, 3, optimizer=optimizer, lr_scheduler=scheduler)
    rows = []
    for _ in range(3):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        rows.append([optimizer.param_groups[0]["lr"]])
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return rows

late = train(late=True)
import accelerate_warmup_patch as awp

status = awp.status()
awp.remove()
print("RESULT " + json.dumps({"late": late, "unpatched": train(late=False), "said": said, "status": status}))
harness._tear_down()
