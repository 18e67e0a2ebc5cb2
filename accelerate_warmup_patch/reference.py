"""The reference release's lr formulas for the warmup schedulers (``releases.BEHAVIOR_REFERENCE``, 0.19.8:
lr_schedules.py @ v0.19.8), from a scheduler's own parameters: what the fix reproduces (the units' backports,
``upstream/``), what the probe compares the installed build with (probe.py), and what the record compares the first
optimizer step with (record_writer.py). Reading only: nothing here writes.
"""

from __future__ import annotations

import math
from typing import Any

WARMUP_CLASSES = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")  # the classes with a formula here


def lr_before_start(scheduler: Any, name: str) -> list[Any]:
    """get_lr() before the first step: min_lrs (PR #6597), WarmupCosineLR 0.0 per group (#7969)."""
    if name == "WarmupCosineLR":
        return [0.0 for _ in scheduler.org_lrs]
    return scheduler.min_lrs  # type: ignore[no-any-return]  # the list itself, as the newest returns it


def cosine_ratio(scheduler: Any) -> float:
    """WarmupCosineLR.get_lr_ratio() past the warmup, as 0.19.3 and later compute it (PR #8142)."""
    real_last_step = scheduler.last_batch_iteration - scheduler.warmup_num_steps + 1
    return _cosine_at(scheduler, real_last_step)


def _cosine_at(scheduler: Any, real_last_step: int) -> float:
    real_total_steps = max(1, scheduler.total_num_steps - scheduler.warmup_num_steps)
    cosine_progress = min(1.0, real_last_step / real_total_steps)
    ratio_delta = 1. - scheduler.cos_min_ratio
    ratio = (1 + math.cos(math.pi * cosine_progress)) / 2
    return max(0.0, float(scheduler.cos_min_ratio + ratio_delta * ratio))


def lrs_at(scheduler: Any, name: str | None, iteration: int) -> list[float] | None:
    """Each group's lr the reference's ``name`` gives at ``iteration`` (its last_batch_iteration) with this scheduler's
    parameters; None for a class without a formula here (OneCycle, LRRangeTest: no change was backported)."""
    if iteration < 0 and name in WARMUP_CLASSES:
        return [_value(v) for v in lr_before_start(scheduler, name)]
    if name in ("WarmupLR", "WarmupDecayLR"):
        gamma = _gamma(scheduler, name, iteration)
        return [_value(low) + _value(delta) * gamma for low, delta in zip(scheduler.min_lrs, scheduler.delta_lrs)]
    if name == "WarmupCosineLR":
        if iteration < scheduler.warmup_num_steps:
            ratio = _warmup_fraction(scheduler, iteration)
            ratio = scheduler.warmup_min_ratio + ratio * (1. - scheduler.warmup_min_ratio)
        else:
            ratio = _cosine_at(scheduler, iteration - scheduler.warmup_num_steps + 1)
        return [_value(lr) * ratio for lr in scheduler.org_lrs]
    return None


def step_lrs(scheduler: Any, name: str | None, iteration: int, group_lrs: list[Any],
             built_at: int | None) -> list[float] | None:
    """Each group's lr the reference runs an optimizer step at, for a scheduler of ``name`` at ``iteration`` whose
    groups hold ``group_lrs`` when the step runs, built at ``built_at`` (None: at -1, or not known). The reference's
    constructor writes its start lr only at -1: one built at a later iteration writes nothing until its first step,
    so a step before that runs at the optimizer's lr, on the reference too. None where there is no formula here."""
    if built_at is not None and built_at >= 0 and iteration == built_at and name in WARMUP_CLASSES:
        return [_value(lr) for lr in group_lrs]
    return lrs_at(scheduler, name, iteration)


def _warmup_fraction(scheduler: Any, iteration: int) -> float:
    """How far the warmup is at ``iteration``: log (the default, and what an unknown type runs, PR #8151) or linear."""
    if scheduler.warmup_type == "linear":
        return float(iteration / scheduler.warmup_num_steps)
    return float(math.log(iteration + 1) / math.log(scheduler.warmup_num_steps))


def _gamma(scheduler: Any, name: str, iteration: int) -> float:
    if iteration < scheduler.warmup_num_steps:
        return _warmup_fraction(scheduler, iteration)
    if name == "WarmupLR":
        return 1.0
    total, warmup = scheduler.total_num_steps, scheduler.warmup_num_steps
    return max(0.0, float(total - iteration) / float(max(1.0, total - warmup)))


def _value(lr: Any) -> float:
    return float(lr.item()) if hasattr(lr, "item") else float(lr)
