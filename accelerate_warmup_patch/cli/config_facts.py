"""What the guard table says of one scheduler built from a config's params on one release.

Shared by ``doctor --config`` (a config about to run) and ``audit`` (a checkpoint of a run that ran), so that
both give the same answers from the same rows. Pure lookups in ``releases``; standard library only.
"""

from __future__ import annotations

from typing import Any

from .. import releases

AUTO = "auto"  # a value the HF Trainer or accelerate fills in at run time


def differences(scheduler: str, deepspeed_version: str,
                params: dict[str, Any] | None = None) -> tuple[releases.Change, ...]:
    """The backported changes this release lacks that a scheduler built with ``params`` meets (None: every
    one the class lacks), the newest row per key: the table is in release order, so the last row wins."""
    missing = (releases.missing_backports(scheduler, deepspeed_version) if params is None
               else releases.backports_for(scheduler, deepspeed_version, params))
    return tuple({c.key: c for c in missing}.values())


def label(change: releases.Change) -> str:
    """A change as the CLI names it: ``default peak (#8171)``."""
    return f"{change.key.replace('_', ' ')} ({change.pr})"


def refused_later(scheduler: str | None, params: dict[str, Any]) -> list[str]:
    """Where a newer DeepSpeed's constructor would raise on these params: the release, its PR and the fix."""
    if scheduler is None or "warmup_num_steps" not in params:
        return []
    value = params["warmup_num_steps"]
    change = next(c for c in releases.UPSTREAM_CHANGES if c.key == "validation")
    if value == AUTO or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return []
    if not any(name.strip() == releases.INHERITS.get(scheduler, scheduler) for name in change.scheduler.split(",")):
        return []
    kind = "" if isinstance(value, int) else " (an int)"
    return [f"warmup_num_steps={value}: DeepSpeed {change.release} and newer ({change.pr}) raise ValueError when "
            f"building {scheduler} (\"warmup_num_steps must be a positive integer\"): set it to 1 or more{kind}; "
            f"older releases run it as max({releases.warmup_length(releases.DEEPSPEED_FLOOR).fewest}, "
            "warmup_num_steps) steps"]
