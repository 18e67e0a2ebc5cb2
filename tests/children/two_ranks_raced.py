"""One rank of a two-rank ZeRO-1 job (torchrun; tests/test_proof.py), in which each rank saves its own optimizer
partition: train two steps and save to OUT/<name>/ckpt. ``OTHER`` (optional) is another job's save folder: in this
job's rank 1, its ``zero_pp_rank_1`` partition lands in the tag folder after rank 1 wrote its own and before
save_checkpoint returns (at the checkpoint engine's commit), as a second job saving the same tag at the same moment
would write it. Each rank writes the lrs its optimizer steps used to OUT/<name>/rank<r>.json."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import deepspeed
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: how a rank ends
from rank_end import end_rank

OUT, NAME = sys.argv[1], sys.argv[2]
OTHER = sys.argv[3] if len(sys.argv) > 3 else None
PARTITION = "zero_pp_rank_1_mp_rank_00_optim_states.pt"
CONFIG = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
          "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                       "warmup_num_steps": 5, "warmup_type": "linear"}},
          "zero_optimization": {"stage": 1}}


def race(engine: Any, tag_folder: str) -> None:
    """Fault injection: the other job's rank-1 partition lands in ``tag_folder`` at this rank's commit, once."""
    commit = engine.checkpoint_engine.commit

    def raced_commit(*args: Any, **kwargs: Any) -> Any:
        assert OTHER is not None
        shutil.copy(os.path.join(OTHER, "ckpt", PARTITION), os.path.join(tag_folder, PARTITION))
        engine.checkpoint_engine.commit = commit
        return commit(*args, **kwargs)

    engine.checkpoint_engine.commit = raced_commit


deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # the user's own: the config's scheduler drives it
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=CONFIG)
used: list[float] = []
optimizer.register_step_pre_hook(lambda opt, *_: used.append(float(opt.param_groups[0]["lr"])))
for _ in range(2):
    engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
    engine.step()
save_dir = os.path.join(OUT, NAME)
if OTHER is not None and os.environ["RANK"] == "1":
    race(engine, os.path.join(save_dir, "ckpt"))
engine.save_checkpoint(save_dir, tag="ckpt")
with open(os.path.join(save_dir, f"rank{os.environ['RANK']}.json"), "w") as out:
    json.dump(used, out)
end_rank()  # tests/rank_end.py: CPU DeepSpeed can abort in the interpreter's teardown
