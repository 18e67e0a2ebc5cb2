"""Knowledge of DeepSpeed's schedulers: what the newest release's methods return where older ones differ.

The reference is the release in ``releases.BEHAVIOR_REFERENCE``. Nothing here mutates a scheduler
except ``write``, which writes the groups' lrs the way the running release itself writes them.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from . import releases

SCHEDULES_MODULE = "deepspeed.runtime.lr_schedules"
KNOWN = releases.scheduler_classes()


@dataclass(frozen=True)
class Construction:
    """What a WarmupLR saw when it was built: its groups' lrs (None: unknown) and whether a peak was given."""

    group_lrs: tuple[Any, ...] | None
    max_lr_given: bool


def class_name(scheduler: object) -> str | None:
    """The DeepSpeed scheduler class this object is (or derives from); None for anything else."""
    for cls in type(scheduler).__mro__:
        if cls.__module__ == SCHEDULES_MODULE and cls.__name__ in KNOWN:
            return cls.__name__
    return None


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


def lr_before_start(scheduler: Any, name: str) -> list[Any]:
    """What the newest release's get_lr() returns before the first step (lr_schedules.py @ v0.19.8)."""
    if name == "WarmupCosineLR":
        return [0.0 for _ in scheduler.org_lrs]
    return scheduler.min_lrs  # type: ignore[no-any-return]  # the list itself, as the newest returns it


def cosine_ratio(scheduler: Any) -> float:
    """WarmupCosineLR.get_lr_ratio() past the warmup, as 0.19.3 and later compute it (PR #8142)."""
    real_last_step = scheduler.last_batch_iteration - scheduler.warmup_num_steps + 1
    real_total_steps = max(1, scheduler.total_num_steps - scheduler.warmup_num_steps)
    cosine_progress = min(1.0, real_last_step / real_total_steps)
    ratio_delta = 1. - scheduler.cos_min_ratio
    ratio = (1 + math.cos(math.pi * cosine_progress)) / 2
    return max(0.0, float(scheduler.cos_min_ratio + ratio_delta * ratio))


def newest_max_lrs(scheduler: Any, construction: Construction) -> list[Any] | None:
    """WarmupLR's peak lrs as the newest release picks them when none was given: each group's own lr.

    None when nothing is to change: a peak was given, or the release already picked the same.
    Raises LookupError when no peak was given but the groups' lrs at construction are unknown.
    """
    if construction.max_lr_given:
        return None
    if construction.group_lrs is None:
        raise LookupError("the groups' lrs at construction are unknown")
    newest = list(construction.group_lrs)
    if [lr_value(v) for v in scheduler.max_lrs] == [lr_value(v) for v in newest]:
        return None
    return newest


def lr_value(lr: Any) -> float:
    """A group's lr as a float, whether the group holds a float or a tensor (DeepSpeed 0.18.1+)."""
    return float(lr.item()) if hasattr(lr, "item") else float(lr)


def write(groups: list[dict[str, Any]], lrs: list[Any], deepspeed_version: str) -> list[Any]:
    """Write ``lrs`` into the groups as this release's own step writes them; returns what the groups hold.

    Never in place on a release that does not write in place: up to 0.19.3 WarmupCosineLR's org_lrs are
    the groups' own lr objects, and an in-place write would change its whole schedule."""
    if releases.writes_through_update_lr(deepspeed_version):
        return sys.modules[SCHEDULES_MODULE].update_lr(groups, lrs)  # type: ignore[no-any-return]
    for group, lr in zip(groups, lrs):
        group["lr"] = lr  # what step() does on these releases
    return [group["lr"] for group in groups]
