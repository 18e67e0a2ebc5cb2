"""PR #7360 (DeepSpeed 0.17.2): WarmupLR without a ``warmup_max_lr`` peaks at group 0's lr, where it peaked at 0.001.

#8171 (0.19.4) moved the default again, to each group's own lr: that is what the patch reproduces, so each part of
this change but its probe is #8171's (a release between the two lacks #8171's change and is judged and fixed by it).
The probe asks each PR apart, so that a build between the two is said to lack #8171 alone. The
key, which configs meet it and which class never does are this unit's, where the default peak first changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..releases import MaxLrDefault
from ..scratch import Scratch
from .unit import ByLater, Change, Check, Unit

DEFAULT_PEAK = "default_peak"
# WarmupDecayLR passes its own warmup_max_lr, whose default is 0.001 on every release (WarmupDecayLR.__init__'s
# signature @ v0.9.0, v0.15.2, v0.19.3, v0.19.8), so WarmupLR's default peak never reaches it: the reference too
# peaks at 0.001 when none is given
NOT_FOR = ("WarmupDecayLR",)
_LATER = "#8171"


def _peaks_at_the_constant(scratch: Scratch) -> bool:
    """Its own question, so that a build between the two (group 0's lr) is said to lack #8171 alone."""
    return scratch.peak() not in (MaxLrDefault.GROUP_0, MaxLrDefault.EACH_GROUP)  # None too: a peak no release has


def no_peak_given(params: Mapping[str, Any]) -> bool:
    """Only a scheduler built without warmup_max_lr has a default peak."""
    return "warmup_max_lr" not in params


UNIT = Unit(pr="#7360", release="0.17.2", source="deepspeed/runtime/lr_schedules.py @ v0.17.1 and v0.17.2", changes=(
    Change(DEFAULT_PEAK, "WarmupLR", "__init__", "no warmup_max_lr: the peak is group 0's lr (was 0.001)",
           probe=Check(_peaks_at_the_constant),
           backport=ByLater(_LATER, "superseded by #8171 below"),
           judgement=ByLater(_LATER, "the newest row of a key judges (config_facts.differences)"),
           cases=ByLater(_LATER, "the reference's default is #8171's"),
           meets=no_peak_given, not_for=NOT_FOR),
))
