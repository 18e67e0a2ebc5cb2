"""One run history played on real engines of the installed DeepSpeed, the audit's rule checked after each step
(tests/test_audit_histories.py; tests/histories.py says what a history is): ``history.py STEPS_JSON ROOT``. Prints
``RESULT`` and the breaks of the rule found (an empty list: none). A child of its own, so that the engines' process
group and its port go with it."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness and the histories
# A ZeRO 1/2 resume on a release that loads the optimizer's partitions with torch.load's default (0.15.2: a
# LossScaler inside) fails on torch 2.6 and later, whose default is weights_only: its users set this, and so does
# the search (it changes how torch reads the files DeepSpeed loads, not what is in them or what the audit reads)
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
# isort: off
import harness  # first: its shims, and its demo module imported without arming the patch
import histories
import torch
import accelerate_warmup_patch
from accelerate_warmup_patch.cli.audit import audit
# isort: on


def train(*, mode: str, save_dir: Path, resume_from: Path | None, load: str | None, steps: int, scheduler: str,
          zero: int) -> list[list[float]]:
    """One real engine in ``mode`` of ``scheduler`` (a class of histories.SCHEDULERS) under ZeRO stage ``zero``: a
    fresh start or a resume of ``resume_from``'s newest save, ``steps`` optimizer steps, saved into ``save_dir``;
    each step's lrs, from the optimizer's pre-hook."""
    if mode == "off":
        accelerate_warmup_patch.remove()
    else:
        accelerate_warmup_patch.apply(mode)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
                  "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
                  "zero_optimization": {"stage": zero},
                  "scheduler": {"type": scheduler, "params": histories.SCHEDULERS[scheduler]}}

        def resume(engine: Any) -> None:
            engine.load_checkpoint(str(resume_from), load_optimizer_states=load != "no-optimizer",
                                   load_lr_scheduler_states=load != "no-scheduler")

        rows: list[list[float]] = harness.demo.train_deepspeed(
            config, model, list(model.parameters()), steps, before=resume if resume_from is not None else None,
            after=lambda engine: engine.save_checkpoint(str(save_dir)))
        return rows
    finally:
        accelerate_warmup_patch.remove()


def problems(steps: list[histories.Step], root: Path) -> list[str]:
    """Each break of the rule, after each step of the history (played afresh under ``root``)."""
    world = histories.World(root)
    root.mkdir(parents=True)
    for number, step in enumerate(steps):
        histories.play(step, world, train)
        paths = [str(world.path(index)) for index in range(len(world.folders)) if world.path(index).exists()]
        found, _ = audit(paths)
        by_folder: dict[str, list[dict[str, Any]]] = {}
        for report in found:
            by_folder.setdefault(report["path"], []).append(report)
        broken = histories.broken(world, by_folder)
        if broken:
            return [f"after step {number} ({json.dumps(step)}): {problem}" for problem in broken]
    return []


print("RESULT " + json.dumps(problems(json.loads(sys.argv[1]), Path(sys.argv[2]))), flush=True)
harness._tear_down()
