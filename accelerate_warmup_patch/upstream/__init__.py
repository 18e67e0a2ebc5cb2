"""Every change DeepSpeed made to its warmup schedulers' lrs since the table's floor, one unit per pull request, in
release order (``UNITS``), and the lookups every decision asks of them.

The probe (probe.py), the fix (backport.py), the audit (cli/audit/judge.py), doctor and the docs' tables
(tests/tables.py) iterate these units; none of them names a change's key. A unit is one module, ``prNNNN.py``:

    UNIT = Unit(pr="#NNNN", release=<its first release>, source=<the file @ the tags on either side>, changes=(
        Change(<key>, <the class whose code it changed>, <the method>, <what changed>,
               probe=Check(...) or NotProbed(why),
               backport=AtConstruction(...) or Answer(...) or NotBackported(why),
               judgement=Applied(...) or AtStep0() or NotJudged(why),
               cases=(<tests/cases.py cases that show it>,) or Elsewhere(where it is tested),
               meets=<the configs it concerns>),
    ))

To add one: write that module (upstream/unit.py says what each part is, and a part a later change of the same key
does is ``ByLater``), list it in ``UNITS`` below at its release, and add its cases to tests/cases.py (their
reference run to tests/golden_cases.json). tests/unit/test_upstream.py fails until every part is there, and
``python tests/tables.py --write`` puts it in docs/matrix.md. A new key is spelled in its unit alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import releases
from . import pr4688, pr6597, pr7360, pr7633, pr7969, pr8126, pr8142, pr8151, pr8171, pr8179, pr8202
from .unit import (
    Answer,
    AtConstruction,
    Change as Change,  # the type every caller names: upstream.Change
    Unit,
)

UNITS: tuple[Unit, ...] = (
    pr4688.UNIT,  # 0.12.4
    pr6597.UNIT,  # 0.15.3
    pr7360.UNIT,  # 0.17.2
    pr7633.UNIT,  # 0.18.1
    pr7969.UNIT,  # 0.19.0
    pr8126.UNIT,  # 0.19.3
    pr8142.UNIT,  # 0.19.3
    pr8151.UNIT,  # 0.19.4
    pr8171.UNIT,  # 0.19.4
    pr8179.UNIT,  # 0.19.4
    pr8202.UNIT,  # 0.19.4
)
CHANGES: tuple[Change, ...] = tuple(change for unit in UNITS for change in unit.changes)
# the change keys: ``lacks`` refuses any other, so a typo is an error, never a quiet False
CHANGE_KEYS = frozenset(c.key for c in CHANGES)
# the constructor's write of every group's start lr, the lr step 0 runs at: what the nets, doctor and the audit ask
START = pr6597.START


def missing_backports(scheduler: str, deepspeed_version: str) -> tuple[Change, ...]:
    """The backported changes this release lacks for this class (WarmupDecayLR: WarmupLR's), in release order."""
    parsed = releases.parse(deepspeed_version)
    owner = releases.INHERITS.get(scheduler, scheduler)
    return tuple(c for c in CHANGES if c.backported and c.scheduler == owner and parsed < releases.parse(c.release)
                 and scheduler not in c.not_for)


def backported(scheduler: str, params: Mapping[str, Any] | None = None) -> tuple[Change, ...]:
    """Every change the patch backports for this class, whatever the release (a build may lack any of them, its
    number says nothing sure), that a scheduler built with ``params`` meets (None: every one), in release order."""
    owner = releases.INHERITS.get(scheduler, scheduler)
    return tuple(c for c in CHANGES if c.backported and c.scheduler == owner and scheduler not in c.not_for
                 and (params is None or c.meets(params)))


def lacks(key: str, scheduler: str, deepspeed_version: str) -> bool:
    """True where this release lacks a change the patch backports (``key``) for this scheduler class.

    Raises KeyError for a key that is not in ``CHANGE_KEYS``."""
    if key not in CHANGE_KEYS:
        raise KeyError(f"no change {key!r} in upstream.CHANGES (one of {', '.join(sorted(CHANGE_KEYS))})")
    return any(c.key == key for c in missing_backports(scheduler, deepspeed_version))


def changed_class(key: str, scheduler: str) -> str | None:
    """The class whose code upstream changed (change ``key``) for ``scheduler`` (WarmupDecayLR runs WarmupLR's, but
    not its default peak); None where no change of that key is this class's."""
    owner = releases.INHERITS.get(scheduler, scheduler)
    changed = [c for c in CHANGES if c.key == key and c.scheduler == owner]
    return owner if changed and not any(scheduler in c.not_for for c in changed) else None


def methods_to_fix(deepspeed_version: str) -> tuple[tuple[str, str], ...]:
    """(class, method) the patch wraps on this release: where a backported change lives and is missing."""
    parsed = releases.parse(deepspeed_version)
    wanted = [(c.scheduler, c.method) for c in CHANGES if c.backported and parsed < releases.parse(c.release)
              and releases.start_fact(c.scheduler, deepspeed_version) is not None]  # the class exists on this release
    return tuple(dict.fromkeys(wanted))


def built_wrong(scheduler: str, deepspeed_version: str) -> bool:
    """True where this release builds a scheduler of this class otherwise than the reference does (a backported
    change of the constructor is missing: the start lr, the default peak, an unknown warmup_type): the only
    schedulers the constructor's fix and the nets (initialize, load_checkpoint, step mode's) ever change."""
    return any(c.method == "__init__" for c in missing_backports(scheduler, deepspeed_version))


def at_construction(scheduler: str) -> tuple[Change, ...]:
    """The changes whose backport runs after this class's constructor (each where the build lacks it), in the order
    the reference's constructor makes them: the start lr last, since it writes get_lr(), which reads the others."""
    owner = releases.INHERITS.get(scheduler, scheduler)
    built = [c for c in CHANGES if isinstance(c.backport, AtConstruction) and c.scheduler == owner
             and scheduler not in c.not_for]
    return tuple(sorted(built, key=lambda c: isinstance(c.backport, AtConstruction) and c.backport.last))


def answers(scheduler: str, method: str) -> tuple[Change, ...]:
    """The changes whose backport answers for ``scheduler.method`` (its class's own code), in release order."""
    return tuple(c for c in CHANGES if isinstance(c.backport, Answer) and c.scheduler == scheduler
                 and c.method == method)


def step_lr(deepspeed_version: str) -> str:
    """What this release's step leaves in a group whose lr is a tensor (releases.StepLr): the newest change it has
    of those that moved it (PR #7633, #8202), else a float."""
    parsed = releases.parse(deepspeed_version)
    had = [c.leaves for c in CHANGES if c.leaves is not None and parsed >= releases.parse(c.release)]
    return had[-1] if had else releases.StepLr.FLOAT


def first_release(key: str) -> str:
    """The first release with every class's change of ``key`` (the start: 0.15.3, #6597, for WarmupLR)."""
    return min((c.release for c in CHANGES if c.key == key), key=releases.parse)


def fixed_release() -> str:
    """The first release that has every change the patch backports."""
    return max((c.release for c in CHANGES if c.backported), key=releases.parse)


def advice(scheduler: str | None, params: Mapping[str, Any]) -> list[str]:
    """Where the reference's constructor refuses a config this release runs: one line per change that says so."""
    if scheduler is None:
        return []
    return [line for c in CHANGES if c.advice is not None for line in [c.advice(scheduler, params)] if line]


# The verdict per scheduler class (status(), doctor, status) -------------------------------------------------------

def verdict(scheduler: str, deepspeed_version: str) -> str:
    """A few words per scheduler class for ``status()`` and ``doctor``, from the table."""
    fact = releases.start_fact(scheduler, deepspeed_version)
    return verdict_of(scheduler, deepspeed_version, fact.value if fact is not None else None,
                      missing_backports(scheduler, deepspeed_version))


def verdict_of(scheduler: str, deepspeed_version: str, start: releases.Start | None,
               missing: tuple[Change, ...]) -> str:
    """``verdict`` from what a class does when built (``start``; None: the build has no such class) and the
    backported changes it lacks: the table's, or what the probe saw (installed.py)."""
    level = releases.deepspeed_support(deepspeed_version)
    if level is releases.Support.UNSUPPORTED:
        return "unsupported"
    if start is None:
        return "absent"
    if level is releases.Support.UNTESTED and not missing:
        return "untested"
    if start is not releases.Start.SETS_EVERY_GROUP:
        return "affected (groups 1+)" if start is releases.Start.SETS_GROUP_0_ONLY else "affected"
    if never_affected(scheduler):
        return "not affected"
    if not missing:
        return "fixed upstream"
    last_per_key = {c.key: c for c in missing}  # in release order: the last row wins
    return "fixed upstream; the patch backports " + ", ".join(
        f"{c.key.replace('_', ' ')} ({c.pr})" for c in last_per_key.values())


def unclaimed_for(scheduler: str, deepspeed_version: str, params: Mapping[str, Any]) -> tuple[Change, ...]:
    """The changes this release lacks that the patch does not backport and a scheduler built with ``params`` meets
    (OneCycle's stair counts, #8179): where the package claims nothing of the reference, in release order."""
    parsed = releases.parse(deepspeed_version)
    owner = releases.INHERITS.get(scheduler, scheduler)
    return tuple(c for c in CHANGES if not c.backported and c.scheduler == owner and parsed < releases.parse(c.release)
                 and c.meets(params))


def backports_for(scheduler: str, deepspeed_version: str, params: Mapping[str, Any]) -> tuple[Change, ...]:
    """The backported changes this release lacks that a scheduler built with ``params`` meets (each change's
    ``meets``: the default peak only without ``warmup_max_lr``, the unknown-``warmup_type`` fallback only with
    such a type)."""
    return tuple(c for c in missing_backports(scheduler, deepspeed_version) if c.meets(params))


def never_affected(scheduler: str) -> bool:
    """True for a class that sets every group's lr when built on every release in the table (OneCycle)."""
    facts = [f for f in releases.SCHEDULER_STARTS if f.subject == scheduler]
    return bool(facts) and all(f.value is releases.Start.SETS_EVERY_GROUP for f in facts) and not any(
        c.backported and c.scheduler == releases.INHERITS.get(scheduler, scheduler) for c in CHANGES)


def verdicts(deepspeed_version: str) -> dict[str, str]:
    """``verdict`` of every scheduler class, in the table's order (``status()``, ``doctor``, ``status``)."""
    return {name: verdict(name, deepspeed_version) for name in releases.scheduler_classes()}
