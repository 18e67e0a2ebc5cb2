"""Real DeepSpeed and accelerate training loops on CPU that record the lr each optimizer step used.

Used in-process by the tests and as a subprocess runner (``python tests/harness.py SPEC...``) for
the cases that need a fresh process: import order, start-up activation, accelerate's global state
(run_specs forks most runs from a server that has imported torch and transformers alone, and starts a new
interpreter for those whose environment acts at start-up: tests/fresh_process.py).
Every scenario is a tiny real model, a real engine, real optimizer steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import era_shims
import fresh_process

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden.json").read_text())


def _import_demo_without_arming() -> Any:
    """The package's training loop, without this import arming the patch (each run decides).

    What a .pth armed before stays armed."""
    armed_before = "accelerate_warmup_patch" in sys.modules
    import accelerate_warmup_patch
    from accelerate_warmup_patch.cli import demo

    if not armed_before:
        accelerate_warmup_patch.remove()
    return demo


demo = _import_demo_without_arming()

SCHEDULERS: dict[str, dict[str, Any]] = {
    "WarmupLR-linear": {"type": "WarmupLR", "params": {
        "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}},
    "WarmupLR-log": {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "log"}},
    "WarmupLR-default-max": {"type": "WarmupLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_num_steps": 4, "warmup_type": "linear"}},
    "WarmupDecayLR": {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_max_lr": 1e-3, "warmup_num_steps": 3, "total_num_steps": 8,
        "warmup_type": "linear"}},
    "WarmupDecayLR-default-max": {"type": "WarmupDecayLR", "params": {
        "warmup_min_lr": 1e-5, "warmup_num_steps": 3, "total_num_steps": 8, "warmup_type": "linear"}},
    "WarmupCosineLR": {"type": "WarmupCosineLR", "params": {
        "warmup_min_ratio": 0.1, "warmup_num_steps": 3, "total_num_steps": 8, "warmup_type": "linear"}},
    "OneCycle": {"type": "OneCycle", "params": {
        "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 3, "cycle_momentum": False}},
    "none": {},
}


@dataclass
class Spec:
    """One training run. ``groups`` are the param groups' lrs (one entry per group)."""

    scheduler: str = "WarmupLR-linear"
    groups: list[float] = field(default_factory=lambda: [1e-3])
    grad_accum: int = 1
    zero: int = 0
    steps: int = 6
    path: str = "deepspeed"  # or "accelerate", "trainer", "schedule" (no engine)
    # when to import accelerate_warmup_patch: none | before (anything) | after (deepspeed; for accelerate:
    # after prepare) | late (road "client": after the scheduler is built, before deepspeed.initialize)
    patch: str = "none"
    mode: str | None = None  # apply(mode=...) for patch in (before, after)
    torch_scheduler: bool = False  # a client torch scheduler instead of DeepSpeed's
    save_to: str | None = None  # save a DeepSpeed checkpoint here after training (accelerate: save_state)
    resume_from: str | None = None  # load this checkpoint before training
    load_optimizer_states: bool = True
    load_module_only: bool = False  # load_checkpoint(load_module_only=True): upstream restores the module alone
    load_lr_scheduler_states: bool = True
    bf16: bool = False
    offload: bool = False  # ZeRO optimizer offload to CPU
    # how the deepspeed path builds its engine and scheduler: "config" (both from the config),
    # "client" (a torch optimizer and a WarmupLR object that user code builds, passed in),
    # "early-bound" (`from deepspeed import initialize` before the patch), "pipeline" (a PipelineEngine),
    # "own-step" (the script calls engine.backward() and then steps the optimizer and scheduler itself: global_steps
    # stays 0)
    road: str = "config"
    # user code steps the engine's DeepSpeed scheduler this many times after deepspeed.initialize (accelerate:
    # after prepare; the Trainer: at on_train_begin), before the first optimizer step: the old workaround
    user_steps: int = 0
    # fp16 with dynamic loss scaling, through a seam that lets DeepSpeed's CPU accelerator report fp16 support
    # (tests/fp16_run.py); the first ``overflow_steps`` optimizer steps overflow for real (a spike in the batch)
    fp16: bool = False
    overflow_steps: int = 0
    fused_adam: bool = False  # DeepSpeed's FusedAdam (a CPU op it compiles) instead of torch's Adam
    # the client_state save_checkpoint is given: None, or "gpt-neox" / "megatron", shaped like theirs (real numpy
    # and torch rng state objects; see _client_state), or "user", a training script's plain dict (USER_CLIENT_STATE).
    # Changes no lr, so not part of the key. A resume (resume_from) reports what load_checkpoint returned.
    client_state: str | None = None
    # the groups hold tensor lrs (a client torch Adam built with them): each step's lr types are reported
    tensor_lr: bool = False
    # fault injection, two jobs saving one tag (#47): another job's save folder, whose states files land in this
    # save's tag folder after this process wrote its own and before save_checkpoint returns (at the checkpoint
    # engine's commit). Changes no lr, so not part of the key.
    raced_by: str | None = None

    @property
    def key(self) -> str:
        groups = "+".join(f"{lr:g}" for lr in self.groups)
        extra = (":bf16" if self.bf16 else "") + (":offload" if self.offload else "")
        extra += ":torch-scheduler" if self.torch_scheduler else ""
        extra += f":{self.road}" if self.road != "config" else ""
        extra += f":user-steps{self.user_steps}" if self.user_steps else ""
        extra += ":fp16" if self.fp16 else ""
        extra += f":overflow{self.overflow_steps}" if self.overflow_steps else ""
        extra += ":fused-adam" if self.fused_adam else ""
        extra += ":tensor-lr" if self.tensor_lr else ""
        return f"{self.path}:{self.scheduler}:g{groups}:ga{self.grad_accum}:z{self.zero}{extra}"

    @property
    def newest_key(self) -> str:
        """The golden run with the same schedule: the road an engine was built by changes no lr."""
        path = "deepspeed" if self.path == "schedule" else self.path
        return replace(self, road="config", path=path).key


def ds_config(spec: Spec) -> dict[str, Any]:
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": spec.grad_accum,
        "optimizer": {"type": "Adam", "params": {"lr": spec.groups[0], "torch_adam": not spec.fused_adam}},
        "zero_optimization": {"stage": spec.zero},
        "steps_per_print": 10_000,
    }
    if spec.bf16:
        config["bf16"] = {"enabled": True}
    if spec.fp16:
        import fp16_run

        config["fp16"] = dict(fp16_run.FP16_CONFIG)
    if spec.offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if SCHEDULERS[spec.scheduler] and not spec.torch_scheduler:
        config["scheduler"] = SCHEDULERS[spec.scheduler]
    return config


def _model_and_params(spec: Spec) -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4) for _ in spec.groups]
    model = torch.nn.Sequential(*layers)
    if len(spec.groups) == 1:
        return model, list(model.parameters())
    return model, [{"params": list(layer.parameters()), "lr": lr} for layer, lr in zip(layers, spec.groups)]


def run_deepspeed(spec: Spec) -> list[list[float | None]]:
    import torch

    model, params = _model_and_params(spec)
    config = ds_config(spec)
    kwargs: dict[str, Any] = {}
    if spec.torch_scheduler:
        kwargs["lr_scheduler"] = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda k: (k + 1) / 4)
    if spec.save_to:
        kwargs["after"] = lambda engine: _save(spec, engine)
    if spec.resume_from:
        kwargs["before"] = lambda engine: _load(spec, engine)
    if spec.user_steps:
        kwargs["before"] = lambda engine: _user_steps(spec, engine.lr_scheduler)
    if spec.road == "client":
        from deepspeed.runtime import lr_schedules

        optimizer = torch.optim.AdamW(params, lr=spec.groups[0])
        scheduler = config.pop("scheduler")
        config.pop("optimizer")
        kwargs["optimizer"] = optimizer
        kwargs["lr_scheduler"] = getattr(lr_schedules, scheduler["type"])(optimizer, **scheduler["params"])
        params = None
        if spec.patch == "late":  # the scheduler was built before the patch was applied
            _import_patch(spec)
    if spec.tensor_lr:
        kwargs["optimizer"] = _tensor_lr_optimizer(spec, params)
        config.pop("optimizer")
        params = None
    if spec.road == "pipeline":
        return _train_pipeline(spec, config, model, params)
    if spec.road == "own-step":
        return _train_own_step(spec, config, model, params, kwargs)
    if spec.fp16:
        import fp16_run

        return fp16_run.train(spec, config, model, params)
    if spec.road == "early-bound":
        kwargs["initialize"] = _EARLY_BOUND[0]
    return demo.train_deepspeed(config, model, params, spec.steps, **kwargs)


# what the last load_checkpoint returned as the user's client_state (main() reports it with its run)
LOADED: dict[str, Any] = {}
# each optimizer step's lr type per group, of a run with tensor lrs (main() reports them with its run)
LR_TYPES: list[list[str]] = []


def _tensor_lr_optimizer(spec: Spec, params: Any) -> Any:
    """A torch Adam whose groups hold their lrs as tensors; a pre-hook notes each step's lr types."""
    import torch

    groups = params if isinstance(params[0], dict) else [{"params": params}]
    for group, lr in zip(groups, spec.groups):
        group["lr"] = torch.tensor(lr)
    optimizer = torch.optim.Adam(groups, lr=torch.tensor(spec.groups[0]), foreach=False)

    def note(opt: Any, args: Any, kwargs: Any) -> None:
        LR_TYPES.append([f"tensor {g['lr'].dtype}" if isinstance(g["lr"], torch.Tensor) else type(g["lr"]).__name__
                         for g in opt.param_groups])

    optimizer.register_step_pre_hook(note)
    return optimizer


def _save(spec: Spec, engine: Any) -> None:
    if spec.raced_by is not None:
        _race(engine, os.path.join(spec.raced_by, "ckpt"), os.path.join(str(spec.save_to), "ckpt"))
    engine.save_checkpoint(spec.save_to, tag="ckpt", client_state=_client_state(spec))


def _race(engine: Any, other: str, tag_folder: str) -> None:
    """Fault injection: another job's states files are written into ``tag_folder`` in the moment after this
    process wrote its own and before its save_checkpoint returns (the checkpoint engine's commit, once)."""
    import shutil

    commit = engine.checkpoint_engine.commit

    def raced_commit(*args: Any, **kwargs: Any) -> Any:
        for name in os.listdir(other):
            if name.endswith(".pt"):
                shutil.copy(os.path.join(other, name), os.path.join(tag_folder, name))
        engine.checkpoint_engine.commit = commit
        return commit(*args, **kwargs)

    engine.checkpoint_engine.commit = raced_commit


def _load(spec: Spec, engine: Any) -> None:
    _, client_state = engine.load_checkpoint(
        spec.resume_from, tag="ckpt", load_optimizer_states=spec.load_optimizer_states,
        load_lr_scheduler_states=spec.load_lr_scheduler_states, load_module_only=spec.load_module_only)
    LOADED["client_state"] = client_state


# a training script's own client_state, plain data (tests/test_mark.py: load_checkpoint returns it unchanged)
USER_CLIENT_STATE: dict[str, Any] = {"epoch": 2, "samples_seen": 96, "note": "resume me", "lr_history": [0.001, 0.0]}


def _client_state(spec: Spec) -> dict[str, Any]:
    """What a framework passes to save_checkpoint beside the model: gpt-neox's save_ds_checkpoint and
    Megatron-DeepSpeed's save_checkpoint (both megatron/checkpointing.py) save the python, numpy and torch rng
    states (and the cuda ones, which a CPU run has not), gpt-neox a dict of its args, Megatron its
    argparse.Namespace."""
    import argparse
    import random

    import numpy as np
    import torch

    if spec.client_state is None:
        return {}
    if spec.client_state == "user":
        return dict(USER_CLIENT_STATE)
    rng = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
           "torch_rng_state": torch.get_rng_state()}
    if spec.client_state == "gpt-neox":
        return {"iteration": spec.steps, "args": {"num_layers": len(spec.groups), "hidden_size": 4}, **rng}
    if spec.client_state == "megatron":
        args = argparse.Namespace(lr=spec.groups[0], deepspeed=True, train_iters=spec.steps)
        return {"args": args, "checkpoint_version": 3.0, "iteration": spec.steps, **rng}
    raise ValueError(f"client_state {spec.client_state!r}")


def _user_steps(spec: Spec, scheduler: Any) -> None:
    """The old workaround: user code steps the DeepSpeed scheduler itself before training."""
    for _ in range(spec.user_steps):
        scheduler.step()


_EARLY_BOUND: list[Any] = []  # `from deepspeed import initialize`, taken before the patch was applied


def _train_pipeline(spec: Spec, config: dict[str, Any], model: Any, params: Any) -> list[list[float | None]]:
    """The same layers as a one-stage PipelineModule, so that deepspeed.initialize builds a PipelineEngine,
    trained with train_batch (a PipelineEngine refuses forward/backward/step)."""
    import deepspeed
    import torch
    from deepspeed.pipe import PipelineModule

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    module = PipelineModule(layers=list(model), num_stages=1, loss_fn=lambda out, _: out.pow(2).mean())
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=params, config=config)
    _user_steps(spec, engine.lr_scheduler)
    recorder = demo.StepLrs(demo.torch_optimizer(engine))
    batches = iter([(torch.randn(2, 4), torch.zeros(2, 4)) for _ in range(spec.steps * spec.grad_accum)])
    for _ in range(spec.steps):
        engine.train_batch(data_iter=batches)
        recorder.flush()
    if spec.save_to:  # mp_rank_00 holds no layer: each layer_NN-model_states.pt does
        engine.save_checkpoint(spec.save_to, tag="ckpt")
    return recorder.rows


def _train_own_step(spec: Spec, config: dict[str, Any], model: Any, params: Any,
                    kwargs: dict[str, Any]) -> list[list[float | None]]:
    """A script of its own loop: engine.backward(), then the engine's optimizer and scheduler stepped by hand, not
    through engine.step(), so the engine's global_steps stays 0 while the optimizer and scheduler move."""
    import deepspeed
    import torch

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=config)
    recorder = demo.StepLrs(demo.torch_optimizer(engine))
    for _ in range(spec.steps):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.optimizer.step()
        engine.lr_scheduler.step()
        engine.optimizer.zero_grad()
        recorder.flush()
    if "after" in kwargs:
        kwargs["after"](engine)
    return recorder.rows


def run_accelerate(spec: Spec) -> list[list[float | None]]:
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

    demo.set_up_single_process()
    AcceleratorState._reset_state(True)  # one Accelerator per run, several runs per process
    GradientState._reset_state()
    config = ds_config(spec)
    plugin = DeepSpeedPlugin(hf_ds_config=config)
    accelerator = Accelerator(deepspeed_plugin=plugin, gradient_accumulation_steps=spec.grad_accum)
    model, params = _model_and_params(spec)
    optimizer = DummyOptim(params, lr=spec.groups[0])
    scheduler = DummyScheduler(optimizer)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    if spec.resume_from:
        accelerator.load_state(spec.resume_from)  # the engine's load_checkpoint
    if spec.patch == "after":
        _import_patch(spec)
    _user_steps(spec, model.lr_scheduler)  # the engine's scheduler (accelerate's wrapper's step() does nothing)
    recorder = demo.StepLrs(demo.torch_optimizer(model))
    for _ in range(spec.steps * spec.grad_accum):
        with accelerator.accumulate(model):
            loss = model(torch.randn(2, 4)).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        recorder.flush()
    if spec.save_to:
        accelerator.save_state(spec.save_to)  # the engine's save_checkpoint, tag "pytorch_model"
    return recorder.rows


TRAINER_SAVE_STEP = 3


def run_trainer(spec: Spec) -> list[list[float | None]]:
    """The HF Trainer with a DeepSpeed config whose scheduler and optimizer have "auto" values.

    Records the lr each optimizer step used, then appends the Trainer's logged ``learning_rate``
    values as one more row (prefixed by None) so both can be compared with the newest release.
    """
    import torch
    from accelerate.state import AcceleratorState, GradientState
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    demo.set_up_single_process()
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=16))
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (64, 8))]
    config = ds_config(spec)
    config["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}}
    config["train_micro_batch_size_per_gpu"] = "auto"
    config["gradient_accumulation_steps"] = "auto"
    if spec.torch_scheduler:
        config.pop("scheduler", None)
    else:
        config["scheduler"] = {"type": SCHEDULERS[spec.scheduler]["type"], "params": {
            k: "auto" for k in SCHEDULERS[spec.scheduler]["params"] if k != "warmup_type"} | {"warmup_type": "linear"}}

    class Record(TrainerCallback):  # type: ignore[misc]
        recorder: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder = demo.StepLrs(demo.innermost_optimizer(kwargs["optimizer"]))
            _user_steps(spec, kwargs["lr_scheduler"].scheduler)  # accelerate's wrapper of the engine's scheduler

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder.flush()

    record = Record()
    # a run that saves nothing still needs an output_dir: a scratch one, removed after
    with tempfile.TemporaryDirectory(prefix="awp-trainer-") as scratch:
        output = spec.save_to or spec.resume_from or scratch
        args = TrainingArguments(
            output_dir=output, deepspeed=config, per_device_train_batch_size=2,
            gradient_accumulation_steps=spec.grad_accum, max_steps=spec.steps, learning_rate=spec.groups[0],
            warmup_steps=5, lr_scheduler_type="linear", logging_steps=1, report_to=[],
            save_strategy="steps" if spec.save_to else "no", save_steps=TRAINER_SAVE_STEP,
            disable_tqdm=True, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[record])
        if spec.resume_from:
            trainer.train(resume_from_checkpoint=os.path.join(spec.resume_from, f"checkpoint-{TRAINER_SAVE_STEP}"))
        else:
            trainer.train()
    logged = [entry["learning_rate"] for entry in trainer.state.log_history if "learning_rate" in entry]
    return [*record.recorder.rows, [None, *logged]]


def run_schedule(spec: Spec) -> list[list[float | None]]:
    """No engine: the release's own scheduler class driven in the engine's order.

    For releases whose engine cannot run on CPU here, and for a scheduler that user code builds and
    steps itself: optimizer step, then scheduler step.
    """
    import torch
    from deepspeed.runtime import lr_schedules

    model, params = _model_and_params(spec)
    optimizer = torch.optim.AdamW(params, lr=spec.groups[0])
    config = SCHEDULERS[spec.scheduler]
    scheduler = getattr(lr_schedules, config["type"])(optimizer, **config["params"])  # the fix is in here
    rows: list[list[float | None]] = []
    for _ in range(spec.steps):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        rows.append([float(g["lr"]) for g in optimizer.param_groups])
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return rows


def _import_patch(spec: Spec) -> None:
    import accelerate_warmup_patch

    accelerate_warmup_patch.apply(spec.mode)


def run(spec: Spec) -> list[list[float | None]]:
    if spec.patch == "before":
        _import_patch(spec)
    era_shims.prepare()  # DeepSpeed 0.9-0.13 on CPU: stand-ins and settings, see tests/era_shims.py
    if spec.patch == "after" and _patch_loaded():
        raise RuntimeError("patch='after' needs an interpreter where nothing was patched yet")
    if spec.path == "accelerate":
        return run_accelerate(spec)
    if spec.path == "trainer":
        return run_trainer(spec)
    if spec.path == "schedule":
        return run_schedule(spec)
    if spec.patch == "after":
        import deepspeed  # (imported first, patched second)

        _EARLY_BOUND[:] = [deepspeed.initialize]
        _import_patch(spec)
    return run_deepspeed(spec)


class Ran:
    """One subprocess: its exit code, its stderr, and its results keyed by scenario."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.stdout = proc.stdout
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        self.data: dict[str, Any] = json.loads(line[len("RESULT "):]) if line else {}
        self.lrs = {r["key"]: r["lrs"] for r in self.data.get("results", [])}

    def patch_lines(self) -> list[str]:
        return [x for x in self.stderr.splitlines() if x.startswith("[accelerate_warmup_patch]")]


def run_specs(*specs: Spec, env: dict[str, str] | None = None, check: bool = True) -> Ran:
    """Run the specs in a fresh process of this venv (tests/fresh_process.py); its results keyed by scenario."""
    full_env = {**os.environ, **(env or {})}
    args = [str(HERE / "harness.py"), *(json.dumps(asdict(s)) for s in specs)]
    proc = fresh_process.run(args, full_env, cwd=str(HERE), timeout=900)
    ran = Ran(proc)
    # a CPU DeepSpeed process can abort in C++ teardown after its results are printed ("terminate called
    # without an active exception", seen once in the whole matrix): the results are complete, keep them
    aborted_after_results = proc.returncode == -signal.SIGABRT and bool(ran.data)
    if check and ((proc.returncode != 0 and not aborted_after_results) or not ran.data):
        raise AssertionError(f"harness failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return ran


def expected_unpatched_first_step(spec: Spec, deepspeed_version: str) -> list[float]:
    """What the guard table says this release's first optimizer step uses, per group."""
    from accelerate_warmup_patch import releases

    name = spec.scheduler.split("-")[0]
    newest = GOLDEN["runs"][spec.key][0]
    if spec.torch_scheduler:
        return list(newest)  # torch and HF schedulers set the lr at construction, on every release
    fact = releases.start_fact(name, deepspeed_version)
    if fact is None:
        raise LookupError(f"the table has no row for {name} on {deepspeed_version}")
    if fact.value is releases.Start.SETS_EVERY_GROUP:
        return list(newest)
    if fact.value is releases.Start.SETS_GROUP_0_ONLY:
        return [newest[0], *spec.groups[1:]]
    return list(spec.groups)


def _patch_loaded() -> bool:
    # the one seam: wrapt is loaded by the package's first wrap (no framework imports it)
    return "wrapt" in sys.modules


def _inject_fault() -> None:
    """Fault injection: the patch's own knowledge breaks, as a future bug of ours would."""
    from accelerate_warmup_patch import installed

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected fault")

    installed.built_wrong = broken  # type: ignore[assignment]  # asked before any scheduler is changed


def golden() -> dict[str, Any]:
    """The newest release's trajectories for every scenario, unpatched: the reference file."""
    import deepspeed
    import torch
    from scenarios import ALL

    runs = {spec.key: run(spec) for spec in ALL}
    return {"deepspeed": deepspeed.__version__, "torch": torch.__version__, "runs": runs}


def main(argv: list[str]) -> int:
    """Run each JSON spec in this interpreter; print one JSON line of results."""
    if argv[:1] == ["--golden"]:  # DeepSpeed prints to stdout: the file gets the JSON alone
        with open(argv[1], "w") as out:
            json.dump(golden(), out, indent=1)
            out.write("\n")
        _tear_down()
        return 0
    if os.environ.get("AWP_TEST_INJECT_FAULT"):
        _inject_fault()
    results = []
    for text in argv:
        spec = Spec(**json.loads(text))
        results.append({"spec": asdict(spec), "key": spec.key, "lrs": run(spec)})
        if spec.tensor_lr:
            results[-1]["lr_types"], LR_TYPES[:] = list(LR_TYPES), []
        if "client_state" in LOADED:  # each key's value as repr (DeepSpeed's own keys hold torch.Size)
            loaded = LOADED.pop("client_state")
            results[-1]["client_state"] = None if loaded is None else {str(k): repr(v) for k, v in loaded.items()}
    modules = sorted(m for m in ("accelerate_warmup_patch", "wrapt")
                     if m in sys.modules)
    status = None
    if "accelerate_warmup_patch" in sys.modules:
        status = sys.modules["accelerate_warmup_patch"].status()
    print("RESULT " + json.dumps({"results": results, "modules": modules, "status": status}), flush=True)
    _tear_down()
    return 0


def _tear_down() -> None:
    demo.tear_down()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
