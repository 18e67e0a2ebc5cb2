"""One rank of a job of a run history (tests/histories.py's ``job`` and ``jobresume`` steps, launched by torchrun
from tests/children/history.py, on the installed DeepSpeed or on another release's code): ``history_job.py SAVE_DIR
OUT RUN_JSON``, RUN_JSON ``{"modes": [each rank's], "scheduler": ..., "zero": ..., "model": "a", "tag": null,
"resume": null or {"from": FOLDER, "load": "whole" | "no-optimizer" | "no-scheduler" | "universal"},
"driver": "engine" | "accelerate" | "trainer", "accumulate": 1 | 2}``. Each rank arms the patch in its own mode
(``off``: removed), trains a fresh engine two optimizer steps of ``accumulate`` micro-batches each (or loads FOLDER's
newest save, or its universal checkpoint, and trains one), saves into
SAVE_DIR (DeepSpeed's global_stepN, or ``tag``; through accelerate, its ``save_state``: the tag ``pytorch_model``;
through the HF Trainer, SAVE_DIR is the ``checkpoint-N`` it writes into its output folder), and writes the lrs its own
optimizer used at each step to OUT/rank<r>.json."""

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
from accelerate_warmup_patch.cli.demo import StepLrs, innermost_optimizer, torch_optimizer
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
        with accelerator.accumulate(model):  # a boundary every gradient_accumulation_steps-th micro-batch
            accelerator.backward(model(torch.randn(2, 4)).pow(2).mean())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

    def save() -> None:
        accelerator.save_state(sys.argv[1])  # the engine's save_checkpoint, tag "pytorch_model"

    return model, step, save


# the values the Trainer fills in where the config says "auto" (transformers' HfTrainerDeepSpeedConfig:
# trainer_config_process and trainer_config_finalize), by block; ``None``: the top level
TRAINER_FILLS = {None: ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"),
                 "optimizer": ("lr", "betas", "eps", "weight_decay"),
                 "scheduler": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")}


def trainers_config(config: dict[str, Any], given: str) -> dict[str, Any] | str:
    """The config as the Trainer is given it (histories.GIVEN): the dict itself, the dict with "auto" for each value
    the Trainer fills in (from its arguments, which hold the dict's values: the engine gets the same numbers), or a
    path to that (this rank's own file beside its lrs)."""
    if given == "dict":
        return config
    auto: dict[str, Any] = json.loads(json.dumps(config))
    for block, keys in TRAINER_FILLS.items():
        values = auto if block is None else auto.get(block, {}).get("params", {})
        # a scheduler's own keys only (each class lacks some); the others each from an argument the Trainer has
        filled = [key for key in keys if key in values] if block == "scheduler" else keys
        values.update(dict.fromkeys(filled, "auto"))
    if given == "auto":
        return auto
    path = Path(sys.argv[2]) / f"ds_config-rank{RANK}.json"
    path.write_text(json.dumps(auto))
    return str(path)


def by_trainer(config: dict[str, Any], module: Any, resume: dict[str, str] | None,
               steps: int) -> list[list[float | None]]:
    """The HF Trainer over the same module and config (its TrainingArguments those the config holds, so that what
    the Trainer fills in is what the dict holds: the WarmupDecayLR and WarmupCosineLR total_num_steps is its
    max_steps; given as RUN's ``given`` says, trainers_config), a fresh run or ``resume_from_checkpoint`` of
    ``resume``'s checkpoint-N, ``steps`` optimizer steps, then its own save: SAVE_DIR, the checkpoint-N of its output
    folder (and, where RUN's ``saves`` is 2, one after each step: checkpoint-1 beside it). The lrs its optimizer used
    at each step."""
    from transformers import Trainer, TrainerCallback, TrainingArguments

    save_dir = Path(sys.argv[1])
    # no scheduler block (histories.TRAINERS_OWN): the Trainer's own linear warmup over as many steps
    params = config.get("scheduler", {"params": {"warmup_num_steps": 5}})["params"]

    class Quadratic(Trainer):  # type: ignore[misc]
        """The engine road's loss, of the module's own output (the module stays the engine road's: alike names)."""

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            return model(inputs["input"]).pow(2).mean()

    class Steps(TrainerCallback):  # type: ignore[misc]
        """Each step's lrs (the pre-hook on the engine's torch optimizer, set once the Trainer has built and resumed
        it); the Trainer's save and stop after ``steps`` steps of this run."""

        seen: Any = None
        first = 0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.seen, self.first = StepLrs(innermost_optimizer(kwargs["optimizer"])), state.global_step

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.seen.flush()
            if state.global_step - self.first >= steps:
                control.should_save = control.should_training_stop = True

    watch = Steps()
    each_step = {"save_strategy": "steps", "save_steps": 1} if RUN.get("saves", 1) == 2 else {"save_strategy": "no"}
    args = TrainingArguments(
        output_dir=str(save_dir.parent), deepspeed=trainers_config(config, RUN.get("given", "dict")),
        per_device_train_batch_size=config[
            "train_micro_batch_size_per_gpu"], learning_rate=config["optimizer"]["params"]["lr"],
        gradient_accumulation_steps=config.get("gradient_accumulation_steps", 1),
        warmup_steps=params["warmup_num_steps"], max_steps=params.get("total_num_steps", 20),
        lr_scheduler_type="linear", **each_step,
        logging_strategy="no", report_to=[], disable_tqdm=True, remove_unused_columns=False, seed=0)
    data = [{"input": row} for row in torch.randn(64, 4)]
    trainer = Quadratic(model=module, args=args, train_dataset=data, callbacks=[watch])
    trainer.train(resume_from_checkpoint=resume["from"] if resume is not None else None)
    if not (save_dir / "trainer_state.json").exists():
        raise RuntimeError(f"the Trainer did not save {save_dir.name}: {sorted(os.listdir(save_dir.parent))}")
    return list(watch.seen.rows)


torch.manual_seed(0)
module = torch.nn.Sequential(torch.nn.Linear(4, histories.MODELS[RUN.get("model", "a")]))
resume = RUN.get("resume")
build = by_accelerate if RUN.get("driver") == "accelerate" else by_engine
config = histories.config_of(RUN["scheduler"], RUN["zero"])
accumulate = RUN.get("accumulate", 1)
if accumulate > 1:  # the engine steps the optimizer at every accumulate-th micro-batch
    config["gradient_accumulation_steps"] = accumulate
if resume is not None and resume["load"] == "universal":
    config["checkpoint"] = {"load_universal": True}  # load_checkpoint reads the tag latest_universal names
if RUN.get("driver") == "trainer":
    rows = by_trainer(config, module, resume, 1 if resume is not None else 2)
else:
    engine, step, save = build(config, module, resume)
    seen = StepLrs(torch_optimizer(engine))
    for _ in range((1 if resume is not None else 2) * accumulate):
        step()
        seen.flush()  # a row only where the optimizer stepped
    save()
    rows = seen.rows
(Path(sys.argv[2]) / f"rank{RANK}.json").write_text(json.dumps(rows))
end_rank()
