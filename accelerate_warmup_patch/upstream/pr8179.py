"""PR #8179 (DeepSpeed 0.19.4): OneCycle's stair counts (``cycle_first_stair_count``, ``cycle_second_stair_count``)
hold the lr flat on each stair; before it they were stored and read nowhere, so every count ran the continuous cycle.

Not backported, so the package claims nothing of the reference for a OneCycle given a stair count on a release that
lacks it: the audit says "unknown" for such a run (never "not affected"), doctor --config says so, and the
differential tier (tests/test_differential.py) shows that the patch leaves it as the release runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .unit import Change, Elsewhere, NotBackported, NotJudged, NotProbed, Unit

STAIR_COUNTS = ("cycle_first_stair_count", "cycle_second_stair_count")


def _stairs_given(params: Mapping[str, Any]) -> bool:
    """A stair count above 0 (0, the default, is the continuous cycle on every release)."""
    counts = [params.get(name) for name in STAIR_COUNTS]
    return any(isinstance(count, (int, float)) and not isinstance(count, bool) and count > 0 for count in counts)


UNIT = Unit(pr="#8179", release="0.19.4", source="deepspeed/runtime/lr_schedules.py @ v0.19.3 and v0.19.4", changes=(
    Change("stair_counts", "OneCycle", "_get_scale_factor",
           "a stair count holds the lr (and momentum) flat on each of that many stairs of the half cycle (was: "
           "stored and never read, the cycle continuous)",
           probe=NotProbed("not backported: a release's number says whether it reads the stair counts"),
           backport=NotBackported("a OneCycle formula of every step, for a parameter few runs set: the patch leaves "
                                  "it as the release runs it and claims nothing of the reference for it"),
           judgement=NotJudged("not backported: a run given a stair count on a release that lacks it ran other lrs "
                               "than the reference past step 0, and the audit says unknown for it, never not affected"),
           cases=Elsewhere("tests/test_differential.py: the patch changes nothing on OneCycle, and the reference's "
                           "own OneCycle is the oracle"),
           meets=_stairs_given),
))
