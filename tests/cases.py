"""Scheduler cases beyond the golden trajectories: each returns what the user sees, as JSON.

Run in a fresh process (``python tests/cases.py [--patch] NAME...``; the tests fork it:
tests/fresh_process.py) so that each run decides whether the patch is applied; ``golden_cases.json``
holds what DeepSpeed 0.19.8 gives unpatched.
Real schedulers and real engines on CPU; no fakes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

CASES: dict[str, Callable[[], Any]] = {}


def case(function: Callable[[], Any]) -> Callable[[], Any]:
    CASES[function.__name__] = function
    return function


def _rounded(values: Any) -> Any:
    if isinstance(values, (list, tuple)):
        return [_rounded(v) for v in values]
    return round(float(values), 12)


def _params(count: int = 1) -> list[Any]:
    import torch

    return [torch.nn.Parameter(torch.zeros(2)) for _ in range(count)]


def _drive(optimizer: Any, scheduler: Any, steps: int) -> list[list[float]]:
    """The engine's order: the optimizer steps at the groups' lrs, then the scheduler steps."""
    rows = []
    for _ in range(steps):
        rows.append(_rounded([g["lr"] for g in optimizer.param_groups]))
        optimizer.step()
        scheduler.step()
    return rows


@case
def tensor_lr_cosine() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    optimizer = torch.optim.Adam(_params(), lr=torch.tensor(1e-3))
    scheduler = WarmupCosineLR(optimizer, total_num_steps=8, warmup_min_ratio=0.1, warmup_num_steps=3)
    return _drive(optimizer, scheduler, 6)


@case
def tensor_lr_cosine_two_groups() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    first, second = _params(2)
    optimizer = torch.optim.Adam([{"params": [first], "lr": torch.tensor(1e-3)},
                                  {"params": [second], "lr": torch.tensor(5e-4)}], lr=torch.tensor(1e-3))
    scheduler = WarmupCosineLR(optimizer, total_num_steps=8, warmup_min_ratio=0.1, warmup_num_steps=3)
    return _drive(optimizer, scheduler, 6)


@case
def tensor_lr_warmup() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    optimizer = torch.optim.Adam(_params(), lr=torch.tensor(1e-3))
    scheduler = WarmupLR(optimizer, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=4,
                         warmup_type="linear")
    return _drive(optimizer, scheduler, 6)


def _restored_lr_run(scheduler_type: str, params: dict[str, Any]) -> list[list[float]]:
    """A client optimizer whose state was restored after its fresh scheduler was built, through an engine."""
    import deepspeed
    import torch
    from deepspeed.runtime import lr_schedules

    from accelerate_warmup_patch.cli import demo

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = getattr(lr_schedules, scheduler_type)(optimizer, **params)
    state = optimizer.state_dict()
    state["param_groups"][0]["lr"] = 6e-4  # what a checkpoint of an earlier run holds
    optimizer.load_state_dict(state)
    config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config)
    recorder = demo.StepLrs(demo.torch_optimizer(engine))
    for _ in range(3):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()
        recorder.flush()
    return _rounded(recorder.rows)  # type: ignore[no-any-return]


@case
def restored_lr_warmup() -> Any:
    return _restored_lr_run("WarmupLR", {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5,
                                         "warmup_type": "linear"})


@case
def restored_lr_one_cycle() -> Any:
    return _restored_lr_run("OneCycle", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 3,
                                         "cycle_momentum": False})


def _scaled_warmup() -> Any:
    from deepspeed.runtime.lr_schedules import WarmupLR

    class Scaled(WarmupLR):  # type: ignore[misc]
        """Each group's lr scaled: an override of get_lr() that the newest constructor asks."""

        def __init__(self, optimizer: Any, scales: list[float], **kwargs: Any) -> None:
            self.scales = scales
            super().__init__(optimizer, **kwargs)

        def get_lr(self) -> list[float]:
            return [lr * scale for lr, scale in zip(super().get_lr(), self.scales)]

    return Scaled


@case
def subclass_overriding_get_lr() -> Any:
    import torch

    first, second = _params(2)
    optimizer = torch.optim.SGD([{"params": [first]}, {"params": [second]}], lr=1e-3)
    scheduler = _scaled_warmup()(optimizer, [1.0, 0.1], warmup_min_lr=1e-4, warmup_max_lr=1e-3,
                                 warmup_num_steps=4, warmup_type="linear")
    return _drive(optimizer, scheduler, 4)


@case
def subclass_with_a_floored_cosine() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    class Floored(WarmupCosineLR):  # type: ignore[misc]
        def get_lr(self) -> list[float]:
            return [max(1e-5, lr) for lr in super().get_lr()]

    optimizer = torch.optim.SGD(_params(), lr=1e-3)
    return _drive(optimizer, Floored(optimizer, total_num_steps=8, warmup_num_steps=3, warmup_type="linear"), 4)


@case
def unhashable_subclass() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    class Compared(WarmupLR):  # type: ignore[misc]
        def __eq__(self, other: object) -> bool:  # defines __eq__ only: instances are unhashable
            return isinstance(other, Compared) and other.min_lrs == self.min_lrs

    optimizer = torch.optim.SGD(_params(), lr=1e-3)
    scheduler = Compared(optimizer, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=4, warmup_type="linear")
    return _drive(optimizer, scheduler, 3)


@case
def cosine_past_total() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    optimizer = torch.optim.SGD(_params(), lr=1e-3)
    scheduler = WarmupCosineLR(optimizer, total_num_steps=6, warmup_num_steps=2, warmup_type="linear")
    return _drive(optimizer, scheduler, 10)


@case
def cosine_total_equals_warmup() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    optimizer = torch.optim.SGD(_params(), lr=1e-3)
    scheduler = WarmupCosineLR(optimizer, total_num_steps=3, warmup_num_steps=3, warmup_type="linear")
    return _drive(optimizer, scheduler, 5)


@case
def cosine_unknown_warmup_type() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR

    optimizer = torch.optim.SGD(_params(), lr=1e-3)
    scheduler = WarmupCosineLR(optimizer, total_num_steps=8, warmup_num_steps=3, warmup_type="cubic")
    return [scheduler.warmup_type, _drive(optimizer, scheduler, 4)]


@case
def get_last_lr_after_construction() -> Any:
    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    optimizer = torch.optim.SGD(_params(), lr=1e-5)  # already at warmup_min_lr: nothing to change
    scheduler = WarmupLR(optimizer, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=4)
    return _rounded(scheduler.get_last_lr())


@case
def reported_before_the_first_step() -> Any:
    """What get_lr(), get_last_lr() and get_lr_ratio() say before the first step, and what the groups hold."""
    import torch
    from deepspeed.runtime.lr_schedules import WarmupCosineLR, WarmupDecayLR, WarmupLR

    out = {}
    for name, build in {
        "WarmupLR": lambda o: WarmupLR(o, warmup_min_lr=0.01, warmup_max_lr=0.1, warmup_num_steps=4),
        "WarmupDecayLR": lambda o: WarmupDecayLR(o, total_num_steps=8, warmup_min_lr=0.01, warmup_max_lr=0.1,
                                                 warmup_num_steps=4),
        "WarmupCosineLR": lambda o: WarmupCosineLR(o, total_num_steps=8, warmup_num_steps=4),
    }.items():
        first, second = _params(2)
        optimizer = torch.optim.SGD([{"params": [first]}, {"params": [second], "lr": 5e-2}], lr=0.1)
        scheduler = build(optimizer)
        out[name] = {"get_lr": _rounded(scheduler.get_lr()), "get_last_lr": _rounded(scheduler.get_last_lr()),
                     "groups": _rounded([g["lr"] for g in optimizer.param_groups])}
        if name == "WarmupCosineLR":
            ratio = scheduler.get_lr_ratio()
            out[name]["get_lr_ratio"] = [type(ratio).__name__, _rounded(ratio)]
    return out


@case
def engine_reports_its_start() -> Any:
    """Through deepspeed.initialize, warmup_min_lr 0.01: what the scheduler reports and the optimizer holds."""
    import deepspeed
    import torch

    from accelerate_warmup_patch.cli import demo

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(4, 4)
    config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-1, "torch_adam": True}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.01, "warmup_max_lr": 0.1,
                                                           "warmup_num_steps": 4}}}
    engine, _, _, scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                   config=config)
    return {"get_lr": _rounded(scheduler.get_lr()),
            "groups": _rounded([g["lr"] for g in demo.torch_optimizer(engine).param_groups])}


LATE = "late_import_raw_engine"


@case
def late_import_raw_engine() -> Any:
    """An engine built from its config, then the patch imported, then raw backward/step (no net runs)."""
    import deepspeed
    import torch

    from accelerate_warmup_patch.cli import demo

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                           "warmup_num_steps": 5, "warmup_type": "linear"}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    if "--patch" in sys.argv:
        import accelerate_warmup_patch

        accelerate_warmup_patch.apply()
    recorder = demo.StepLrs(demo.torch_optimizer(engine))
    for _ in range(3):
        engine.backward(engine(torch.randn(2, 4)).pow(2).mean())
        engine.step()
        recorder.flush()
    return _rounded(recorder.rows)


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")] or [name for name in CASES if name != LATE]
    import accelerate_warmup_patch

    accelerate_warmup_patch.remove()  # the import armed it: each run decides (the late case applies later)
    if LATE in names and len(names) > 1:
        raise SystemExit(f"{LATE} runs alone: it applies the patch after its engine is built")
    if "--patch" in argv and LATE not in names:
        accelerate_warmup_patch.apply()
    results = {}
    for name in names:
        try:
            results[name] = CASES[name]()
        except Exception as error:  # what the user sees is the exception: it is the case's result
            results[name] = {"raised": type(error).__name__}
    status = accelerate_warmup_patch.status()
    print("RESULT " + json.dumps({"results": results, "status": status}), flush=True)
    if "torch.distributed" in sys.modules:
        from accelerate_warmup_patch.cli import demo

        demo.tear_down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
