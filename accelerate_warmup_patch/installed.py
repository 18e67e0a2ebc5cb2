"""What the installed DeepSpeed build does, as every decision of the patch asks it.

A version number is not the code: a ``0.15.3+<hash>`` from git may predate the fix 0.15.3 shipped, a ``+local``
build may carry a cherry-picked fix, a vendor's ``0.14.4+hpu…`` changes one line. So the answer is the probe's
(``probe.py`` runs the build's own scheduler classes once, when deepspeed is imported, and compares them with
the newest release's formulas), and the guard table's (``releases.py``) only where the probe could not run. The
table still explains each change (its PR, its release) and says where the two disagree (``disagreements``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from . import releases, wrapping
from .state import STATE

# what a WarmupLR step leaves in a group whose lr is a tensor (``Probed.step_lr``)
FLOAT = "float"  # the tensor is replaced by a Python float (up to 0.18.0)
NEW_TENSOR = "new tensor"  # a new tensor (0.18.1-0.19.3, PR #7633; Intel Gaudi's 0.14.4)
IN_PLACE = "in place"  # the group's own tensor, filled (0.19.4+, PR #8202)
# the classes the probe runs: those that carry a backported change (WarmupDecayLR runs WarmupLR's code)
PROBED = ("WarmupLR", "WarmupCosineLR")


@dataclass(frozen=True)
class Probed:
    """What the probe saw the installed build's warmup scheduler classes do."""

    version: str  # deepspeed.__version__ as installed, local part and all
    classes: frozenset[str]  # the warmup classes it has (WarmupCosineLR came in 0.12.3)
    lacks: frozenset[tuple[str, str]]  # (class that carries the change upstream, releases.Change key)
    starts: Mapping[str, releases.Start]  # what each class does to the optimizer's lr when built
    peak: releases.MaxLrDefault | None  # WarmupLR's peak without warmup_max_lr; None: not seen
    step_lr: str  # FLOAT, NEW_TENSOR or IN_PLACE


def probed() -> Probed | None:
    """The probe's answer for this process's deepspeed; None where it has not run or could not."""
    found = STATE.probed
    return found if isinstance(found, Probed) else None


def _version(version: str | None) -> str:
    return version if version is not None else wrapping.deepspeed_version()


def _owner(key: str, scheduler: str) -> str | None:
    """The class that carries change ``key`` upstream for ``scheduler`` (WarmupDecayLR runs WarmupLR's); None
    where the change is not this class's."""
    if key not in releases.CHANGE_KEYS:
        known = ", ".join(sorted(releases.CHANGE_KEYS))
        raise KeyError(f"no change {key!r} in releases.UPSTREAM_CHANGES (one of {known})")
    return releases.carrier(key, scheduler)


def lacks(key: str, scheduler: str, version: str | None = None) -> bool:
    """True where the installed build lacks a change the patch backports (``key``) for this class: as the probe
    saw it, else as the table says of ``version`` (the running one by default). KeyError for an unknown key."""
    owner = _owner(key, scheduler)
    answer = probed()
    if answer is None or (version is not None and version != answer.version):
        return releases.lacks(key, scheduler, _version(version))
    return owner is not None and (owner, key) in answer.lacks


_AT_CONSTRUCTION = tuple(dict.fromkeys(c.key for c in releases.UPSTREAM_CHANGES
                                       if c.backported and c.method == "__init__"))


def built_wrong(scheduler: str) -> bool:
    """True where the installed build builds this class otherwise than the newest release (a backported change of
    the constructor is missing): the only schedulers the constructor's fix and the nets ever change."""
    answer = probed()
    if answer is None:
        return releases.built_wrong(scheduler, wrapping.deepspeed_version())
    return any(lacks(key, scheduler) for key in _AT_CONSTRUCTION)


def methods_to_fix(version: str) -> tuple[tuple[str, str], ...]:
    """(class, method) the patch wraps: where a backported change lives upstream and the build lacks it."""
    answer = probed()
    if answer is None:
        return releases.methods_to_fix(version)
    return tuple(dict.fromkeys((c.scheduler, c.method) for c in releases.UPSTREAM_CHANGES
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
    """What the build's step leaves in a group that holds a tensor lr (FLOAT, NEW_TENSOR, IN_PLACE)."""
    answer = probed()
    if answer is not None:
        return answer.step_lr
    # the table's rows of the two changes (PR #7633 tensor_type, #8202 tensor_in_place), not numbers written here
    version = releases.parse(wrapping.deepspeed_version())
    since = {change.key: releases.parse(change.release) for change in releases.UPSTREAM_CHANGES}
    return IN_PLACE if version >= since["tensor_in_place"] else NEW_TENSOR if version >= since["tensor_type"] else FLOAT


def table_lacks(answer: Probed) -> frozenset[tuple[str, str]]:
    """What the table says the release that ``answer``'s version names lacks, in the probe's terms."""
    try:
        return frozenset((c.scheduler, c.key) for name in answer.classes
                         for c in releases.missing_backports(name, answer.version))
    except ValueError:  # a version string with no release number in it
        return frozenset()


def disagreements(answer: Probed) -> list[str]:
    """Where the build does otherwise than the table says of the release its number names, one phrase each."""
    table = table_lacks(answer)
    said = []
    for change in releases.UPSTREAM_CHANGES:
        pair = (change.scheduler, change.key)
        if not change.backported or change.scheduler not in answer.classes or (pair in table) == (pair in answer.lacks):
            continue
        has = "lacks" if pair in answer.lacks else "has"
        said.append(f"{change.scheduler} {change.key.replace('_', ' ')} ({change.pr}): the build {has} it")
    return list(dict.fromkeys(said))


def verdicts(version: str) -> dict[str, str]:
    """``releases.verdicts``, from what the probe saw where it ran on this ``version``."""
    answer = probed()
    if answer is None or answer.version != version:
        return releases.verdicts(version)
    return {name: releases.verdict_of(name, version, start(name), _missing(name, answer))
            for name in releases.scheduler_classes()}


def _missing(scheduler: str, answer: Probed) -> tuple[releases.Change, ...]:
    return tuple(c for c in releases.UPSTREAM_CHANGES if c.backported and
                 releases.carrier(c.key, scheduler) == c.scheduler and (c.scheduler, c.key) in answer.lacks)
