"""One rank of a job of a run history (tests/histories.py's ``job`` and ``jobresume`` steps, launched by torchrun
from tests/children/history.py, on the installed DeepSpeed or on another release's code): ``history_job.py SAVE_DIR
OUT RUN_JSON``, RUN_JSON ``{"modes": [each rank's], "scheduler": ..., "zero": ..., "model": "a", "tag": null,
"resume": null or {"from": FOLDER, "load": "whole" | "no-optimizer" | "no-scheduler" | "universal"},
"driver": "engine" | "accelerate"}``. Each rank arms the patch in its own mode (``off``: removed), trains a fresh
engine two steps (or loads FOLDER's newest save, or its universal checkpoint, and trains one), saves into SAVE_DIR
(DeepSpeed's global_stepN, or ``tag``; through accelerate, its ``save_state``: the tag ``pytorch_model``), and writes
the lrs its own optimizer used at each step to OUT/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: the histories, how a rank ends
sys.path.insert(0, str(HERE.parent.parent))  # the package from this tree, in another release's venv too
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # as tests/children/history.py
import accelerate_warmup_patch

RANK = int(os.environ["RANK"])
RUN = json.loads(sys.argv[3])
if RUN["modes"][RANK] == "off":
    accelerate_warmup_patch.remove()
else:
    accelerate_warmup_patch.apply(RUN["modes"][RANK])
# isort: off
import deepspeed  # after the arming
import histories
import torch
from accelerate_warmup_patch.cli.demo import StepLrs, torch_optimizer
from rank_end import end_rank
# isort: on


def what_loads(resume: dict[str, str]) -> dict[str, bool]:
    """The engine's load_checkpoint arguments for a resume's ``load`` (tests/histories.py's LOADS, or "universal":
    whole)."""
    return {"load_optimizer_states": resume["load"] != "no-optimizer",
            "load_lr_scheduler_states": resume["load"] != "no-scheduler",
            "load_module_only": resume["load"] == "module-only"}


def by_engine(config: dict[str, Any], module: Any,
              resume: dict[str, str] | None) -> tuple[Any, Callable[[], None], Callable[[], None]]:
    """DeepSpeed's own engine (resumed from ``resume``'s folder, its ``latest``), and its save."""
    deepspeed.init_distributed(dist_backend="gloo")
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=list(module.parameters()), config=config)
    if resume is not None:
        engine.load_checkpoint(resume["from"], **what_loads(resume))

    def step() -> None:
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()

    def save() -> None:
        engine.save_checkpoint(sys.argv[1], tag=RUN.get("tag"))

    return engine, step, save


def by_accelerate(config: dict[str, Any], module: Any,
                  resume: dict[str, str] | None) -> tuple[Any, Callable[[], None], Callable[[], None]]:
    """accelerate's Accelerator over the same engine (its DeepSpeed plugin given the config, the optimizer and the
    scheduler the config's), resumed by ``load_state`` (the tag ``pytorch_model``), saved by ``save_state``."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    optimizer = DummyOptim(list(module.parameters()), lr=config["optimizer"]["params"]["lr"])
    model, optimizer, scheduler = accelerator.prepare(module, optimizer, DummyScheduler(optimizer))
    if resume is not None:
        accelerator.load_state(resume["from"], **what_loads(resume))  # passed on to the engine's load_checkpoint

    def step() -> None:
        accelerator.backward(model(torch.randn(2, 4)).pow(2).mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    def save() -> None:
        accelerator.save_state(sys.argv[1])  # the engine's save_checkpoint, tag "pytorch_model"

    return model, step, save


torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(4, histories.MODELS[RUN.get("model", "a")]))
resume = RUN.get("resume")
build = by_accelerate if RUN.get("driver") == "accelerate" else by_engine
config = histories.config_of(RUN["scheduler"], RUN["zero"])
if resume is not None and resume["load"] == "universal":
    config["checkpoint"] = {"load_universal": True}  # load_checkpoint reads the tag latest_universal names
engine, step, save = build(config, module, resume)
seen = StepLrs(torch_optimizer(engine))
for _ in range(1 if resume is not None else 2):
    step()
    seen.flush()
save()
(Path(sys.argv[2]) / f"rank{RANK}.json").write_text(json.dumps(seen.rows))
end_rank()
