"""One run's step 0 from the chain of the newest record bound to its save (record 2: an observed step 0, or the
release that ran it unrecorded), and what a claim says (record 1, or a record 2 that says it is unbound)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ... import record_data, releases, upstream
from .. import config_facts
from .judge import (
    backported_changes,
    behavior_releases,
    change_applied,
    judge,
    step0_only,
    table_release,
    unknown_later,
)
from .read import Save
from .report import Lr, Report, lrs_text
from .verdicts import AFFECTED, NOT_AFFECTED, UNKNOWN

WORST = {NOT_AFFECTED: 0, UNKNOWN: 1, AFFECTED: 2}  # the order of the verdicts, the worst of a run's wins


def judge_from_chain(report: Report, chain: Save, scheduler: str, params: dict[str, Any],
                      newest: Save, earlier: Save | None = None, *, copy: bool = False,
                      params_known: bool = True) -> None:
    """One verdict from every fact: step 0 from the chain of the newest bound record (unless a gap in it leaves
    it open, ``earlier``), then the later changes the guard table finds in the newest save when the process that
    wrote it ran unpatched (``params_known`` False: the checkpoint does not hold the scheduler's params, and those
    changes are ``unknown``). The worst of them wins, and ``why`` names each."""
    record = chain.record
    assert record is not None
    report.step0_checkpoint = str(chain.file)  # the save whose record tells step 0
    differences = len(report.differences)
    found = [step0_from_origin(report, record["step0"], scheduler, params, chain)]
    if earlier is not None and found[0][0] == AFFECTED:
        found[0] = _unless_a_gap(report, scheduler, params, earlier, found[0], differences)
    if chain is not newest and found[0][0] == NOT_AFFECTED and not copy:  # a copy's process is the chain's own
        found[0] = _unless_started_afresh(report, scheduler, params, chain, newest, found[0])
    if not patched_process(newest) and not params_known and scheduler in releases.scheduler_classes() and \
            needs_nothing(newest.version, newest.version) is None:
        found.append((UNKNOWN, f"the newest save's process ({newest.tag.name}) ran unpatched, and the checkpoint does "
                               "not hold the scheduler's params: the changes after step 0 cannot be judged"))
    elif not patched_process(newest):
        later = _later_changes(report, scheduler, params, newest)
        if later is not None:
            found.append(later)
    report.verdict = max((verdict for verdict, _ in found), key=WORST.__getitem__)
    report.why = "; ".join(why for _, why in found if why)


def chain_step0(chain: Save | None) -> dict[str, Any] | None:
    """The step 0 the chain's record tells (record_data's shape), or None where there is none."""
    step0 = chain.record.get("step0") if chain is not None and chain.record is not None else None
    return step0 if isinstance(step0, dict) else None


def proves_step0(chain: Save) -> bool:
    """Whether the chain's bound record observed step 0 and holds what the reference runs it at, computed by the
    patch from the scheduler itself: then it decides, whatever the ds_config says or lacks."""
    step0 = chain_step0(chain)
    return chain.vouched and step0 is not None and step0.get("how") == record_data.OBSERVED and \
        step0.get("expected") is not None


def needs_nothing(*versions: str) -> str | None:
    """Why runs on these releases ran as the reference whatever their scheduler (each a release the table was read
    at, or a vendor build of one, that lacks no backported change for any class); None where one may not."""
    named = []
    for version in versions:
        release = table_release(version)
        if release is None or releases.deepspeed_support(release) is not releases.Support.KNOWN or \
                any(upstream.missing_backports(scheduler, release) or not _starts_every_group(scheduler, release)
                    for scheduler in releases.scheduler_classes()):
            return None
        named.append(version)
    return (f"DeepSpeed {' and '.join(dict.fromkeys(named))} lacks none of the changes the patch backports, for "
            f"any scheduler class: it runs every step as {releases.BEHAVIOR_REFERENCE} does")


def _starts_every_group(scheduler: str, release: str) -> bool:
    start = releases.start_fact(scheduler, release)
    return start is not None and start.value is releases.Start.SETS_EVERY_GROUP


def _unless_started_afresh(report: Report, scheduler: str, params: dict[str, Any], chain: Save,
                           newest: Save, cleared: tuple[str, str]) -> tuple[str, str]:
    """A chain that clears step 0 from a save older than the newest, which has no bound record: the process that
    wrote the newest save resumed from that chain (then it holds) or started afresh, unpatched, into the same
    folder (a rerun that saved fewer tags): only if such a fresh start on the newest save's release would not be
    affected does the chain's answer stand."""
    scratch = table_reading(report, scheduler, params, newest.version)
    unseen = unseen_start(report, scheduler, params, newest.version) if scratch.verdict == NOT_AFFECTED else None
    if unseen is None and scratch.verdict == NOT_AFFECTED:
        return cleared
    report.step0_lrs = report.step0_lr = None
    fresh = f"then it ran on DeepSpeed {newest.version} as an unpatched run: {scratch.verdict}" if unseen is None \
        else f"or resumed a save of another release: not affected {unseen}"
    return UNKNOWN, (f"{cleared[1]} (the record of {chain.tag.name}); but the newest save, {newest.tag.name}, has no "
                     "bound record: its process resumed from that save (then step 0 is as recorded) or started "
                     f"afresh unpatched ({fresh}), and the files cannot tell which")


def _unless_a_gap(report: Report, scheduler: str, params: dict[str, Any], earlier: Save,
                  harmed: tuple[str, str], differences: int) -> tuple[str, str]:
    """A chain whose step 0 ran unrecorded, in a folder where an earlier save's bound record observed step 0 run
    as the reference release runs it: the unrecorded process resumed from that save (then step 0 is as recorded
    there) or started afresh unpatched (then it is the harm the chain names), and the files cannot tell which."""
    assert earlier.record is not None
    scratch = replace(report, differences=[], notes=[])
    verdict, proof = step0_from_origin(scratch, earlier.record["step0"], scheduler, params, earlier)
    if verdict != NOT_AFFECTED:
        return harmed
    del report.differences[differences:]
    report.step0_lrs = report.step0_lr = None
    return UNKNOWN, (f"the chain has a gap: {harmed[1]}; but the record of an earlier save here, "
                     f"{earlier.tag.name}, proves {proof}; if the unrecorded process resumed from it, step 0 is as "
                     "recorded there, if it started afresh unpatched it is the harm above, and the files cannot "
                     "tell which")


def table_reading(report: Report, scheduler: str, params: dict[str, Any], release: str) -> Report:
    """A copy of ``report`` judged by the guard table alone, as if ``release`` had run step 0 unpatched (no later
    change): its verdict, why, step-0 lrs and differences, for the caller to weigh."""
    scratch = replace(report, differences=[], notes=[], verdict=UNKNOWN, why="")
    return judge(scratch, scheduler, params, release, release, later=False).onto(scratch)


def patched_process(save: Save) -> bool:
    """Whether the process that wrote ``save`` ran the patch's fixes (a bound record 2 of reset or step mode)."""
    record = save.record
    return record is not None and bool(record.get("bound")) and record["mode"] in ("reset", "step")


def step0_from_origin(report: Report, origin: dict[str, Any], scheduler: str, params: dict[str, Any],
                       chain: Save) -> tuple[str, str]:
    """Step 0 as the chain tells it (record_data's ``how``): observed, or the release that ran it unrecorded, or
    a reason that it is not known."""
    how = origin["how"]
    if how == record_data.OBSERVED:
        return _observed(report, origin, _newest_step0_from_table(report, scheduler, params, origin["deepspeed"]))
    if how == record_data.NO_STEP_YET:  # that save came before step 0, which a process with no record then ran
        return from_table(report, scheduler, params, chain.version, f"the newest bound record ({chain.tag.name}) "
                           "was saved before step 0, and the process that ran it left no bound record", proof=False,
                           seen=False)
    release = origin.get("deepspeed")
    report.step0_deepspeed_version = release
    why = origin.get("why") or how
    if isinstance(release, str):
        # unrecorded: that release ran step 0 unpatched, so the table's reading stands; a claim (unbound, record 1)
        # or an unobserved step: only a class or release that needs no fix clears it. Only an unobserved step ran in
        # the recording process itself, on the release it names; any other release named is a loaded save's
        return from_table(report, scheduler, params, release, why, proof=how == record_data.UNRECORDED,
                          seen=how == record_data.UNOBSERVED)
    report.step0_lrs = report.step0_lr = None
    return UNKNOWN, f"{why}; the release that ran step 0 is not known"


def _newest_step0_from_table(report: Report, scheduler: str, params: dict[str, Any],
                             release: str) -> list[Lr] | None:
    """What the reference release runs step 0 at for this config, per group, as the table reads it; None where it
    cannot."""
    scratch = table_reading(report, scheduler, params, release)
    newest = scratch.newest_step0_lrs
    return list(newest) if newest else ([scratch.newest_step0_lr] if scratch.newest_step0_lr is not None
                                        else None)


def _observed(report: Report, origin: dict[str, Any], table: list[Lr] | None) -> tuple[str, str]:
    """Step 0 as a patched process saw its optimizer run it, against what the reference release runs it at: the lrs
    that patch set (or found right, or would have set in warn mode), else the table's reading of the config
    (``table``)."""
    lrs, expected = origin["lrs"], origin["expected"]
    who = f"accelerate-warmup-patch {origin.get('patch') or '?'} ({origin.get('mode') or '?'})"
    report.step0_lrs, report.step0_lr = lrs, lrs[0] if lrs else None
    report.step0_deepspeed_version = origin["deepspeed"]
    if expected is None and table is not None and len(table) == len(lrs) and None not in table:
        expected = table
    ran = f"step 0 ran at {lrs_text(lrs, None)} (observed by {who} on DeepSpeed {origin['deepspeed']})"
    if expected is None:
        return UNKNOWN, f"{ran}; what {releases.BEHAVIOR_REFERENCE} runs it at is not known here"
    report.newest_step0_lrs, report.newest_step0_lr = expected, expected[0] if expected else None
    if record_data.same_lrs(lrs, expected):
        did = {record_data.FIXED: ", which fixed it", record_data.AS_RELEASE: ", which had nothing to change"}.get(
            origin.get("patch_did") or "", "")
        return NOT_AFFECTED, f"{ran}{did}: as {releases.BEHAVIOR_REFERENCE} runs it"
    warned = "warned, not fixed: " if origin.get("patch_did") == record_data.WARNED else ""
    report.differences.append(f"{warned}{ran}, {releases.BEHAVIOR_REFERENCE} runs it at {lrs_text(expected, None)}")
    return AFFECTED, report.differences[-1]


def from_table(report: Report, scheduler: str, params: dict[str, Any], release: str, why: str, *,
                proof: bool, seen: bool = True) -> tuple[str, str]:
    """Step 0 judged by the guard table on ``release``. ``proof``: that release is known to have run step 0
    unpatched, so the table's answer stands; otherwise only a class or release that needs no fix clears it.
    ``seen`` False: ``release`` is a save's, and the process that ran step 0 left no record (``unseen_start``)."""
    scratch = table_reading(report, scheduler, params, release)
    report.step0_lr, report.newest_step0_lr = scratch.step0_lr, scratch.newest_step0_lr
    report.step0_lrs, report.newest_step0_lrs = scratch.step0_lrs, scratch.newest_step0_lrs
    report.notes.extend(scratch.notes)
    verdict = scratch.verdict
    unseen = unseen_start(report, scheduler, params, release) if verdict == NOT_AFFECTED and not seen else None
    if unseen is not None:
        report.step0_lrs = report.step0_lr = None
        return UNKNOWN, f"{scratch.why} ({why}) {unseen}"
    if verdict == NOT_AFFECTED or proof:
        report.differences.extend(scratch.differences)
        return verdict, f"{scratch.why} ({why})" if scratch.why else why
    report.step0_lrs = report.step0_lr = None
    return UNKNOWN, (f"{why}; unpatched on DeepSpeed {release}, this run would be {verdict}, and nothing bound to "
                     "these files says how its step 0 really ran")


def unseen_start(report: Report, scheduler: str, params: dict[str, Any], release: str) -> str | None:
    """Why the table's ``not affected`` on ``release``, the release of a save, does not clear a step 0 that a
    process with no record ran: a save's ``ds_version`` names the release that wrote it, not the one that ran step
    0, and a job that resumed a save of another release unpatched (into a new folder, or with the earlier saves
    deleted) leaves the same files as a run that started here. None where every release the table tells apart
    runs this config as the reference (then whichever ran it did); else the oldest that would not, and how, as the
    end of a ``why`` that says step 0 ran as the reference runs it."""
    for other in behavior_releases(scheduler):
        scratch = table_reading(report, scheduler, params, other)
        if scratch.verdict != NOT_AFFECTED:
            return (f"if DeepSpeed {release} ran step 0; but no record says which release did: a job that resumed a "
                    f"save of another release unpatched leaves these same files, and on DeepSpeed {other} this run "
                    f"would be {scratch.verdict} ({scratch.why})")
    return None


def _later_changes(report: Report, scheduler: str, params: dict[str, Any],
                   newest: Save) -> tuple[str, str] | None:
    """The backported changes the steps after step 0 meet (a default peak, the cosine past total_num_steps, ...)
    on the newest save's release, where the process that wrote that save ran unpatched (a warn-mode process, or one
    with no bound record): the worst of them, each named; None where none applied."""
    if scheduler not in releases.scheduler_classes():
        return None
    release = table_release(newest.version)
    if release is None:  # a build whose code the table does not know: never the rows of the release it names
        why = unknown_later(report, scheduler, params, newest.version)
        return None if why is None else (UNKNOWN, f"{why} (in the newest save's process, {newest.tag.name}, which "
                                                  "ran unpatched)")
    found: list[tuple[str, str]] = []
    for change in backported_changes(scheduler, release, params):
        if step0_only(change):
            continue  # the chain's step 0 above
        applied, how = change_applied(change, report, params, release)
        if applied:
            report.differences.append(f"{config_facts.label(change)}: {how} (in the newest save's process, "
                                      f"{newest.tag.name}, which ran unpatched)")
            found.append((AFFECTED, report.differences[-1]))
        elif applied is None:
            found.append((UNKNOWN, f"{config_facts.label(change)}: {how}"))
    if not found:
        return None
    worst = max((verdict for verdict, _ in found), key=WORST.__getitem__)
    return worst, "; ".join(why for _, why in found)


# A claim: record 1, or a record 2 that says it is unbound --------------------------------------------------

def apply_claim(report: Report, record: dict[str, Any]) -> None:
    """What an unbound record says about step 0: a harm it names counts (doubt needs only a reason); a fix it
    claims clears nothing (it is bound to no file: a rerun or a copy leaves it beside other saves)."""
    scheduler = record["scheduler"]
    who = f"accelerate-warmup-patch {record['version']} ({record['mode']})"
    kind = "a record 1 (0.5.0)" if record_data.is_record_1(record) else \
        "a record" if _bound_to_a_file(record) else "an unbound record"
    if scheduler is None:
        report.notes.append(f"{who} recorded no lr scheduler in the engine")
        return
    step0, before, after = scheduler["step0"], scheduler["lrs_before"], scheduler["lrs_after"]
    if report.scheduler is None:
        report.scheduler = scheduler["class"]
    if step0 == record_data.WARNED and before and after and record_data.same_lrs(before, after):
        # the warning was about later steps (reset would have changed them, not step 0): the files' own reading of
        # an unpatched run judges those, at the iteration the save reached
        report.notes.append(f"{who} warned, changing nothing: {scheduler['why'] or 'no reason given'} (step 0 "
                            f"unchanged, {lrs_text(before, None)}): judged from the checkpoint as an unpatched run")
    elif step0 == record_data.WARNED and before:
        report.verdict = AFFECTED
        report.why = (f"warned, not fixed ({who}): step 0 ran at {lrs_text(before, None)}, reset mode would have "
                      f"run it at {lrs_text(after, None)}")
        report.step0_lrs, report.step0_lr = before, before[0]
    elif step0 in (record_data.FIXED, record_data.AS_RELEASE, record_data.EARLIER_PROCESS) and \
            report.verdict != NOT_AFFECTED:
        unpatched = report.verdict
        report.verdict = UNKNOWN
        report.why = (f"{kind} of {who} says step 0 was {step0}, but it is {_unbound_how(record)}, so it proves "
                      f"nothing about these saves; unpatched, this run would be {unpatched}: "
                      f"{report.why or 'the files do not say why'}")
        report.step0_lrs = report.step0_lr = None
    elif step0 in (record_data.LEFT, "unknown"):
        report.notes.append(f"{who} recorded step 0 as {step0!r} ({scheduler['why'] or 'no reason given'}): "
                            "judged from the checkpoint as an unpatched run")


def _bound_to_a_file(record: dict[str, Any]) -> bool:
    bound_to = record.get("bound_to")
    return isinstance(bound_to, dict) and bound_to.get("file") is not None


def _unbound_how(record: dict[str, Any]) -> str:
    """How a claim is not bound to the save: to no file, or to its model states but not the states files beside
    them (read.py keeps such a record as a claim)."""
    if _bound_to_a_file(record):
        return "bound to these model states but not to the other states files beside them"
    return "bound to no file"
