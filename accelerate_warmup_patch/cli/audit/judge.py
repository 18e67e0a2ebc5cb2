"""The guard table's verdict on one save: step 0 and the backported changes that apply from the start, on the
release that ran them and the scheduler config it ran with (``releases``, and each change's judgement in its unit of
``upstream/``, through ``config_facts``), as a typed ``Verdict`` the caller puts into its report. ``chain`` and
``saves`` ask it; ``run_report`` puts one run's verdict together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ... import releases, upstream, vendor_builds
from ...upstream.unit import Applied, AtStep0
from .. import config_facts
from .read import number
from .report import Lr, Report, lr_text
from .verdicts import AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE

STEP0_DIFFERENCE = "group "  # how a difference of step 0 begins ("group 0 ran step 0 at ..."), a later change's not


@dataclass(frozen=True)
class Step0Lrs:
    """The lr each group ran step 0 at and the reference release's, as the table reads them."""

    ran: list[Lr]
    reference: list[Lr]
    per_group: bool  # the file holds the groups' count: the per-group lists are reported too


@dataclass
class Verdict:
    """The table's verdict on one save: the verdict and why, the step-0 lrs where it can say them, the differences
    that made it ``affected`` and the notes to add."""

    verdict: str = UNKNOWN
    why: str = ""
    lrs: Step0Lrs | None = None
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def onto(self, report: Report) -> Report:
        """Puts the verdict into ``report``: its verdict, why and step-0 lrs (where said); the differences and notes
        after the report's own."""
        report.verdict, report.why = self.verdict, self.why
        if self.lrs is not None:
            report.step0_lr, report.newest_step0_lr = self.lrs.ran[0], self.lrs.reference[0]
            if self.lrs.per_group:
                report.step0_lrs, report.newest_step0_lrs = self.lrs.ran, self.lrs.reference
        report.differences.extend(self.differences)
        report.notes.extend(self.notes)
        return report


def judge(report: Report, scheduler: str, params: dict[str, Any], version: str, newest_version: str, *,
          later: bool = True) -> Verdict:
    """Step 0 and the backported changes that apply from the start, on ``version`` (the release of the earliest
    save); the cosine past total_num_steps, which the last steps meet, on ``newest_version``. Reads the report's
    optimizer lr, groups and iteration; changes nothing in it."""
    found = Verdict()
    try:
        level = releases.deepspeed_support(version)
    except ValueError:
        found.verdict, found.why = UNREADABLE, f"ds_version {version!r} is not a release number"
        return found
    if releases.not_the_release(version) is not None:
        known = _build_as_release(found, version)
        if known is None:
            return found
        version, level = known, releases.deepspeed_support(known)
    if scheduler not in releases.scheduler_classes():
        found.why = f"scheduler type {scheduler!r} is not one of DeepSpeed's the table knows"
        return found
    fact = releases.start_fact(scheduler, version)
    groups = report.param_groups
    if upstream.never_affected(scheduler):
        if fact is not None:
            ran, reference = step0_lrs(fact.value, scheduler, params, report.optimizer_lr, groups or 1)
            found.lrs = Step0Lrs(ran, reference, per_group=bool(groups))
        found.verdict, found.why = NOT_AFFECTED, f"{scheduler} sets the lr when built, on every release"
        unclaimed = _unclaimed(scheduler, version, params)
        if unclaimed:  # its start is the reference's, its later steps are not: nothing proves the run as the reference
            found.verdict, found.why = UNKNOWN, f"{found.why}, but {unclaimed}"
        return found
    if level is releases.Support.UNSUPPORTED or fact is None:
        found.why = (f"DeepSpeed {version} is older than the guard table ({releases.DEEPSPEED_FLOOR}) or has no "
                     f"{scheduler}: the table does not say what it did")
        return found
    if level is releases.Support.UNTESTED:
        found.notes.append(f"DeepSpeed {version} is newer than the table: assumed to run as "
                           f"{releases.NEWEST_DEEPSPEED}")
    ran, reference = step0_lrs(fact.value, scheduler, params, report.optimizer_lr, groups or 1)
    found.lrs = Step0Lrs(ran, reference, per_group=bool(groups))
    hurt, unsure = [], []
    start_missing = upstream.lacks(upstream.START, scheduler, version)
    for index, (before, after) in enumerate(zip(ran, reference)):
        if before is None and start_missing:  # the group's own lr, which the file does not hold
            whose = "the optimizer's lr" if index == 0 else "its own lr"
            hurt.append(f"{STEP0_DIFFERENCE}{index} ran step 0 at {whose} (not in the file), "
                        f"{releases.BEHAVIOR_REFERENCE} runs it at {lr_text(after)}")
        elif before is not None and after is not None and before != after:
            hurt.append(f"{STEP0_DIFFERENCE}{index} ran step 0 at {lr_text(before)}, "
                        f"{releases.BEHAVIOR_REFERENCE} runs it at {lr_text(after)}")
        elif after is None or before is None:
            unsure.append(f"group {index}'s step-0 lr is not in the file")
    if groups is None and fact.value is releases.Start.SETS_GROUP_0_ONLY:
        unsure.append(f"{scheduler} on {version} sets group 0 only: groups 1+ ran step 0 at their own lr, "
                      f"{releases.BEHAVIOR_REFERENCE} at 0; the file does not say how many groups there were")
    newest_release = table_release(newest_version)
    last_steps = [] if newest_release is None else \
        [c for c in backported_changes(scheduler, newest_release, params) if by_last_steps(c)]
    unknown = unknown_later(report, scheduler, params, newest_version, last_steps_only=True) \
        if later and newest_release is None else None
    if unknown is not None:
        unsure.append(f"{unknown} (the newest save's process)")
    for change in [c for c in backported_changes(scheduler, version, params) if not by_last_steps(c)] + \
            (last_steps if later else []):
        if step0_only(change):
            continue  # the step-0 lrs above
        applied, how = change_applied(change, report, params, version)
        if applied is None:
            unsure.append(f"{config_facts.label(change)}: {how}")
        elif applied:
            found.differences.append(f"{config_facts.label(change)}: {how}")
    found.differences[:0] = hurt
    if found.differences:
        found.verdict = AFFECTED
        found.why = "; ".join(found.differences)
    elif unsure:
        found.why = "; ".join(unsure)
    else:
        found.verdict = NOT_AFFECTED
        found.why = (f"step 0 ran at {lr_text(ran[0])}, as on {releases.BEHAVIOR_REFERENCE}, and no other backported "
                     "change applied")
    if unsure and found.verdict == AFFECTED:
        found.notes.extend(unsure)
    return found


def _build_as_release(found: Verdict, version: str) -> str | None:
    """A ds_version that is no release's number: a vendor build whose code the table knows is judged as the release
    it is based on (its differences noted); any other build is unknown, with the reason (its number says nothing sure
    about its code: pip install from git before or after a fix, a cherry-pick, a fork)."""
    vendor = vendor_builds.vendor_build(version)
    if vendor is not None:
        found.notes.append(f"DeepSpeed {version} is {vendor.name}: upstream {vendor.based_on}'s schedulers; "
                               f"{vendor.differences}")
        return vendor.based_on
    found.why = (f"DeepSpeed {version} is {releases.not_the_release(version)}: the table does not know its "
                     "schedulers' code (a build from git before or after a fix, a cherry-pick, a vendor's fork), and "
                     "no record bound to these files says how its step 0 ran")
    return None


def behavior_releases(scheduler: str) -> tuple[str, ...]:
    """The first release of each span the table tells apart for ``scheduler`` (its start, its default peak, each
    backported change), oldest first, where the class existed: one release stands for every release of its span,
    since the table says they run it alike."""
    firsts = {releases.DEEPSPEED_FLOOR, *(change.release for change in upstream.CHANGES)}
    for table in (releases.SCHEDULER_STARTS, releases.WARMUP_MAX_LR_DEFAULTS, releases.WARMUP_LENGTHS):
        firsts.update(fact.span.first for fact in table)
    return tuple(sorted((release for release in firsts if releases.start_fact(scheduler, release) is not None),
                        key=releases.parse))


def table_release(version: str) -> str | None:
    """The release whose rows tell what ``version``'s schedulers do after step 0: the release itself where the table
    was read at it, the release a vendor build whose code is known is based on (vendor_builds.VENDOR_BUILDS); None for
    any other build, whose number says nothing sure about its code."""
    try:
        if releases.not_the_release(version) is None:
            return version
    except ValueError:  # no release number in it
        return None
    vendor = vendor_builds.vendor_build(version)
    return vendor.based_on if vendor is not None else None


def unknown_later(report: Report, scheduler: str, params: dict[str, Any], version: str, *,
                  last_steps_only: bool = False) -> str | None:
    """On ``version``, a build whose code the table does not know (``table_release`` None): the backported changes
    after step 0 (those a run's last steps meet, or all) that this save and its params could meet on some release of
    the table, named, with why nothing sure is said of them; None where none could (the params or the saved
    iteration rule each out)."""
    floor = releases.DEEPSPEED_FLOOR  # the oldest release read lacks every change: what any code might lack
    could = [config_facts.label(c) for c in backported_changes(scheduler, floor, params)
             if not step0_only(c) and (by_last_steps(c) or not last_steps_only)
             and change_applied(c, report, params, floor)[0] is not False]
    if not could:
        return None
    try:
        what = releases.not_the_release(version) or "no release the table was read at"
    except ValueError:
        what = "no release number"
    return (f"{', '.join(could)}: DeepSpeed {version} is {what}, so the table does not say whether its code has "
            f"{'it' if len(could) == 1 else 'them'}")


def backported_changes(scheduler: str, version: str, params: dict[str, Any]) -> tuple[upstream.Change, ...]:
    try:
        return config_facts.differences(scheduler, version, params)
    except ValueError:  # a ds_version that is not a release number: the step-0 release was already checked
        return ()


def step0_lrs(how: releases.Start, scheduler: str, params: dict[str, Any], lr: Lr,
              groups: int) -> tuple[list[Lr], list[Lr]]:
    """The lr each group ran optimizer step 0 at on a release that starts the class this way, and on the reference
    (every group at its start: warmup_min_lr, 0.0 for WarmupCosineLR, cycle_min_lr for OneCycle). Group 0 runs
    at the optimizer's lr from the config; groups 1+ at their own lr, which no checkpoint holds (None)."""
    name, default = releases.REFERENCE_STARTS[scheduler]
    start = params.get(name, default) if name else default
    reference = [number(m) for m in start] if isinstance(start, (list, tuple)) else [number(start)] * groups
    reference = (reference + [None] * groups)[:groups]
    own: list[Lr] = [lr] + [None] * (groups - 1)
    if built_mid_way(params):  # every release and the reference write a start lr at -1 alone
        return own, list(own)
    if how is releases.Start.SETS_EVERY_GROUP:
        return list(reference), reference
    if how is releases.Start.SETS_GROUP_0_ONLY:
        return [reference[0], *own[1:]], reference
    return own, reference


def _unclaimed(scheduler: str, version: str, params: Mapping[str, Any]) -> str:
    """What the run's params meet on this release that the patch does not backport, in words; empty where nothing."""
    try:
        changes = upstream.unclaimed_for(scheduler, version, params)
    except ValueError:
        return ""
    return "; ".join(f"DeepSpeed {version} lacks {config_facts.label(c)}, not backported: {c.what}" for c in changes)


def built_mid_way(params: Mapping[str, Any]) -> bool:
    """A scheduler configured to start at a later iteration (``last_batch_iteration`` in its params): no release's
    constructor writes an lr there, the reference's neither, so step 0 runs at the optimizer's lr on each."""
    iteration = params.get("last_batch_iteration", -1)
    return isinstance(iteration, int) and not isinstance(iteration, bool) and iteration >= 0


def step0_only(change: upstream.Change) -> bool:
    """A change that decides only the lr step 0 runs at: the step-0 lrs judge it (a bound record's chain tells that
    step)."""
    return isinstance(change.judgement, AtStep0)


def by_last_steps(change: upstream.Change) -> bool:
    """A change a run's last steps meet: judged on the release of the newest save's process."""
    return isinstance(change.judgement, Applied) and change.judgement.last_steps


@dataclass(frozen=True)
class _Read:
    """One save as a change's judgement reads it (``upstream.unit.Saved``)."""

    params: Mapping[str, Any]
    optimizer_lr: Lr
    param_groups: int | None
    iteration: int | None
    version: str

    def number(self, value: Any) -> Any:
        return number(value)

    def lr_text(self, value: Any) -> str:
        return lr_text(value)


def change_applied(change: upstream.Change, report: Report, params: dict[str, Any],
                   version: str) -> tuple[bool | None, str]:
    """Whether a backported change the release lacks changed an lr this run used (None: the file cannot say), as
    the change's unit judges it."""
    judgement = change.judgement
    if not isinstance(judgement, Applied):  # tests/unit/test_upstream.py: never for a change the audit meets
        return None, f"the audit has no judgement of a run that lacked it ({type(judgement).__name__})"
    return judgement.applied(_Read(params, report.optimizer_lr, report.param_groups, report.last_batch_iteration,
                                   version))
