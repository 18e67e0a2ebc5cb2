"""One rank of a two-rank data-parallel job armed with the patch (torchrun; tests/test_proof.py): train two steps
and save to OUT/run, then a new engine loads that save, trains one step and saves to OUT/resumed. Each rank writes
the lrs its optimizer steps used to OUT/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import deepspeed
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: how a rank ends
from rank_end import end_rank

OUT = sys.argv[1]
CONFIG = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                       "warmup_num_steps": 5, "warmup_type": "linear"}},
          "zero_optimization": {"stage": 0}}


def train(steps: int, resume_from: str | None, save_to: str) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the user's own: the config's scheduler drives it
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=CONFIG)
    if resume_from is not None:
        engine.load_checkpoint(resume_from, tag="ckpt")
    used: list[float] = []
    optimizer.register_step_pre_hook(lambda opt, *_: used.append(float(opt.param_groups[0]["lr"])))
    for _ in range(steps):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()
    engine.save_checkpoint(save_to, tag="ckpt")
    return used


deepspeed.init_distributed(dist_backend="gloo")
first = train(2, None, os.path.join(OUT, "run"))
second = train(1, os.path.join(OUT, "run"), os.path.join(OUT, "resumed"))
with open(os.path.join(OUT, f"rank{os.environ['RANK']}.json"), "w") as out:
    json.dump({"run": first, "resumed": second}, out)
end_rank()  # tests/rank_end.py: CPU DeepSpeed can abort in the interpreter's teardown
