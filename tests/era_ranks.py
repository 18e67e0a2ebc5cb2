"""One of two CPU ranks (torchrun, gloo) of an era row: a real engine, armed by the environment only.

    ACCELERATE_WARMUP_PATCH=reset torchrun --nproc_per_node 2 tests/era_ranks.py STAGE OUT_DIR

Writes ``OUT_DIR/rank<r>.json``: the lr of each optimizer step and whether the ranks' weights agree
after training (the gradients really were reduced). The script never imports the package: the
installed .pth arms it. ``tests/matrix.py era`` runs it where two ranks run on CPU (docs/eras.md).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import era_shims  # beside this script: sys.path[0]
import rank_end

STEPS = 4


def main(stage: int, out: Path) -> None:
    era_shims.prepare()
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                      "warmup_num_steps": 5, "warmup_type": "linear"}},
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()), config=config)
    torch.manual_seed(1 + int(os.environ["RANK"]))  # different data per rank: only a reduction keeps them equal
    rows = []
    for _ in range(STEPS):
        loss = engine(torch.randn(2, 4)).pow(2).mean()
        engine.backward(loss)
        rows.append([float(g["lr"]) for g in engine.optimizer.param_groups])  # what step() will use
        engine.step()
    weight = next(engine.module.parameters()).detach().contiguous()
    gathered = [torch.zeros_like(weight) for _ in range(2)]
    torch.distributed.all_gather(gathered, weight)
    result = {"lrs": rows, "weights_equal": bool(torch.equal(gathered[0], gathered[1]))}
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result))
    rank_end.end_rank()  # CPU DeepSpeed can abort in the interpreter's teardown (tests/rank_end.py)


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
