"""The probe: ask the installed build's warmup scheduler classes what they do, once per process.

Run by ``targets.patch_deepspeed`` when deepspeed is imported, before anything is wrapped, so it meets the build's
own code. Its scratch kit (scratch.py) builds each class on a throwaway torch optimizer (two groups of different
lrs, no parameters) and sees what the guard table describes of a release: where each class starts every group
against the reference's formulas (reference.py), WarmupLR's peak without ``warmup_max_lr``, what a step leaves in a
group whose lr is a tensor. Then each upstream change's check (``upstream/``) asks whether the build has that change;
a backported one it lacks is in ``installed.Probed.lacks``. Nothing of it runs on an optimizer step, and nothing at all
unless deepspeed is imported. DeepSpeed's own warnings (get_lr before the first step, an unknown warmup_type) are
held back while it runs: they are about the scratch schedulers, not the user's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from . import installed, log, releases, upstream
from .scratch import PROBED, Scratch
from .state import STATE
from .upstream.unit import Change, Check


def run(module: ModuleType, version: str) -> installed.Probed:
    """Probe the classes of ``module`` (deepspeed.runtime.lr_schedules); raises where it cannot."""
    import torch

    scratch = Scratch(module, torch)
    if not scratch.has("WarmupLR"):
        raise LookupError(f"{module.__name__} has no WarmupLR class")
    lacks: set[tuple[str, str]] = set()
    prs: set[tuple[str, str]] = set()
    with _quiet(getattr(module, "logger", None)):
        starts = {name: scratch.start(name) for name in PROBED if scratch.has(name)}
        peak, step_lr = scratch.peak(), scratch.step_lr()
        for change in upstream.CHANGES:
            check = change.probe
            if isinstance(check, Check) and change.backported and _has_its_class(scratch, change) and \
                    check.lacks(scratch):
                lacks.add((change.scheduler, change.key))
                prs.add((change.scheduler, change.pr))
    return installed.Probed(version, frozenset(starts), frozenset(lacks), starts, peak, step_lr, frozenset(prs))


def _has_its_class(scratch: Scratch, change: Change) -> bool:
    """Whether the build has the class whose code the change changed (WarmupCosineLR came in 0.12.3)."""
    return change.scheduler not in releases.scheduler_classes() or scratch.has(change.scheduler)


class _Hold(logging.Filter):
    def filter(self, line: logging.LogRecord) -> bool:
        return False


@contextmanager
def _quiet(logger: Any) -> Iterator[None]:
    """DeepSpeed's logger says nothing about the scratch schedulers while they run."""
    hold = _Hold()
    if isinstance(logger, logging.Logger):
        logger.addFilter(hold)
    try:
        yield
    finally:
        if isinstance(logger, logging.Logger):
            logger.removeFilter(hold)


def ensure(module: ModuleType, version: str, report: Callable[[Exception], None]) -> installed.Probed | None:
    """The probe's answer for this build, run once per process (a reload of deepspeed runs it anew); None where it
    failed (``report`` says so once: the table's answers stand in)."""
    answer = installed.probed()
    if answer is not None and answer.version == version and STATE.probed_module == id(module):
        return answer
    try:
        answer = run(module, version)
    except Exception as error:
        STATE.probed = None
        report(error)
        return None
    STATE.probed, STATE.probed_module = answer, id(module)
    differ = installed.disagreements(answer)
    if differ:
        log.warn_once("probe-differs", "DeepSpeed %s: its scheduler classes do not do what the guard table says of "
                      "the release its number names: %s; the patch follows what they do", version, "; ".join(differ))
    return answer
