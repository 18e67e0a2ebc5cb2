"""PR #6597 (DeepSpeed 0.15.3): the bug this package exists for, fixed for WarmupLR (and WarmupDecayLR, which runs
WarmupLR's constructor and get_lr).

Before it the constructor never wrote the optimizer's lr, so the first optimizer step (the engine steps the optimizer
before the scheduler) ran at the optimizer's configured lr, usually the peak. 0.15.3's constructor ends by writing its
own ``get_lr()`` into every group at last_batch_iteration -1, and ``get_lr()`` before the first step returns min_lrs
where it returned [0.0]. #7969 did the same for WarmupCosineLR: it uses this unit's keys and its start write.
"""

from __future__ import annotations

from typing import Any

from .. import reference
from ..releases import Start
from ..scratch import Scratch, same
from .unit import BEFORE_START, Answer, AtConstruction, AtStep0, Building, Change, Check, Unit

START = "start"  # the constructor writes every group's start lr: what step 0 runs at (the nets and audit ask it)
GET_LR_BEFORE_START = "get_lr_before_start"
START_WRITE = "after the original __init__: the release's own write of the instance's get_lr()"


def write_start(building: Building) -> None:
    """The reference constructor's last line: the instance's own get_lr() (a subclass's override too), written into
    every group as the build writes an lr, and kept as _last_lr."""
    scheduler = building.scheduler
    # A build whose constructor already wrote a start (group 0's, or every group's) asked get_lr() there and said
    # DeepSpeed's warning; the reference says it once, so this get_lr() does not say it again.
    with building.already_said(building.start() is not Start.LEAVES_OPTIMIZER_LR):
        lrs = scheduler.get_lr()
    scheduler._last_lr = building.write(lrs)


def starts_elsewhere(name: str) -> Check:
    """The check of a class's start: built as the probe builds it, not every group holds the reference's start."""
    return Check(lambda scratch: scratch.start(name) is not Start.SETS_EVERY_GROUP)


def get_lr_differs(name: str) -> Check:
    """The check of a class's get_lr() right after it was built, against the reference's."""

    def lacks(scratch: Scratch) -> bool:
        scheduler = scratch.built(name)
        return not same(list(scheduler.get_lr()), reference.lr_before_start(scheduler, name))

    return Check(lacks)


def _min_lrs(scheduler: Any) -> Any:
    return reference.lr_before_start(scheduler, "WarmupLR")


UNIT = Unit(pr="#6597", release="0.15.3", source="deepspeed/runtime/lr_schedules.py @ v0.15.2 and v0.15.3", changes=(
    Change(START, "WarmupLR", "__init__",
           "the constructor writes get_lr() into every group at last_batch_iteration -1 and sets _last_lr",
           probe=starts_elsewhere("WarmupLR"),
           backport=AtConstruction(START_WRITE, write_start, last=True),
           judgement=AtStep0(),
           cases=("tensor_lr_warmup", "subclass_overriding_get_lr", "unhashable_subclass",
                  "get_last_lr_after_construction", "engine_reports_its_start", "late_import_raw_engine")),
    Change(GET_LR_BEFORE_START, "WarmupLR", "get_lr", "get_lr() before the first step returns min_lrs (was [0.0])",
           probe=get_lr_differs("WarmupLR"),
           backport=Answer("get_lr() returns the instance's min_lrs while last_batch_iteration < 0", BEFORE_START,
                           _min_lrs, original_too=True, when=" before its first step"),
           judgement=AtStep0(),
           cases=("reported_before_the_first_step",)),
))
