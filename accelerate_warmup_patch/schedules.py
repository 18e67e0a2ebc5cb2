"""Reading and writing a DeepSpeed scheduler: its class, fresh or not, its lrs, and the one change routine.

What the reference release's methods return where older ones differ is in each change's unit (``upstream/``),
run by backport.py. Nothing here mutates a scheduler except ``write``, which writes the
groups' lrs the way the running release itself writes them, and ``change``, which restores what an
action changed when it fails.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from . import failures, installed, releases
from .settings import Mode
from .state import STATE

SCHEDULES_MODULE = "deepspeed.runtime.lr_schedules"
KNOWN: tuple[str, ...] = releases.scheduler_classes()


def class_name(scheduler: object) -> str | None:
    """The DeepSpeed scheduler class this object is (or derives from); None for anything else."""
    for cls in type(scheduler).__mro__:
        if cls.__module__ == SCHEDULES_MODULE and cls.__name__ in KNOWN:
            return cls.__name__
    return None


def torch_class(scheduler: object) -> str | None:
    """The class of a torch lr scheduler that is not one of DeepSpeed's (the HF Trainer's own, a LambdaLR), as
    ``module.qualname``; None for one of DeepSpeed's, for anything else, and where torch's module is not loaded.
    torch's schedulers set each group's lr when built, on every DeepSpeed release: the bug cannot reach them."""
    module = sys.modules.get("torch.optim.lr_scheduler")
    bases = tuple(base for base in (getattr(module, "LRScheduler", None), getattr(module, "_LRScheduler", None))
                  if isinstance(base, type))
    if not bases or class_name(scheduler) is not None or not isinstance(scheduler, bases):
        return None
    kind = type(scheduler)
    return f"{kind.__module__}.{kind.__qualname__}"


def torch_optimizer(optimizer: Any) -> Any:
    """The torch optimizer a scheduler acts on, as DeepSpeed's schedulers unwrap it (get_torch_optimizer):
    the optimizer itself, or the torch optimizer a DeepSpeed optimizer wraps (``.optimizer``)."""
    import torch

    if not isinstance(optimizer, torch.optim.Optimizer) and isinstance(getattr(optimizer, "optimizer", None),
                                                                       torch.optim.Optimizer):
        return optimizer.optimizer
    return optimizer


def is_fresh(scheduler: Any) -> bool:
    """True while the scheduler has never stepped: built with last_batch_iteration=-1."""
    return getattr(scheduler, "last_batch_iteration", None) == -1


def lr_value(lr: Any) -> float:
    """A group's lr as a float, whether the group holds a float or a tensor (DeepSpeed 0.18.1+)."""
    return float(lr.item()) if hasattr(lr, "item") else float(lr)


def write(groups: list[dict[str, Any]], lrs: list[Any], kinds: tuple[Any, ...] | list[Any] | None = None) -> list[Any]:
    """Write ``lrs`` into the groups as the installed build's own step writes them, a tensor lr kept a tensor (where
    the group held one, or where ``kinds``, its lrs when the constructor was called, did); returns what the groups
    hold.

    Through the build's ``update_lr`` where it has one (from 0.15.3's code); else as its step assigns, keeping a
    group's tensor lr a tensor of the same dtype and device where its step keeps tensors (a vendor's 0.14.4), and
    in place only where its step writes in place: up to 0.19.3 WarmupCosineLR's org_lrs are the groups' own lr
    objects, and an in-place write would change its whole schedule."""
    held = list(kinds) if kinds is not None and len(kinds) == len(groups) else [group["lr"] for group in groups]
    _write_as_the_build(groups, lrs)
    # The reference's constructor keeps a tensor lr a tensor (PR #8202). A build whose step writes floats (up to
    # 0.18.0) would turn it into a float (and its own constructor does so with the patch's get_lr() answer), so the
    # patch's write keeps the tensor, in a new one: the old object may be held by the schedule (org_lrs).
    for group, old in zip(groups, held):
        if hasattr(old, "clone") and not hasattr(group["lr"], "clone"):
            group["lr"] = old.detach().clone().fill_(lr_value(group["lr"]))
    return [group["lr"] for group in groups]


def _write_as_the_build(groups: list[dict[str, Any]], lrs: list[Any]) -> None:
    update_lr = getattr(sys.modules.get(SCHEDULES_MODULE), "update_lr", None)
    if callable(update_lr):
        update_lr(groups, lrs)
        return
    step_lr = installed.step_lr()
    for group, lr in zip(groups, lrs):
        held = group["lr"]
        if step_lr == releases.StepLr.FLOAT or not hasattr(held, "fill_"):
            group["lr"] = lr  # what step() does on these releases
        elif step_lr == releases.StepLr.IN_PLACE:
            held.fill_(lr_value(lr))
        else:
            group["lr"] = held.clone().fill_(lr_value(lr))


def fmt(values: list[Any]) -> str:
    """Lrs for a log line: ``[0.001, 0.0005]``, floats and tensors alike."""
    return "[" + ", ".join(repr(lr_value(v)) for v in values) + "]"


# one group's lr before and after a change: (group index, old lr, new lr)
Moved = tuple[int, float, float]
Result = TypeVar("Result")


@dataclass(frozen=True)
class Changed(Generic[Result]):
    """What a change did: the groups' lr changes, and what its action returned."""

    moved: list[Moved]
    result: Result


def change(scheduler: Any, *, key: str, what: str, action: Callable[[], Result], consequence: str,
           all_groups: bool = False) -> Changed[Result] | None:
    """The one way the patch changes a scheduler: snapshot, act, restore on error and report (``key``,
    ``what`` and ``consequence`` say it, as ``failures.report`` does); returns the groups' lr changes (every
    group's with ``all_groups``) and the action's result, or None when it failed and restored.

    In warn mode the action runs as in reset mode, and then everything it changed is restored: the same
    decisions, with nothing left written (the groups hold their very lr objects, with their values)."""
    saved = None
    dry = STATE.mode == Mode.WARN
    try:
        groups = scheduler.optimizer.param_groups
        saved = _snapshot(scheduler, groups)
        before = [lr_value(g["lr"]) for g in groups]
        with STATE.dry_run(dry):
            result = action()
        after = [lr_value(g["lr"]) for g in groups]
        if dry:
            _restore(scheduler, groups, saved)
    except Exception as error:
        if saved is not None:
            _restore(scheduler, groups, saved)
        failures.report(key, what=what, error=error, consequence=consequence)
        return None
    moved = [(i, old, new) for i, (old, new) in enumerate(zip(before, after)) if all_groups or old != new]
    return Changed(moved, result)


def said(changes: list[Moved]) -> str:
    """``group 0 lr 0.001 -> 0.0; group 1 lr ...``: the changes for a log line."""
    return "; ".join(f"group {i} lr {old!r} -> {new!r}" for i, old, new in changes)


_Snapshot = tuple[dict[str, Any], list[Any], list[Any]]


def _snapshot(scheduler: Any, groups: list[dict[str, Any]]) -> _Snapshot:
    """The scheduler's attributes, and each group's lr object with a copy of its value (a tensor lr may be
    filled in place by the release's step)."""
    return copy.copy(vars(scheduler)), [g["lr"] for g in groups], lr_copies(groups)


def lr_copies(groups: list[dict[str, Any]]) -> list[Any]:
    """Each group's lr as it is now: a tensor lr is cloned, since a release may change it in place."""
    return [g["lr"].clone() if hasattr(g["lr"], "clone") else g["lr"] for g in groups]


def _restore(scheduler: Any, groups: list[dict[str, Any]], saved: _Snapshot) -> None:
    attributes, objects, values = saved
    vars(scheduler).clear()
    vars(scheduler).update(attributes)
    for group, lr, value in zip(groups, objects, values):
        if hasattr(lr, "copy_") and hasattr(value, "shape"):
            lr.copy_(value)
        group["lr"] = lr
