"""PR #8142 (DeepSpeed 0.19.3): WarmupCosineLR's ratio past total_num_steps holds cos_min_ratio, where the cosine
swung back up; a total_num_steps equal to warmup_num_steps no longer divides by zero.

The backport answers ``get_lr_ratio()`` past the warmup with the reference's formula (``reference.cosine_ratio``) on
the instance's own attributes. A run's last steps meet it: the audit judges it on the newest save's release.
"""

from __future__ import annotations

from typing import Any

from .. import reference, releases
from ..scratch import COS_MIN, PAST, TOTAL, WARMUP, Scratch, is_number
from .unit import PAST_WARMUP, Answer, Applied, Change, Check, Saved, Unit


def _swings_back(scratch: Scratch) -> bool:
    """The build's ratio at every step past its warmup, to PAST steps beyond its total, against the reference's."""
    scheduler = scratch.build("WarmupCosineLR", total_num_steps=TOTAL, warmup_num_steps=WARMUP, cos_min_ratio=COS_MIN,
                              warmup_type="linear")
    try:
        for _ in range(TOTAL + PAST):
            scheduler.step()
            if scheduler.last_batch_iteration >= WARMUP and not is_number(scheduler.get_lr_ratio(),
                                                                          reference.cosine_ratio(scheduler)):
                return True
    except ArithmeticError:
        return True
    return False


def _past_the_total(scheduler: Any, version: str) -> str | None:
    """Warn mode's words: the two formulas agree up to iteration max(total, warmup) - 1 (the cosine's progress is at
    most 1 there, lr_schedules.py @ v0.19.2 and v0.19.3) and differ from it on, where the reference holds the floor."""
    total, warmup = scheduler.total_num_steps, scheduler.warmup_num_steps
    if not all(isinstance(value, (int, float)) for value in (total, warmup)):
        return None
    reference_does = f"DeepSpeed {releases.BEHAVIOR_REFERENCE} holds cos_min_ratio"
    if total == warmup:
        return (f"from iteration {warmup} on (past the warmup) DeepSpeed {version} fails on total_num_steps == "
                f"warmup_num_steps ({total}: a division by zero), {reference_does}")
    if total < warmup:
        return (f"from iteration {warmup} on (past the warmup) DeepSpeed {version}'s cosine runs on a negative length "
                f"(total_num_steps {total} < warmup_num_steps {warmup}), {reference_does}")
    return (f"from iteration {total} on (past total_num_steps) DeepSpeed {version}'s cosine swings back up, "
            f"{reference_does}")


def _ran_past_the_total(saved: Saved) -> tuple[bool | None, str]:
    """Before 0.19.3 the cosine swung back up past total_num_steps. Step k runs at the lr of iteration k-1, so the
    steps this run took used iterations up to the saved one minus 1."""
    length = releases.warmup_length(saved.version)
    total = saved.number(saved.params.get("total_num_steps"))
    warmup = saved.number(saved.params.get("warmup_num_steps", length.default))
    if total is None or warmup is None:
        return None, "total_num_steps or warmup_num_steps is not a number in the ds_config"
    if saved.iteration is None:
        return None, "the scheduler's saved iteration is not in the file"
    warmup = max(length.fewest, warmup)
    last_used = saved.iteration - 1
    if last_used >= warmup and (total <= warmup or last_used >= total):
        return True, (f"steps past total_num_steps={total} ran (to iteration {last_used}): their cosine swung back "
                      f"up, {releases.BEHAVIOR_REFERENCE} holds cos_min_ratio")
    return False, ""


UNIT = Unit(pr="#8142", release="0.19.3", source="deepspeed/runtime/lr_schedules.py @ v0.19.2 and v0.19.3", changes=(
    Change("ratio_past_warmup", "WarmupCosineLR", "get_lr_ratio",
           "past total_num_steps the ratio holds cos_min_ratio (was: the cosine swings back up); "
           "total_num_steps == warmup_num_steps no longer divides by zero",
           probe=Check(_swings_back),
           backport=Answer("get_lr_ratio() past the warmup is 0.19.3's formula, on the instance's attributes",
                           PAST_WARMUP, reference.cosine_ratio, warns=_past_the_total),
           judgement=Applied(_ran_past_the_total, last_steps=True),
           cases=("cosine_past_total", "cosine_total_equals_warmup")),
))
