"""PR #8126 (DeepSpeed 0.19.3): WarmupLR's and WarmupCosineLR's constructors raise ValueError on a warmup_num_steps
that is not a positive int, where older releases ran it as ``max(2, warmup_num_steps)`` steps.

Not backported: a validation would stop jobs that run today. ``doctor --config`` says where a config would be
refused by the reference (``advice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import releases
from .unit import Change, Elsewhere, NotBackported, NotJudged, NotProbed, Unit

PR, RELEASE = "#8126", "0.19.3"
CHANGED_CLASSES = ("WarmupLR", "WarmupCosineLR")  # WarmupDecayLR runs WarmupLR's constructor


def refused(scheduler: str, params: Mapping[str, Any]) -> str | None:
    """Where the reference's constructor would raise on these params: the release, the PR and the fix."""
    if "warmup_num_steps" not in params or releases.INHERITS.get(scheduler, scheduler) not in CHANGED_CLASSES:
        return None
    value = params["warmup_num_steps"]
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return None
    kind = "" if isinstance(value, int) else " (an int)"
    fewest = releases.warmup_length(releases.DEEPSPEED_FLOOR).fewest
    return (f"warmup_num_steps={value}: DeepSpeed {RELEASE} and newer ({PR}) raise ValueError when building "
            f"{scheduler} (\"warmup_num_steps must be a positive integer\"): set it to 1 or more{kind}; older releases "
            f"run it as max({fewest}, warmup_num_steps) steps")


UNIT = Unit(pr=PR, release=RELEASE, source="deepspeed/runtime/lr_schedules.py @ v0.19.2 and v0.19.3", changes=(
    Change("validation", ", ".join(CHANGED_CLASSES), "__init__",
           "warmup_num_steps that is not a positive int raises ValueError",
           probe=NotProbed("a validation: the probe's scratch schedulers are valid on every release"),
           backport=NotBackported("a new validation: it would stop jobs that run today"),
           judgement=NotJudged("not backported: a run that lacked it ran, where the reference would have raised"),
           cases=Elsewhere("doctor --config names it (tests/unit/test_config_facts.py)"),
           advice=refused),
))
