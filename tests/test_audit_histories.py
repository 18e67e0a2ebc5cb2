"""The audit's rule over generated run histories (#55 item 6; tests/histories.py says what a history is): real engines
of the installed DeepSpeed on CPU, in this process (the patch applied in each engine's mode, or removed), the audit
after every step, and the rule checked against each save's truth. A failing history is shrunk and kept in
tests/histories_found.json, which every run replays first.

Budget: CI runs ``AWP_HISTORIES`` histories (default 2) of ``AWP_HISTORY_STEPS`` steps (default 5) from the seed
``AWP_HISTORY_SEED`` (default 0): about 12 engine runs, a minute on the 2-core machine. ``nox -s "histories(...)"``
runs a long search (200 histories of 8 steps, a seed from the clock unless given).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import histories
import pytest
from conftest import installed

installed("deepspeed")  # real engines: without DeepSpeed the module skips

FOUND = Path(__file__).parent / "histories_found.json"
COUNT = int(os.environ.get("AWP_HISTORIES", "2"))
LENGTH = int(os.environ.get("AWP_HISTORY_STEPS", "5"))
SEED = int(os.environ.get("AWP_HISTORY_SEED", "0"))


def _train(*, mode: str, save_dir: Path, resume_from: Path | None, load: str | None,
           steps: int) -> list[list[float]]:
    """One real engine in ``mode``: a fresh start or a resume of ``resume_from``'s newest save, ``steps`` optimizer
    steps, saved into ``save_dir``; each step's lrs, from the optimizer's pre-hook."""
    import harness
    import torch

    import accelerate_warmup_patch

    if mode == "off":
        accelerate_warmup_patch.remove()
    else:
        accelerate_warmup_patch.apply(mode)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4))
        config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
                  "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
                  "zero_optimization": {"stage": 0}, "scheduler": histories.SCHEDULER}

        def resume(engine: Any) -> None:
            engine.load_checkpoint(str(resume_from), load_optimizer_states=load != "no-optimizer",
                                   load_lr_scheduler_states=load != "no-scheduler")

        return harness.demo.train_deepspeed(config, model, list(model.parameters()), steps,
                                            before=resume if resume_from is not None else None,
                                            after=lambda engine: engine.save_checkpoint(str(save_dir)))
    finally:
        accelerate_warmup_patch.remove()


def _problems(steps: list[histories.Step], root: Path) -> list[str]:
    """Each break of the rule, after each step of the history (played afresh under ``root``)."""
    from accelerate_warmup_patch.cli.audit import audit

    world = histories.World(root)
    root.mkdir(parents=True)
    for number, step in enumerate(steps):
        histories.play(step, world, _train)
        paths = [str(world.path(index)) for index in range(len(world.folders)) if world.path(index).exists()]
        found, _ = audit(paths)
        by_folder: dict[str, list[dict[str, Any]]] = {}
        for report in found:
            by_folder.setdefault(report["path"], []).append(report)
        problems = histories.broken(world, by_folder)
        if problems:
            return [f"after step {number} ({json.dumps(step)}): {problem}" for problem in problems]
    return []


def _kept() -> list[dict[str, Any]]:
    return json.loads(FOUND.read_text()) if FOUND.exists() else []


def test_every_kept_history_keeps_the_rule(tmp_path: Path) -> None:
    for example, kept in enumerate(_kept()):
        assert _problems(kept["steps"], tmp_path / f"kept{example}") == [], kept


@pytest.mark.parametrize("index", range(COUNT))
def test_generated_histories_keep_the_rule(index: int, tmp_path: Path) -> None:
    rng = random.Random(SEED * 100_003 + index)
    steps = histories.history(rng, LENGTH)
    problems = _problems(steps, tmp_path / "run")
    if not problems:
        return
    trials = iter(range(1_000))
    smallest = histories.shrunk(steps, lambda trial: bool(_problems(trial, tmp_path / f"shrink{next(trials)}")))
    shown = _problems(smallest, tmp_path / "shown")
    histories.keep(FOUND, smallest, shown)
    pytest.fail(f"the rule broke (kept in {FOUND.name}): {shown}\nhistory: {json.dumps(smallest)}")
