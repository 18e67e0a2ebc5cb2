"""PR #8151 (DeepSpeed 0.19.4): WarmupCosineLR with a warmup_type that is neither log nor linear warns and runs log,
where the first step failed (UnboundLocalError).

The backport, after the build's own constructor, says DeepSpeed's own warning and sets warmup_type to log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import releases
from ..scratch import TOTAL, WARMUP, Scratch, lrs, same
from .unit import Applied, AtConstruction, Building, Change, Check, Outcome, Saved, Unit

KNOWN = ("log", "linear")  # lr_schedules.py @ v0.19.4: WARMUP_LOG_RATE, WARMUP_LINEAR_RATE
DEFAULT = "log"  # the constructor's default warmup_type, and what an unknown one runs


def _unknown_type_given(params: Mapping[str, Any]) -> bool:
    return params.get("warmup_type", DEFAULT) not in KNOWN


def _fails_on_unknown(scratch: Scratch) -> bool:
    """An unknown warmup_type's first step against log's: before 0.19.4 it fails, from it it runs log."""
    log_type = scratch.build("WarmupCosineLR", total_num_steps=TOTAL, warmup_num_steps=WARMUP + 1, warmup_type=DEFAULT)
    log_type.step()
    try:
        unknown = scratch.build("WarmupCosineLR", total_num_steps=TOTAL, warmup_num_steps=WARMUP + 1,
                                warmup_type="probe-unknown")
        unknown.step()
    except Exception:  # before 0.19.4: UnboundLocalError at the first step
        return True
    return not same(lrs(unknown.optimizer), lrs(log_type.optimizer))


def _fall_back_to_log(building: Building) -> Outcome | None:
    """The reference's fallback, and what it did: warn mode's one line names it (reset repairs a failing step)."""
    scheduler = building.scheduler
    if scheduler.warmup_type in KNOWN:
        return None
    given = scheduler.warmup_type
    if not building.dry:  # warn mode's dry run adds no line of DeepSpeed's
        from deepspeed.utils import logger  # DeepSpeed's own words, as 0.19.4+ logs them

        logger.warning(f"Using unknown warmup_type: {scheduler.warmup_type}. The increasing function "
                       f"is set to default (log)")
    scheduler.warmup_type = DEFAULT
    return Outcome("its warmup_type", changed=True, warning=(
        f"its warmup_type {given!r} fails at the first step on DeepSpeed {building.version}, DeepSpeed "
        f"{releases.BEHAVIOR_REFERENCE} warns and runs log"))


def _failed_at_the_first_step(saved: Saved) -> tuple[bool | None, str]:
    return True, (f"warmup_type {saved.params.get('warmup_type')!r}: this release fails at the first step, "
                  f"{releases.BEHAVIOR_REFERENCE} warns and runs log")


UNIT = Unit(pr="#8151", release="0.19.4", source="deepspeed/runtime/lr_schedules.py @ v0.19.3 and v0.19.4", changes=(
    Change("unknown_warmup_type", "WarmupCosineLR", "__init__",
           "an unknown warmup_type warns and uses log (was: UnboundLocalError at the first step)",
           probe=Check(_fails_on_unknown),
           backport=AtConstruction("after the original __init__: the same warning, and warmup_type 'log'",
                                   _fall_back_to_log),
           judgement=Applied(_failed_at_the_first_step),
           cases=("cosine_unknown_warmup_type",),
           meets=_unknown_type_given),
))
