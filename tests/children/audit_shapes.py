"""The ordinary shapes of a run that audit v5 judges (tests/test_audit_shapes.py, #55 items 2-5): ``audit_shapes.py
OUT``, armed or not by the environment (ACCELERATE_WARMUP_PATCH), trains each shape on one CPU rank of the installed
DeepSpeed and saves it under OUT/<shape>; prints ``RESULT {shape: the lrs each group's first optimizer step used}``
(a torch pre-hook: the truth). Then the config files given by path are edited, as for the next experiment.

- path-absolute, path-relative: the engine is given its config as a file (``config=PATH``), so the checkpoint holds
  the path alone; the relative one as DeepSpeed's own examples do (``--deepspeed_config ds_config.json``).
- code, callable: no scheduler in the config; a WarmupLR built in code, or by a callable (``lr_scheduler=f``).
- torch: no scheduler in the config; a torch LambdaLR by a callable (the HF Trainer's own, in kind).
- gan: two engines whose modules are both ``nn.Sequential`` (alike names, other shapes), saved into one folder under
  custom tags; the critic runs a OneCycle, which sets its lr when built on every release.
- bf16, accumulation, frozen, zero1, zero2, zero3: the config in the checkpoint, with bf16, two micro-batches a step,
  a frozen first layer, or ZeRO stage 1, 2 or 3 (DeepSpeed's CPU accelerator has no fp16).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness
# isort: off
import harness  # first: its shims, and its demo module imported without arming the patch
import deepspeed
import torch
from deepspeed.runtime import lr_schedules
# isort: on

OUT = Path(sys.argv[1])
WARMUP = {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}
ONE_CYCLE = {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 3, "cycle_momentum": False}
STEPS = 3


# the engine's own options of each plain shape (a WarmupLR in the config)
PLAIN: dict[str, dict[str, Any]] = {
    "bf16": {"bf16": {"enabled": True}}, "accumulation": {"gradient_accumulation_steps": 2}, "frozen": {},
    "zero1": {"zero_optimization": {"stage": 1}}, "zero2": {"zero_optimization": {"stage": 2}},
    "zero3": {"zero_optimization": {"stage": 3}}}


def _config(scheduler: dict[str, Any] | None, **options: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
                              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
                              "zero_optimization": {"stage": 0}, **options}
    if scheduler is not None:
        config["scheduler"] = scheduler
    return config


def _train(config: Any, save_dir: Path, *, tag: str | None = None, width: int = 4, steps: int = STEPS,
           frozen: bool = False, **kwargs: Any) -> list[float]:
    """One engine, ``steps`` optimizer steps, saved; the lrs its first step used, per group. ``frozen``: a first
    layer whose parameters train not."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4)] if frozen else []
    model = torch.nn.Sequential(*layers, torch.nn.Linear(4, width))
    if frozen:
        model[0].requires_grad_(False)
    engine, _, _, _ = deepspeed.initialize(model=model, config=config, **kwargs,
                                           model_parameters=[p for p in model.parameters() if p.requires_grad])
    used: list[list[float]] = []
    harness.demo.torch_optimizer(engine).register_step_pre_hook(
        lambda opt, *_: used.append([float(group["lr"]) for group in opt.param_groups]))
    dtype = torch.bfloat16 if isinstance(config, dict) and "bf16" in config else torch.float32
    micro = config.get("gradient_accumulation_steps", 1) if isinstance(config, dict) else 1
    for _ in range(steps * micro):
        engine.backward(engine(torch.randn(2, 4, dtype=dtype)).float().pow(2).mean())
        engine.step()
    engine.save_checkpoint(str(save_dir), tag=tag)
    return used[0]


def main() -> None:
    harness.demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    configs = OUT / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    absolute = configs / "ds_config.json"
    absolute.write_text(json.dumps(_config({"type": "WarmupLR", "params": WARMUP})))
    job = OUT / "job"
    job.mkdir(exist_ok=True)
    (job / "ds_config.json").write_text(absolute.read_text())
    first: dict[str, list[float]] = {}
    first["path-absolute"] = _train(str(absolute), OUT / "path-absolute")
    here = os.getcwd()
    os.chdir(job)
    try:
        first["path-relative"] = _train("ds_config.json", OUT / "path-relative")
    finally:
        os.chdir(here)
    first["code"] = _code_built(OUT / "code")
    first["callable"] = _train(_config(None), OUT / "callable",
                               lr_scheduler=lambda opt: lr_schedules.WarmupLR(opt, **WARMUP))
    first["torch"] = _train(_config(None), OUT / "torch",
                            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: (k + 1) / 4))
    first["gan-generator"] = _train(_config({"type": "WarmupLR", "params": WARMUP}), OUT / "gan", tag="generator")
    first["gan-critic"] = _train(_config({"type": "OneCycle", "params": ONE_CYCLE}), OUT / "gan", tag="critic",
                                 width=8, steps=2)
    for name, options in PLAIN.items():
        first[name] = _train(_config({"type": "WarmupLR", "params": WARMUP}, **options), OUT / name,
                             frozen=name == "frozen")
    # the next experiment: today's files start the warmup at the optimizer's lr, which would need no fix
    edited = _config({"type": "WarmupLR", "params": {**WARMUP, "warmup_min_lr": 1e-3}})
    for path in (absolute, job / "ds_config.json"):
        path.write_text(json.dumps(edited))
    print("RESULT " + json.dumps(first), flush=True)


def _code_built(save_dir: Path) -> list[float]:
    """A torch optimizer and a WarmupLR built in code, both passed to the engine."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = lr_schedules.WarmupLR(optimizer, **WARMUP)
    config = _config(None)
    del config["optimizer"]
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config)
    used: list[list[float]] = []
    optimizer.register_step_pre_hook(lambda opt, *_: used.append([float(g["lr"]) for g in opt.param_groups]))
    for _ in range(STEPS):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()
    engine.save_checkpoint(str(save_dir))
    return used[0]


main()
harness._tear_down()
