"""The space of scheduler configurations the differential tier (tests/test_differential.py) searches, and the run
that gives each optimizer step's lrs on one ``lr_schedules`` module.

Every scheduler class DeepSpeed ships, every parameter of its constructor (absent, or an edge value, per group where
the class takes lists), one to three groups, float or tensor lrs, what a script may write into the optimizer's groups
between the constructor and step 0, a resume (``state_dict`` into a fresh scheduler, with or without the optimizer's
own state), and enough steps to pass every phase of the schedule. A run drives the scheduler as DeepSpeed's engine
does (the optimizer steps at the groups' lrs, then the scheduler steps) on a bare torch optimizer: no engine, so a
configuration costs milliseconds.

Test tooling: hypothesis and torch, no DeepSpeed import here (the module a run drives is handed to it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

CLASSES = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")
# the warmup types the reference knows, and one it does not (it falls back to log and says so: PR #8151)
WARMUP_TYPES = ("log", "linear", "cosine")
# a few lrs with edge values: zero, equal bounds, a lr above the peak, and a value float32 cannot hold exactly
LRS = (0.0, 1e-5, 1e-4, 3e-4, 1e-3, 0.1, 1.0)
RATIOS = (0.0, 1e-4, 0.1, 0.5, 1.0)
MAX_STEPS = 40  # every phase of the short schedules below, and past their end


@dataclass(frozen=True)
class Config:
    """One scheduler as a user's script builds and drives it."""

    scheduler: str
    group_lrs: tuple[float, ...]  # the optimizer's lr per group, as the script configured it
    tensor_lr: bool  # the groups hold their lr as a 0-d tensor (a torch compile-friendly optimizer)
    params: dict[str, Any] = field(hash=False)  # the constructor's keyword arguments (absent: its default)
    before_step0: tuple[float, ...] | None  # lrs the script writes into the groups after building, before step 0
    resume_after: int | None  # steps before a resume: state_dict into a fresh scheduler (and optimizer)
    restore_optimizer: bool  # the resume loads the optimizer's state_dict too (its lrs), as a checkpoint load does
    steps: int

    @property
    def groups(self) -> int:
        return len(self.group_lrs)

    def describe(self) -> str:
        return (f"{self.scheduler}(groups={list(self.group_lrs)}, tensor={self.tensor_lr}, {self.params}, "
                f"before_step0={self.before_step0}, resume_after={self.resume_after}/"
                f"{'optimizer too' if self.restore_optimizer else 'scheduler only'}, steps={self.steps})")


def _maybe(draw: st.DrawFn, name: str, values: st.SearchStrategy[Any], params: dict[str, Any]) -> None:
    """A parameter given, or left to the constructor's default."""
    if draw(st.booleans()):
        params[name] = draw(values)


def _per_group(groups: int, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """One value for every group, or a list of one per group (the classes that take lists)."""
    return st.one_of(values, st.lists(values, min_size=groups, max_size=groups))


def _warmup_params(draw: st.DrawFn, groups: int, params: dict[str, Any]) -> None:
    _maybe(draw, "warmup_min_lr", _per_group(groups, st.sampled_from(LRS)), params)
    _maybe(draw, "warmup_max_lr", _per_group(groups, st.sampled_from(LRS)), params)
    _maybe(draw, "warmup_num_steps", st.integers(1, 12), params)
    _maybe(draw, "warmup_type", st.sampled_from(WARMUP_TYPES), params)


def _params(draw: st.DrawFn, scheduler: str, groups: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if scheduler in ("WarmupLR", "WarmupDecayLR"):
        _warmup_params(draw, groups, params)
        if scheduler == "WarmupDecayLR":
            params["total_num_steps"] = draw(st.integers(1, 24))  # required
    elif scheduler == "WarmupCosineLR":
        params["total_num_steps"] = draw(st.integers(1, 24))
        _maybe(draw, "warmup_min_ratio", st.sampled_from(RATIOS), params)
        _maybe(draw, "cos_min_ratio", st.sampled_from(RATIOS), params)
        _maybe(draw, "warmup_num_steps", st.integers(1, 12), params)
        _maybe(draw, "warmup_type", st.sampled_from(WARMUP_TYPES), params)
    elif scheduler == "OneCycle":
        params["cycle_min_lr"] = draw(_per_group(groups, st.sampled_from(LRS)))
        params["cycle_max_lr"] = draw(_per_group(groups, st.sampled_from(LRS)))
        _maybe(draw, "cycle_first_step_size", st.integers(1, 10), params)
        _maybe(draw, "cycle_second_step_size", st.integers(0, 10), params)
        _maybe(draw, "cycle_first_stair_count", st.integers(0, 4), params)
        _maybe(draw, "cycle_second_stair_count", st.integers(0, 4), params)
        _maybe(draw, "decay_step_size", st.integers(0, 5), params)
        _maybe(draw, "decay_lr_rate", st.sampled_from((0.0, 0.001, 0.5)), params)
        _maybe(draw, "cycle_momentum", st.booleans(), params)
    else:  # LRRangeTest
        _maybe(draw, "lr_range_test_min_lr", _per_group(groups, st.sampled_from(LRS)), params)
        _maybe(draw, "lr_range_test_step_size", st.integers(1, 8), params)
        _maybe(draw, "lr_range_test_step_rate", st.sampled_from((0.0, 0.5, 1.0, 4.0)), params)
        _maybe(draw, "lr_range_test_staircase", st.booleans(), params)
    # a scheduler configured to start mid-way (a documented parameter of every class)
    _maybe(draw, "last_batch_iteration", st.integers(-1, 8), params)
    return params


@st.composite
def configs(draw: st.DrawFn, classes: tuple[str, ...] = CLASSES) -> Config:
    """A scheduler configuration of one of ``classes``, as a script could write it."""
    scheduler = draw(st.sampled_from(classes))
    groups = draw(st.integers(1, 3))
    group_lrs = tuple(draw(st.lists(st.sampled_from(LRS), min_size=groups, max_size=groups)))
    steps = draw(st.integers(1, MAX_STEPS))
    resume_after = draw(st.none() | st.integers(0, steps))
    return Config(
        scheduler=scheduler, group_lrs=group_lrs, tensor_lr=draw(st.booleans()),
        params=_params(draw, scheduler, groups),
        before_step0=draw(st.none() | st.lists(st.sampled_from(LRS), min_size=groups, max_size=groups).map(tuple)),
        resume_after=resume_after, restore_optimizer=draw(st.booleans()), steps=steps)


# The run ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Lr:
    """One group's lr as an optimizer step used it: its value and whether the group held a tensor."""

    value: float
    tensor: bool


@dataclass
class Trace:
    """What a run saw: each optimizer step's lrs, the WARNINGs DeepSpeed's logger gave, or the error that ended it
    (where: "construction" or "step N")."""

    steps: list[tuple[Lr, ...]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: tuple[str, str] | None = None
    seen: list[Any] = field(default_factory=list)  # what ``observe`` said before each step


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def deepspeed_warnings(logger: logging.Logger) -> Iterator[list[str]]:
    """The WARNING messages ``logger`` (DeepSpeed's) gives inside the block."""
    handler = _Warnings()
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def _optimizer(config: Config) -> Any:
    import torch

    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": _lr(config, lr)} for lr in config.group_lrs]
    return torch.optim.Adam(groups, lr=_lr(config, config.group_lrs[0]))


def _lr(config: Config, value: float) -> Any:
    import torch

    return torch.tensor(value) if config.tensor_lr else value


def _used(optimizer: Any) -> tuple[Lr, ...]:
    return tuple(Lr(float(g["lr"]), hasattr(g["lr"], "item")) for g in optimizer.param_groups)


# what a test asks of the scheduler and its optimizer right before each optimizer step
Observe = Callable[[Any, Any], Any]


def run(module: ModuleType, config: Config, logger: logging.Logger, observe: Observe | None = None) -> Trace:
    """Drive ``config`` on the scheduler classes of ``module`` (a DeepSpeed ``lr_schedules``): the lrs each optimizer
    step uses, in the engine's order, through a resume where the config has one."""
    trace = Trace()
    with deepspeed_warnings(logger) as said:
        try:
            _drive(module, config, trace, observe)
        except Exception as error:  # what the release itself raises is part of what it does
            trace.error = (f"step {len(trace.steps)}" if trace.steps else "construction", type(error).__name__)
    trace.warnings = list(said)
    return trace


def _drive(module: ModuleType, config: Config, trace: Trace, observe: Observe | None) -> None:
    cls = getattr(module, config.scheduler)
    optimizer = _optimizer(config)
    scheduler = cls(optimizer, **config.params)
    if config.before_step0 is not None:
        for group, lr in zip(optimizer.param_groups, config.before_step0):
            group["lr"] = _lr(config, lr)
    for step in range(config.steps):
        if step == config.resume_after:
            optimizer, scheduler = _resumed(cls, config, optimizer, scheduler)
        trace.steps.append(_used(optimizer))
        if observe is not None:
            trace.seen.append(observe(scheduler, optimizer))
        scheduler.step()


def _resumed(cls: type, config: Config, optimizer: Any, scheduler: Any) -> tuple[Any, Any]:
    """A new process's optimizer and scheduler, built as the script builds them, then loaded from the old ones'
    state (the optimizer's first, as DeepSpeed's load_checkpoint does)."""
    saved_optimizer, saved_scheduler = optimizer.state_dict(), scheduler.state_dict()
    params = {k: v for k, v in config.params.items() if k != "last_batch_iteration"}
    optimizer = _optimizer(config)
    scheduler = cls(optimizer, **params)
    if config.restore_optimizer:
        optimizer.load_state_dict(saved_optimizer)
    scheduler.load_state_dict(saved_scheduler)
    return optimizer, scheduler
