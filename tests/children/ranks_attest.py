"""One rank of a two-rank job (torchrun; tests/test_ranks.py) whose rank 0 is armed (reset) and whose rank 1 is, case by
case, not armed, armed in warn mode, or armed as rank 0 is: per case, a fresh engine (ZeRO 0 or 2) trains two steps
and saves to OUT/<case>. Each rank writes the lrs its own optimizer's steps used, per case, to OUT/rank<r>.json."""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path

import accelerate_warmup_patch

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
# case: (ZeRO stage, rank 1's mode: None is not armed)
CASES = {"zero0-unarmed": (0, None), "zero0-warn": (0, "warn"), "zero2-unarmed": (2, None), "zero2-warn": (2, "warn"),
         "zero2-armed": (2, "reset")}


def arm(mode: str | None) -> None:
    if mode is None:
        accelerate_warmup_patch.remove()
    else:
        accelerate_warmup_patch.apply(mode)


arm("reset" if RANK == 0 else None)
import deepspeed  # after the arming: the patch's hooks fire at this import
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: how a rank ends
from rank_end import end_rank


def run(zero: int, save_to: str) -> list[float]:
    config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                           "warmup_num_steps": 5, "warmup_type": "linear"}},
              "zero_optimization": {"stage": zero}}
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the config's scheduler drives it
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    used: list[float] = []
    optimizer.register_step_pre_hook(lambda opt, *_: used.append(float(opt.param_groups[0]["lr"])))
    for _ in range(2):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()
    engine.save_checkpoint(save_to, tag="ckpt")
    return used


deepspeed.init_distributed(dist_backend="gloo")
truth = {}
for case, (zero, mode) in CASES.items():
    if RANK == 1:
        arm(mode)
    truth[case] = run(zero, os.path.join(OUT, case))
    gc.collect()
with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as out:
    json.dump(truth, out)
end_rank()  # tests/rank_end.py: CPU DeepSpeed can abort in the interpreter's teardown
