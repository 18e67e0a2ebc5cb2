"""PR #8171 (DeepSpeed 0.19.4): WarmupLR without a ``warmup_max_lr`` peaks at each group's own lr (0.17.2-0.19.3:
group 0's, #7360; before: 0.001).

The backport, after the build's own constructor, sets max_lrs (and delta_lrs) from the groups' lrs the constructor
saw, where no peak was given. Where the patch did not see the scheduler built, what the instance shows decides, or
the peak is left as the release set it and the user is told. The key, the configs that meet it and the class that
never does are #7360's.
"""

from __future__ import annotations

from typing import Any

from .. import releases
from ..releases import MaxLrDefault, Start
from ..scratch import Scratch
from .pr7360 import DEFAULT_PEAK, NOT_FOR, no_peak_given
from .unit import Applied, AtConstruction, Building, Change, Check, Construction, Elsewhere, Line, Outcome, Saved, Unit

PART = "its default peak lr"
_EACH = "each group's own lr"


def reference_max_lrs(building: Building, construction: Construction) -> list[Any] | None:
    """The reference's peak lrs when none was given: each group's own lr at construction. None when nothing is to
    change: a peak was given, or the release already picked the same. LookupError where no peak was given but the
    groups' lrs at construction are unknown."""
    if construction.max_lr_given:
        return None
    if construction.group_lrs is None:
        raise LookupError("the groups' lrs at construction are unknown")
    own = list(construction.group_lrs)
    if [building.value(v) for v in building.scheduler.max_lrs] == [building.value(v) for v in own]:
        return None
    return own


def _peak_as_reference(building: Building) -> Outcome | None:
    """The reference's default peak, where the build's differs; what was done, or why it was left."""
    if not building.peak_known:
        return None
    scheduler, construction = building.scheduler, building.construction
    try:
        if construction is None or (construction.group_lrs is None and not construction.max_lr_given):
            new_max = _reference_max_lrs_unseen(building)
        else:
            new_max = reference_max_lrs(building, construction)
    except LookupError as unknown:
        return _left(building, str(unknown))
    if new_max is None:
        return None
    old_max = list(scheduler.max_lrs)
    scheduler.max_lrs = new_max
    scheduler.delta_lrs = [big - small for big, small in zip(new_max, scheduler.min_lrs)]
    default = building.max_lr_default().value
    reference = releases.BEHAVIOR_REFERENCE
    if not building.warn_mode:  # warn mode says it in its one line per scheduler
        building.warn_once(f"peak:{id(scheduler)}", "%s: no warmup_max_lr was given: peak lr %s -> %s (each group's "
                           "own lr, the default of DeepSpeed %s; DeepSpeed %s's default is %s)", building.name,
                           building.fmt(old_max), building.fmt(new_max), reference, building.version, default)
    return Outcome(PART, changed=True, warning=(
        f"with no warmup_max_lr its peak lr is {building.fmt(old_max)} (DeepSpeed {building.version}: {default}), "
        f"DeepSpeed {reference}'s is {building.fmt(new_max)} ({_EACH})"))


def _left(building: Building, unknown: str) -> Outcome:
    """The peak of a scheduler the patch cannot decide for, left as the release set it, and said so once."""
    name, peaks, reference = building.name, building.fmt(list(building.scheduler.max_lrs)), releases.BEHAVIOR_REFERENCE
    return Outcome(PART, changed=False, why_left=unknown,
                   warning=f"its peak lr {peaks} stays ({unknown}; DeepSpeed {reference} would use {_EACH} if none "
                           "was given)",
                   left_line=Line(f"peak-unknown:{id(building.scheduler)}", "%s was built before the patch was applied "
                                  "(%s): its peak lr is left at %s; DeepSpeed %s would use each group's own lr if none "
                                  "was given", (name, unknown, peaks, reference)))


def _reference_max_lrs_unseen(building: Building) -> list[Any] | None:
    """``reference_max_lrs`` for a WarmupLR whose construction the patch did not see, from what the instance shows.

    Its peak lrs tell where this release's default could not have made them; a fresh scheduler of a release that
    leaves the optimizer's lr still has its construction lrs in the groups (lr_schedules.py @ v0.9.0..v0.19.3).
    LookupError where the reference might peak elsewhere and the instance cannot tell."""
    peaks = [building.value(v) for v in building.scheduler.max_lrs]
    default = building.max_lr_default()
    if default is MaxLrDefault.CONSTANT and any(v != releases.DEFAULT_PEAK for v in peaks):
        return None  # the default is 0.001 for every group (warmup_max_lr: float = 0.001): a peak was given
    if default is MaxLrDefault.GROUP_0 and (len(peaks) == 1 or len(set(peaks)) > 1):
        # one group: the default, group 0's lr, is the reference's (each group's own); unequal peaks were given
        return None
    # a fresh one of a release that leaves the optimizer's lr: the groups hold the lrs it was built with, and given or
    # not, the reference may peak where this one does
    if building.start() is Start.LEAVES_OPTIMIZER_LR and building.fresh() and \
            reference_max_lrs(building, Construction(tuple(building.group_lrs()), max_lr_given=False)) is None:
        return None
    raise LookupError("whether it was given a warmup_max_lr is unknown" if building.construction is None else
                      "the groups' lrs at construction are unknown")


def _peaked_elsewhere(saved: Saved) -> tuple[bool | None, str]:
    """A run without warmup_max_lr on a release whose default peak is not the reference's."""
    peak = releases.warmup_max_lr_default(saved.version)
    lr, groups, reference = saved.optimizer_lr, saved.param_groups, releases.BEHAVIOR_REFERENCE
    if peak is MaxLrDefault.CONSTANT:
        if lr is not None and lr != releases.DEFAULT_PEAK:
            return True, (f"no warmup_max_lr: the warmup peaked at {releases.DEFAULT_PEAK}, {reference} at the "
                          f"optimizer's lr {saved.lr_text(lr)}")
        if lr is None:
            return None, (f"no warmup_max_lr: the peak was {releases.DEFAULT_PEAK}, {reference}'s is the optimizer's "
                          "lr (not in the file)")
    if groups is None or groups > 1:
        return None, (f"no warmup_max_lr: the peak was {peak.value}, {reference}'s is {_EACH}; groups 1+ differ "
                      "unless their lr was that peak (the file does not hold the groups' lrs)")
    return False, ""


def _peaks_elsewhere(scratch: Scratch) -> bool:
    return scratch.peak() is not MaxLrDefault.EACH_GROUP  # None too: a peak the table knows no release for


UNIT = Unit(pr="#8171", release="0.19.4", source="deepspeed/runtime/lr_schedules.py @ v0.19.3 and v0.19.4", changes=(
    Change(DEFAULT_PEAK, "WarmupLR", "__init__", "no warmup_max_lr: the peak is each group's own lr",
           probe=Check(_peaks_elsewhere),
           backport=AtConstruction("after the original __init__: max_lrs and delta_lrs from the groups' lrs the "
                                   "constructor saw", _peak_as_reference),
           judgement=Applied(_peaked_elsewhere),
           cases=Elsewhere("tests/test_roads.py: the default peak on every import order, and WarmupDecayLR's own; "
                           "tests/cases.py has no case of it"),
           meets=no_peak_given, not_for=NOT_FOR),
))
