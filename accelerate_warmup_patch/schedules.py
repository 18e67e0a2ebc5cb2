"""Knowledge of DeepSpeed's schedulers: where the newest release starts each param group.

The reference is the release in ``releases.BEHAVIOR_REFERENCE``. Nothing here mutates anything:
the functions read a live scheduler and say what the newest release would have written into
its optimizer when it was built.
"""

from __future__ import annotations

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


def is_fresh(scheduler: Any) -> bool:
    """True while the scheduler has never stepped: built with last_batch_iteration=-1."""
    return getattr(scheduler, "last_batch_iteration", None) == -1


def newest_start_lrs(scheduler: Any, name: str) -> list[Any]:
    """Per param group, the lr the newest release writes when it builds this scheduler."""
    groups = scheduler.optimizer.param_groups
    if name in ("WarmupLR", "WarmupDecayLR", "OneCycle"):
        return list(scheduler.min_lrs)
    if name == "WarmupCosineLR":
        return [0.0] * len(groups)
    if name == "LRRangeTest":
        return list(scheduler.min_lr)
    raise LookupError(f"no start rule for {name}")


def default_peak_differs(name: str, deepspeed_version: str) -> bool:
    """True where a WarmupLR built without warmup_max_lr peaks elsewhere than on the newest release."""
    default = releases.warmup_max_lr_default(deepspeed_version)
    return name == "WarmupLR" and default is not releases.MaxLrDefault.EACH_GROUP


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


def set_group_lr(group: dict[str, Any], lr: Any) -> None:
    """Write an lr the way the newest release does: in place for tensors, so the type is kept."""
    current = group["lr"]
    if hasattr(current, "fill_"):
        current.fill_(lr_value(lr))
    else:
        group["lr"] = lr_value(lr) if hasattr(lr, "item") else lr
