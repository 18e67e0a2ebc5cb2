"""What the installed DeepSpeed build does, as every decision of the patch asks it.

A version number is not the code: a ``0.15.3+<hash>`` from git may predate the fix 0.15.3 shipped, a ``+local``
build may hold a cherry-picked fix, a vendor's ``0.14.4+hpu…`` changes one line. So the answer is the probe's
(``probe.py`` runs the build's own scheduler classes once, when deepspeed is imported, and compares them with
the reference release's formulas), and the guard table's (``releases.py``, ``upstream/``) only where the probe
could not run. The table still explains each change (its PR, its release) and says where the two disagree
(``disagreements``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from . import releases, upstream, wrapping
from .scratch import PROBED as PROBED  # the classes the probe runs: those a backported change changed
from .state import STATE


@dataclass(frozen=True)
class Probed:
    """What the probe saw the installed build's warmup scheduler classes do."""

    version: str  # deepspeed.__version__ as installed, local part and all
    classes: frozenset[str]  # the warmup classes it has (WarmupCosineLR came in 0.12.3)
    lacks: frozenset[tuple[str, str]]  # (class whose code upstream changed, the change's key): backported ones
    starts: Mapping[str, releases.Start]  # what each class does to the optimizer's lr when built
    peak: releases.MaxLrDefault | None  # WarmupLR's peak without warmup_max_lr; None: not seen
    step_lr: str  # releases.StepLr
    # (class, PR) of each backported change whose own check said the build lacks it: one key may span two PRs
    # (the default peak: #7360 and #8171), and a build between them has one; empty: as ``lacks`` names them
    lacks_prs: frozenset[tuple[str, str]] = frozenset()


def probed() -> Probed | None:
    """The probe's answer for this process's deepspeed; None where it has not run or could not."""
    found = STATE.probed
    return found if isinstance(found, Probed) else None


def _version(version: str | None) -> str:
    return version if version is not None else wrapping.deepspeed_version()


def _owner(key: str, scheduler: str) -> str | None:
    """The class whose code upstream changed (change ``key``) for ``scheduler`` (WarmupDecayLR runs WarmupLR's); None
    where the change is not this class's."""
    if key not in upstream.CHANGE_KEYS:
        known = ", ".join(sorted(upstream.CHANGE_KEYS))
        raise KeyError(f"no change {key!r} in upstream.CHANGES (one of {known})")
    return upstream.changed_class(key, scheduler)


def lacks(key: str, scheduler: str, version: str | None = None, *, seen: Collection[str] | None = None) -> bool:
    """True where the installed build lacks a change the patch backports (``key``) for this class: as the probe
    saw it (this process's, or ``seen``: another process's answer, as ``named_lacks`` writes it), else as the table
    says of ``version`` (the running one by default). KeyError for an unknown key."""
    owner = _owner(key, scheduler)
    if seen is not None:
        return owner is not None and _named(owner, key) in seen
    answer = probed()
    if answer is None or (version is not None and version != answer.version):
        return upstream.lacks(key, scheduler, _version(version))
    return owner is not None and (owner, key) in answer.lacks


def _lacks_change(answer: Probed, change: upstream.Change) -> bool:
    """Whether the probe saw the build lack this very change (its PR), not only a change of its key."""
    if answer.lacks_prs:
        return (change.scheduler, change.pr) in answer.lacks_prs
    return (change.scheduler, change.key) in answer.lacks


def lacked_changes(answer: Probed) -> list[str]:
    """The upstream changes the build lacks, one per PR and class, in release order: ``"WarmupLR default peak
    (#8171)"``; what the import WARNING, ``status()`` and doctor name."""
    return list(dict.fromkeys(f"{c.scheduler} {c.key.replace('_', ' ')} ({c.pr})" for c in upstream.CHANGES
                              if c.backported and c.scheduler in answer.classes and _lacks_change(answer, c)))


def named_lacks(answer: Probed) -> list[str]:
    """What ``answer`` saw the build lack, as plain data for another process (``doctor`` asks a child): one
    ``"<class> <key>"`` each, sorted; ``lacks(..., seen=)`` reads it back."""
    return sorted(_named(owner, key) for owner, key in answer.lacks)


def _named(owner: str, key: str) -> str:
    return f"{owner} {key}"


_AT_CONSTRUCTION = tuple(dict.fromkeys(c.key for c in upstream.CHANGES if c.backported and c.method == "__init__"))


def built_wrong(scheduler: str) -> bool:
    """True where the installed build builds this class otherwise than the reference (a backported change of
    the constructor is missing): the only schedulers the constructor's fix and the nets ever change."""
    answer = probed()
    if answer is None:
        return upstream.built_wrong(scheduler, wrapping.deepspeed_version())
    return any(lacks(key, scheduler) for key in _AT_CONSTRUCTION)


def methods_to_fix(version: str) -> tuple[tuple[str, str], ...]:
    """(class, method) the patch wraps: where a backported change lives upstream and the build lacks it."""
    answer = probed()
    if answer is None:
        return upstream.methods_to_fix(version)
    return tuple(dict.fromkeys((c.scheduler, c.method) for c in upstream.CHANGES
                               if c.backported and (c.scheduler, c.key) in answer.lacks))


def start(scheduler: str) -> releases.Start | None:
    """What the installed build's class does to the optimizer's lr when built; None where it has no such class."""
    answer = probed()
    owner = releases.INHERITS.get(scheduler, scheduler)
    if answer is None or owner not in PROBED:  # OneCycle, LRRangeTest: they set every group on every release
        fact = releases.start_fact(scheduler, wrapping.deepspeed_version())
        return fact.value if fact is not None else None
    return answer.starts.get(owner)


def max_lr_default() -> releases.MaxLrDefault:
    """WarmupLR's peak lr when no warmup_max_lr is given, on the installed build."""
    answer = probed()
    if answer is None or answer.peak is None:
        return releases.warmup_max_lr_default(wrapping.deepspeed_version())
    return answer.peak


def step_lr() -> str:
    """What the build's step leaves in a group that holds a tensor lr (releases.StepLr)."""
    answer = probed()
    if answer is not None:
        return answer.step_lr
    return upstream.step_lr(wrapping.deepspeed_version())  # the release of each change that moved it


def table_lacks(answer: Probed) -> frozenset[tuple[str, str]]:
    """What the table says the release that ``answer``'s version names lacks: (class, PR) of each change."""
    try:
        return frozenset((c.scheduler, c.pr) for name in answer.classes
                         for c in upstream.missing_backports(name, answer.version))
    except ValueError:  # a version string with no release number in it
        return frozenset()


def disagreements(answer: Probed) -> list[str]:
    """Where the build does otherwise than the table says of the release its number names, one phrase per change
    (its PR)."""
    table = table_lacks(answer)
    said = []
    for change in upstream.CHANGES:
        seen = _lacks_change(answer, change)
        if not change.backported or change.scheduler not in answer.classes or \
                ((change.scheduler, change.pr) in table) == seen:
            continue
        has = "lacks" if seen else "has"
        said.append(f"{change.scheduler} {change.key.replace('_', ' ')} ({change.pr}): the build {has} it")
    return list(dict.fromkeys(said))


def verdicts(version: str) -> dict[str, str]:
    """``upstream.verdicts``, from what the probe saw where it ran on this ``version``."""
    answer = probed()
    if answer is None or answer.version != version:
        return upstream.verdicts(version)
    return {name: upstream.verdict_of(name, version, start(name), _missing(name, answer))
            for name in releases.scheduler_classes()}


def _missing(scheduler: str, answer: Probed) -> tuple[upstream.Change, ...]:
    return tuple(c for c in upstream.CHANGES if c.backported and
                 upstream.changed_class(c.key, scheduler) == c.scheduler and (c.scheduler, c.key) in answer.lacks)
