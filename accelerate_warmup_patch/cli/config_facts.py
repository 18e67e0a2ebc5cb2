"""What the guard table says of one scheduler built from a config's params on one release.

Shared by ``doctor --config`` (a config about to run) and ``audit`` (a checkpoint of a run that ran), so that
both give the same answers from the same rows. Pure lookups in the upstream changes (``upstream/``); standard
library only.
"""

from __future__ import annotations

from typing import Any

from .. import upstream

AUTO = "auto"  # a value the HF Trainer or accelerate fills in at run time


def differences(scheduler: str, deepspeed_version: str,
                params: dict[str, Any] | None = None) -> tuple[upstream.Change, ...]:
    """The backported changes this release lacks that a scheduler built with ``params`` meets (None: every
    one the class lacks), the newest row per key: the changes are in release order, so the last row wins."""
    missing = (upstream.missing_backports(scheduler, deepspeed_version) if params is None
               else upstream.backports_for(scheduler, deepspeed_version, params))
    return tuple({c.key: c for c in missing}.values())


def candidates(scheduler: str, params: dict[str, Any] | None = None) -> tuple[upstream.Change, ...]:
    """Every backported change a scheduler built with ``params`` meets (None: every one of the class), the newest row
    per key, whatever the release: the caller asks the build (``installed.lacks``) which it lacks, so that a build's
    probed answer, not its number, picks them."""
    return tuple({c.key: c for c in upstream.backported(scheduler, params)}.values())


def label(change: upstream.Change) -> str:
    """A change as the CLI names it: ``default peak (#8171)``."""
    return f"{change.key.replace('_', ' ')} ({change.pr})"


def refused_later(scheduler: str | None, params: dict[str, Any]) -> list[str]:
    """Where a newer DeepSpeed's constructor would raise on these params: the release, its PR and the fix."""
    known = {key: value for key, value in params.items() if value != AUTO}  # filled in at run time: not known here
    return upstream.advice(scheduler, known)
