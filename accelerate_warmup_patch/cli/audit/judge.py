"""One run's verdict from all the facts (docs/audit.md, "When each verdict is given"): step 0 from the chain of the
newest record bound to its save (record 2: an observed step 0, or the release that ran it unrecorded), else from its
earliest save that took a step, read with the guard table (``releases``, through ``config_facts``); the later
changes from its newest save. The worst wins; "not affected" only from proof."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ... import record_data, releases
from .. import config_facts
from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .find import Run
from .read import Save, number, read_save
from .stores import Store
from .verdicts import AFFECTED, NOT_AFFECTED, RECORD_FILE, UNKNOWN, UNREADABLE


def blank_report(path: str) -> dict[str, Any]:
    return {
        "path": path, "checkpoint": None, "deepspeed_version": None, "step0_checkpoint": None,
        "step0_deepspeed_version": None, "scheduler": None, "params": None, "optimizer_lr": None,
        "param_groups": None, "global_steps": None, "last_batch_iteration": None, "step0_lr": None,
        "newest_step0_lr": None, "step0_lrs": None, "newest_step0_lrs": None, "record": None, "differences": [],
        "notes": [], "verdict": UNKNOWN, "why": ""}


def audit_run(run: Run, config_root: str | None = None) -> dict[str, Any]:
    """The report of one run: step 0 judged from its earliest save that took a step (and the patch's record
    there), the later changes from its newest save; never raises."""
    report = blank_report(str(run.path))
    report["notes"].extend(run.notes)
    try:
        return _audit_run(run, report, config_root)
    except Unreadable as error:
        return unreadable_report(report, str(error))
    except Exception as error:  # a bug of ours on an odd file: that run's line, not a traceback
        return unreadable_report(report, f"the audit failed on it ({type(error).__name__}: {str(error)[:200]})")


def _audit_run(run: Run, report: dict[str, Any], config_root: str | None) -> dict[str, Any]:
    newest = read_save(run.tag, config_root, run.store)
    report["checkpoint"], report["deepspeed_version"] = str(newest.file), newest.version
    read: dict[PurePath, Save] = {run.tag: newest}
    first = newest
    for tag in run.tags[:-1]:  # the earliest save that took an optimizer step (or does not say), else the newest
        save = _read_earlier(tag, read, report, config_root, run.store)
        if save is not None and (_steps(save).ran is not False or save.record is not None):
            first = save
            break
    report["step0_checkpoint"], report["step0_deepspeed_version"] = str(first.file), first.version
    report["notes"].extend(newest.notes if first is newest else [*first.notes, *newest.notes])
    report["global_steps"], report["last_batch_iteration"] = newest.global_steps, newest.iteration
    if first.version != newest.version:
        report["notes"].append(f"saves of two DeepSpeed releases: {first.version} ({first.tag.name}, the earliest "
                               f"that took a step) and {newest.version} ({newest.tag.name}, the newest); step 0 is "
                               f"judged from {first.version}, the later changes from {newest.version}")
    config = first.config
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    opt_params = optimizer.get("params") if isinstance(optimizer, dict) else None
    report["optimizer_lr"] = number(opt_params.get("lr")) if isinstance(opt_params, dict) else None
    report["param_groups"] = first.groups
    counts = [_steps(save) for save in ([first] if first is newest else [first, newest])]
    report["notes"].extend(count.disagree for count in counts if count.disagree)
    if all(count.ran is False for count in counts):
        report["record"] = newest.record
        report["verdict"] = NOT_AFFECTED
        report["why"] = ("0 optimizer steps (global_steps, the scheduler's iteration and the optimizer's state agree): "
                         "no step ran, so no lr was used yet (the release that resumes it decides)")
        return report
    chain = _newest_bound_record(run, read, report, config_root)
    copy_of = _copied_from(run, newest, report, config_root) if chain is None and newest.record is None else None
    if copy_of is not None and copy_of.record is not None and copy_of.record.get("bound"):
        chain = copy_of
    report["record"] = chain.record if chain is not None else first.record
    if chain is None and first.record is None and isinstance(first.global_steps, int) and first.global_steps > 0:
        report["notes"].append(f"step 0 ran before the save {first.tag.name} ({first.global_steps} optimizer "
                               "steps), in this job or one it resumed from; no record of the patch says otherwise")
    block = config.get("scheduler")
    if first.config_problem is not None:
        report["why"] = first.config_problem
        return report
    if not isinstance(block, dict) or not block.get("type"):
        report["why"] = "no scheduler in the ds_config: " + _scheduler_in_code(first.scheduler_state)
        return report
    scheduler, params = _schedule(block, first)
    report["scheduler"], report["params"] = scheduler, params
    report["notes"].extend(config_facts.refused_later(scheduler, params))
    if copy_of is not None and copy_of.record is not None and not copy_of.record.get("bound"):
        # a copy of a recorded save whose model states hold no weights: that record is a claim about these files
        report["verdict"], report["why"] = _from_table(report, scheduler, params, newest.version,
                                                       copy_of.record.get("why", ""), proof=False)
        return report
    if chain is not None:
        earlier = _earlier_proof(run, read, report, config_root, chain)
        _judge_from_chain(report, chain, scheduler, params, newest, earlier, copy=chain is copy_of)
        _every_save(run, read, report, config_root, judged=(chain, newest), scheduler=scheduler, params=params)
        return report
    _judge(report, scheduler, params, first.version, newest.version)
    if first.record is not None:
        _apply_claim(report, first.record)
    unsure = next((count.disagree for count in counts if count.ran is None and count.disagree), None)
    if unsure is not None and report["verdict"] == AFFECTED:
        # the scheduler moved and nothing shows an optimizer step: user code may have stepped it ahead of training
        report["verdict"], report["step0_lrs"], report["step0_lr"] = UNKNOWN, None, None
        report["why"] = (f"{unsure}; if an optimizer step ran, this run is affected: {report['why']}")
    _every_save(run, read, report, config_root, judged=(first,), scheduler=scheduler, params=params)
    return report


def _schedule(block: dict[str, Any], save: Save) -> tuple[str, dict[str, Any]]:
    """The scheduler's type and params from a save's ``ds_config["scheduler"]``, as plain data."""
    scheduler = block["type"] if isinstance(block["type"], str) else repr(checkpoint_pickle.plain(block["type"]))
    try:
        params = checkpoint_pickle.plain(block.get("params") or {})
    except Unreadable as error:
        raise Unreadable(f"{save.file.name}: the scheduler's params: {error}") from None
    return scheduler, params if isinstance(params, dict) else {}


# Every save in the folder counts ---------------------------------------------------------------------------

_NAMED_SAVES = 3  # the saves a verdict's why names one by one (a run may hold hundreds)


def _every_save(run: Run, read: dict[PurePath, Save], report: dict[str, Any], config_root: str | None, *,
                judged: tuple[Save, ...], scheduler: str, params: dict[str, Any]) -> None:
    """A run judged ``not affected`` from some of its saves stays so only if no other save that took a step says
    otherwise (its own, and those of the folder's other tag names that hold the same model: a tag's name does not
    prove which engine saved it): one whose bound record observed step 0 run at another lr is ``affected``; one no
    bound record vouches for was written by a process that resumed from a save here or started afresh unpatched, and
    where such a fresh start on its release would not be ``not affected``, the files cannot tell which
    (``unknown``). Each save is read once and not kept (a run with many saves costs one bounded read each)."""
    if report["verdict"] != NOT_AFFECTED:
        return  # affected is the worst already; unknown cannot be cleared by another save
    found: list[tuple[str, str]] = []
    model = read[run.tag].model if run.tag in read else None
    steps = {save.global_steps for save in judged}
    for tag in (*run.tags, *run.siblings):
        if any(tag == save.tag for save in judged):
            continue
        try:
            save = read[tag] if tag in read else read_save(tag, config_root, run.store)
        except Unreadable as error:
            if tag in run.tags:
                found.append((UNKNOWN, f"the save {tag.name} cannot be read ({error}), and every save counts"))
            continue
        if tag in run.tags:
            steps.add(save.global_steps)
        elif not _same_engine(save, model, steps):
            continue
        if _steps(save).ran is False:
            continue  # no optimizer step before it: no lr was used yet
        found.append(_vouched(report, save, scheduler, params) if save.record is not None and
                     save.record.get("bound") else _fresh_start(report, save))
    worst = [item for item in found if item[0] != NOT_AFFECTED]
    if worst:
        verdict = max((verdict for verdict, _ in worst), key=_WORST.__getitem__)
        report["verdict"] = verdict
        more = [f"and {len(worst) - _NAMED_SAVES} more saves"] if len(worst) > _NAMED_SAVES else []
        report["why"] = "; ".join([*(why for _, why in worst[:_NAMED_SAVES]), *more, f"the rest: {report['why']}"])
        if verdict == UNKNOWN:
            report["step0_lrs"] = report["step0_lr"] = None


def _same_engine(sibling: Save, model: str | None, steps: set[Any]) -> bool:
    """Whether a save under another tag name is this engine's, from what the files hold: the same model, saved at
    a step count none of this engine's saves has (accelerate's save_state of two models saves both at one step: two
    engines; custom tags such as epoch1..epoch4 across an upgrade resume: one engine at several steps)."""
    if sibling.model is not None and model is not None and sibling.model != model:
        return False
    return sibling.global_steps not in steps


def _vouched(report: dict[str, Any], save: Save, scheduler: str, params: dict[str, Any]) -> tuple[str, str]:
    """Step 0 as another save's bound record tells it: an observed harm is proof; any other doubt is ``unknown``
    (its chain may have a gap that an earlier record closes)."""
    assert save.record is not None
    scratch = {**report, "differences": [], "notes": []}
    verdict, why = _step0_from_origin(scratch, save.record["step0"], scheduler, params, save)
    if verdict == NOT_AFFECTED:
        return verdict, why
    if verdict == AFFECTED and save.record["step0"]["how"] == record_data.OBSERVED:
        report["differences"].extend(scratch["differences"])
        return AFFECTED, f"the record of the save {save.tag.name} says: {why}"
    return UNKNOWN, f"the record of the save {save.tag.name} does not prove step 0: {why}"


def _fresh_start(report: dict[str, Any], save: Save) -> tuple[str, str]:
    """A save no bound record vouches for: its process resumed from another save, or started afresh unpatched
    (a rerun into the same folder, a save_latest=False run, a job on another release). Only where such a fresh
    start, judged by the table on its release with its own config, would not be affected does it change nothing."""
    block = save.config.get("scheduler")
    if save.config_problem is not None or not isinstance(block, dict) or not block.get("type"):
        return UNKNOWN, (f"the save {save.tag.name} took optimizer steps, no bound record vouches for it, and its "
                         "config does not say which scheduler it ran")
    scheduler, params = _schedule(block, save)
    optimizer = save.config.get("optimizer")
    lr = optimizer.get("params", {}).get("lr") if isinstance(optimizer, dict) and \
        isinstance(optimizer.get("params"), dict) else None
    scratch = {**report, "optimizer_lr": number(lr), "param_groups": save.groups, "differences": [], "notes": [],
               "verdict": UNKNOWN, "why": ""}
    fresh = _judge(scratch, scheduler, params, save.version, save.version, later=False)
    if fresh["verdict"] == NOT_AFFECTED:
        return NOT_AFFECTED, ""
    return UNKNOWN, (f"the save {save.tag.name} (DeepSpeed {save.version}, {save.global_steps} optimizer steps) has "
                     "no record bound to it: its process resumed from a save this folder proves (then it changes "
                     "nothing) or started afresh unpatched (then it ran as an unpatched run on that release: "
                     f"{fresh['verdict']}), and the files cannot tell which")


@dataclass(frozen=True)
class _Steps:
    """Whether a save's optimizer had stepped, from every source the file holds: ``ran`` True (a source proves a
    step), False (every source says none), None (they disagree and none proves a step); ``disagree`` says how."""

    ran: bool | None
    disagree: str | None = None


def _steps(save: Save) -> _Steps:
    """``global_steps`` counts engine.step()'s optimizer steps; the scheduler's ``last_batch_iteration`` (-1 when
    built) counts its own steps, which engine.step() or user code takes; the optimizer's per-parameter state is
    built at its first step, however it was called. A script that steps the optimizer and scheduler itself leaves
    global_steps at 0."""
    steps, iteration = save.global_steps, save.iteration
    if steps != 0:
        return _Steps(True)  # a count, or none in the file (judged as a run that stepped, as before)
    moved = isinstance(iteration, int) and iteration >= 0
    if save.optimizer_stepped:
        where = f", and the scheduler's last_batch_iteration is {iteration}" if moved else ""
        return _Steps(True, f"{save.tag.name}: global_steps is 0, but its optimizer's state shows it stepped{where}: "
                            "the optimizer was stepped outside engine.step() (judged as a run that stepped)")
    if moved:
        return _Steps(None, f"{save.tag.name}: global_steps is 0, but the scheduler's last_batch_iteration is "
                            f"{iteration}: the optimizer was stepped outside engine.step(), or user code stepped the "
                            "scheduler ahead of training, and this file does not show which")
    return _Steps(False)


def _read_earlier(tag: PurePath, read: dict[PurePath, Save], report: dict[str, Any], config_root: str | None,
                  store: Store) -> Save | None:
    """An earlier save, read once; None (and a note) where it cannot be read."""
    if tag not in read:
        try:
            read[tag] = read_save(tag, config_root, store)
        except Unreadable as error:
            report["notes"].append(f"an earlier save, {tag}, cannot be read ({error}): not used")
            return None
    return read[tag]


def _newest_bound_record(run: Run, read: dict[PurePath, Save], report: dict[str, Any],
                         config_root: str | None) -> Save | None:
    """The newest save whose record 2 is bound to it: its chain tells how the run's step 0 ran. Only saves with a
    record file beside them are read for it (an unpatched run's many saves are not)."""
    for tag in reversed(run.tags):
        if tag not in read and not run.store.exists(tag / RECORD_FILE):
            continue
        save = read[tag] if tag in read else _read_earlier(tag, read, report, config_root, run.store)
        if save is not None and save.record is not None and save.record.get("bound"):
            return save
    return None


def _copied_from(run: Run, newest: Save, report: dict[str, Any], config_root: str | None) -> Save | None:
    """A save without a record whose model-states file is a byte copy of another tag's in the folder that has a
    bound record (a universal checkpoint: ds_to_universal copies the model states, not the record; a copied tag
    folder): that save, its record marked ``bound`` where the file holds the weights (so its bytes tell runs
    apart), else with ``bound`` False and why (ZeRO 3, the pipeline). None where no tag matches."""
    recorded = [tag for tag in run.siblings if run.store.exists(tag / RECORD_FILE)]  # from the walk's listing
    if not recorded:
        return None
    try:
        bound = read_save(run.tag, config_root, run.store, bind=True).binding
    except Unreadable:
        return None
    if bound is None:
        return None
    for tag in recorded:
        try:
            save = read_save(tag, config_root, run.store)
        except Unreadable:
            continue
        if save.record is None or not save.record.get("bound") or \
                not record_data.same_model_states(save.record["bound_to"], bound):
            continue
        report["notes"].append(f"{newest.tag.name} holds no record; its model-states file is a copy of "
                               f"{tag.name}'s (a universal checkpoint, or a copied tag folder)")
        if not record_data.holds_weights(run.store.names(tag), bound["file"]):
            save.record = {**save.record, "bound": False,
                           "why": f"{newest.tag.name} holds no record, and the model states it copied from "
                                  f"{tag.name} hold no weights (ZeRO 3, or the pipeline's layer files): its record "
                                  "proves nothing about it"}
        return save
    return None


def _earlier_proof(run: Run, read: dict[PurePath, Save], report: dict[str, Any], config_root: str | None,
                   chain: Save) -> Save | None:
    """Where the chain's step 0 ran unrecorded (a save with no bound record between two patched processes), the
    newest save before it whose bound record observed step 0: it may be where that unrecorded process resumed from."""
    if chain.record is None or chain.record["step0"]["how"] != record_data.UNRECORDED:
        return None
    tags = run.tags[:run.tags.index(chain.tag)] if chain.tag in run.tags else ()
    for tag in reversed(tags):
        if tag not in read and not run.store.exists(tag / RECORD_FILE):
            continue
        save = _read_earlier(tag, read, report, config_root, run.store)
        if save is not None and save.record is not None and save.record.get("bound") and \
                save.record["step0"]["how"] == record_data.OBSERVED:
            return save
    return None


# The step-0 verdict from a bound record's chain -------------------------------------------------------------

_WORST = {NOT_AFFECTED: 0, UNKNOWN: 1, AFFECTED: 2}
# the guard table's changes that decide only the lr step 0 runs at (the chain tells that step)
_STEP0_ONLY = ("start", "get_lr_before_start", "ratio_before_start")


def _judge_from_chain(report: dict[str, Any], chain: Save, scheduler: str, params: dict[str, Any],
                      newest: Save, earlier: Save | None = None, *, copy: bool = False) -> None:
    """One verdict from every fact: step 0 from the chain of the newest bound record (unless a gap in it leaves
    it open, ``earlier``), then the later changes the guard table finds in the newest save when the process that
    wrote it ran unpatched. The worst of them wins, and ``why`` names each."""
    record = chain.record
    assert record is not None
    report["step0_checkpoint"] = str(chain.file)  # the save whose record tells step 0
    differences = len(report["differences"])
    found = [_step0_from_origin(report, record["step0"], scheduler, params, chain)]
    if earlier is not None and found[0][0] == AFFECTED:
        found[0] = _unless_a_gap(report, scheduler, params, earlier, found[0], differences)
    if chain is not newest and found[0][0] == NOT_AFFECTED and not copy:  # a copy's process is the chain's own
        found[0] = _unless_started_afresh(report, scheduler, params, chain, newest, found[0])
    if not _patched_process(newest):
        later = _later_changes(report, scheduler, params, newest)
        if later is not None:
            found.append(later)
    report["verdict"] = max((verdict for verdict, _ in found), key=_WORST.__getitem__)
    report["why"] = "; ".join(why for _, why in found if why)


def _unless_started_afresh(report: dict[str, Any], scheduler: str, params: dict[str, Any], chain: Save,
                           newest: Save, cleared: tuple[str, str]) -> tuple[str, str]:
    """A chain that clears step 0 from a save older than the newest, which has no bound record: the process that
    wrote the newest save resumed from that chain (then it holds) or started afresh, unpatched, into the same
    folder (a rerun that saved fewer tags): only if such a fresh start on the newest save's release would not be
    affected does the chain's answer stand."""
    scratch = _table_reading(report, scheduler, params, newest.version)
    if scratch["verdict"] == NOT_AFFECTED:
        return cleared
    report["step0_lrs"] = report["step0_lr"] = None
    return UNKNOWN, (f"{cleared[1]} (the record of {chain.tag.name}); but the newest save, {newest.tag.name}, has no "
                     "bound record: its process resumed from that save (then step 0 is as recorded) or started "
                     f"afresh unpatched (then it ran on DeepSpeed {newest.version} as an unpatched run: "
                     f"{scratch['verdict']}), and the files cannot tell which")


def _unless_a_gap(report: dict[str, Any], scheduler: str, params: dict[str, Any], earlier: Save,
                  harmed: tuple[str, str], differences: int) -> tuple[str, str]:
    """A chain whose step 0 ran unrecorded, in a folder where an earlier save's bound record observed step 0 run
    as 0.19.8 runs it: the unrecorded process resumed from that save (then step 0 is as recorded there) or started
    afresh unpatched (then it is the harm the chain names), and the files cannot tell which."""
    assert earlier.record is not None
    scratch = {**report, "differences": [], "notes": []}
    verdict, proof = _step0_from_origin(scratch, earlier.record["step0"], scheduler, params, earlier)
    if verdict != NOT_AFFECTED:
        return harmed
    del report["differences"][differences:]
    report["step0_lrs"] = report["step0_lr"] = None
    return UNKNOWN, (f"the chain has a gap: {harmed[1]}; but the record of an earlier save here, "
                     f"{earlier.tag.name}, proves {proof}; if the unrecorded process resumed from it, step 0 is as "
                     "recorded there, if it started afresh unpatched it is the harm above, and the files cannot "
                     "tell which")


def _table_reading(report: dict[str, Any], scheduler: str, params: dict[str, Any], release: str) -> dict[str, Any]:
    """A copy of ``report`` judged by the guard table alone, as if ``release`` had run step 0 unpatched (no later
    change): its verdict, why, step-0 lrs and differences, for the caller to weigh."""
    scratch = {**report, "differences": [], "notes": [], "verdict": UNKNOWN, "why": ""}
    return _judge(scratch, scheduler, params, release, release, later=False)


def _patched_process(save: Save) -> bool:
    """Whether the process that wrote ``save`` ran the patch's fixes (a bound record 2 of reset or step mode)."""
    record = save.record
    return record is not None and bool(record.get("bound")) and record["mode"] in ("reset", "step")


def _step0_from_origin(report: dict[str, Any], origin: dict[str, Any], scheduler: str, params: dict[str, Any],
                       chain: Save) -> tuple[str, str]:
    """Step 0 as the chain tells it (record_data's ``how``): observed, or the release that ran it unrecorded, or
    a reason that it is not known."""
    how = origin["how"]
    if how == record_data.OBSERVED:
        return _observed(report, origin, _newest_step0_from_table(report, scheduler, params, origin["deepspeed"]))
    if how == record_data.NO_STEP_YET:  # that save came before step 0, which a process with no record then ran
        return _from_table(report, scheduler, params, chain.version, f"the newest bound record ({chain.tag.name}) "
                           "was saved before step 0, and the process that ran it left no bound record", proof=False)
    release = origin.get("deepspeed")
    report["step0_deepspeed_version"] = release
    why = origin.get("why") or how
    if isinstance(release, str):
        # unrecorded: that release ran step 0 unpatched, so the table's reading stands; a claim (unbound, record 1)
        # or an unobserved step: only a class or release that needs no fix clears it
        return _from_table(report, scheduler, params, release, why, proof=how == record_data.UNRECORDED)
    report["step0_lrs"] = report["step0_lr"] = None
    return UNKNOWN, f"{why}; the release that ran step 0 is not known"


def _newest_step0_from_table(report: dict[str, Any], scheduler: str, params: dict[str, Any],
                             release: str) -> list[float | None] | None:
    """What 0.19.8 runs step 0 at for this config, per group, as the table reads it; None where it cannot."""
    scratch = _table_reading(report, scheduler, params, release)
    newest = scratch["newest_step0_lrs"]
    return list(newest) if newest else ([scratch["newest_step0_lr"]] if scratch["newest_step0_lr"] is not None
                                        else None)


def _observed(report: dict[str, Any], origin: dict[str, Any], table: list[float | None] | None) -> tuple[str, str]:
    """Step 0 as a patched process saw its optimizer run it, against what 0.19.8 runs it at: the lrs that patch set
    (or found right, or would have set in warn mode), else the table's reading of the config (``table``)."""
    lrs, expected = origin["lrs"], origin["expected"]
    who = f"accelerate-warmup-patch {origin.get('patch') or '?'} ({origin.get('mode') or '?'})"
    report["step0_lrs"], report["step0_lr"] = lrs, lrs[0] if lrs else None
    report["step0_deepspeed_version"] = origin["deepspeed"]
    if expected is None and table is not None and len(table) == len(lrs) and None not in table:
        expected = table
    ran = f"step 0 ran at {lrs_text(lrs, None)} (observed by {who} on DeepSpeed {origin['deepspeed']})"
    if expected is None:
        return UNKNOWN, f"{ran}; what {releases.NEWEST_DEEPSPEED} runs it at is not known here"
    report["newest_step0_lrs"], report["newest_step0_lr"] = expected, expected[0] if expected else None
    if record_data.same_lrs(lrs, expected):
        did = {"fixed": ", which fixed it", "as-release": ", which had nothing to change"}.get(
            origin.get("patch_did") or "", "")
        return NOT_AFFECTED, f"{ran}{did}: as {releases.NEWEST_DEEPSPEED} runs it"
    warned = "warned, not fixed: " if origin.get("patch_did") == "warned" else ""
    report["differences"].append(f"{warned}{ran}, {releases.NEWEST_DEEPSPEED} runs it at {lrs_text(expected, None)}")
    return AFFECTED, report["differences"][-1]


def _from_table(report: dict[str, Any], scheduler: str, params: dict[str, Any], release: str, why: str, *,
                proof: bool) -> tuple[str, str]:
    """Step 0 judged by the guard table on ``release``. ``proof``: that release is known to have run step 0
    unpatched, so the table's answer stands; otherwise only a class or release that needs no fix clears it."""
    scratch = _table_reading(report, scheduler, params, release)
    for key in ("step0_lr", "newest_step0_lr", "step0_lrs", "newest_step0_lrs"):
        report[key] = scratch[key]
    report["notes"].extend(scratch["notes"])
    verdict = scratch["verdict"]
    if verdict == NOT_AFFECTED or proof:
        report["differences"].extend(scratch["differences"])
        return verdict, f"{scratch['why']} ({why})" if scratch["why"] else why
    report["step0_lrs"] = report["step0_lr"] = None
    return UNKNOWN, (f"{why}; unpatched on DeepSpeed {release}, this run would be {verdict}, and nothing bound to "
                     "these files says how its step 0 really ran")


def _later_changes(report: dict[str, Any], scheduler: str, params: dict[str, Any],
                   newest: Save) -> tuple[str, str] | None:
    """The backported changes the steps after step 0 meet (a default peak, the cosine past total_num_steps, ...)
    on the newest save's release, where the process that wrote that save ran unpatched (a warn-mode process, or one
    with no bound record): the worst of them, each named; None where none applied."""
    if scheduler not in releases.scheduler_classes():
        return None
    found: list[tuple[str, str]] = []
    for change in _differences(scheduler, newest.version, params):
        if change.key in _STEP0_ONLY:
            continue  # the chain's step 0 above
        applied, how = _applied(change, report, params, newest.version)
        if applied:
            report["differences"].append(f"{config_facts.label(change)}: {how} (in the newest save's process, "
                                         f"{newest.tag.name}, which ran unpatched)")
            found.append((AFFECTED, report["differences"][-1]))
        elif applied is None:
            found.append((UNKNOWN, f"{config_facts.label(change)}: {how}"))
    if not found:
        return None
    worst = max((verdict for verdict, _ in found), key=_WORST.__getitem__)
    return worst, "; ".join(why for _, why in found)


# A claim: record 1, or a record 2 that says it is unbound --------------------------------------------------

def _apply_claim(report: dict[str, Any], record: dict[str, Any]) -> None:
    """What an unbound record says about step 0: a harm it names counts (doubt needs only a reason); a fix it
    claims clears nothing (it is bound to no file: a rerun or a copy leaves it beside other saves)."""
    scheduler = record["scheduler"]
    who = f"accelerate-warmup-patch {record['version']} ({record['mode']})"
    kind = "a record 1 (0.5.0)" if record["record"] == 1 else "an unbound record"
    if scheduler is None:
        report["notes"].append(f"{who} recorded no lr scheduler in the engine")
        return
    step0, before, after = scheduler["step0"], scheduler["lrs_before"], scheduler["lrs_after"]
    if report["scheduler"] is None:
        report["scheduler"] = scheduler["class"]
    if step0 == "warned" and before:
        report["verdict"] = AFFECTED
        report["why"] = (f"warned, not fixed ({who}): step 0 ran at {lrs_text(before, None)}, reset mode would have "
                         f"run it at {lrs_text(after, None)}")
        report["step0_lrs"], report["step0_lr"] = before, before[0]
    elif step0 in ("fixed", "as-release", "earlier-process") and report["verdict"] != NOT_AFFECTED:
        unpatched = report["verdict"]
        report["verdict"] = UNKNOWN
        report["why"] = (f"{kind} of {who} says step 0 was {step0}, but it is bound to no file, so it proves "
                         f"nothing about these saves; unpatched, this run would be {unpatched}: "
                         f"{report['why'] or 'the files do not say why'}")
        report["step0_lrs"] = report["step0_lr"] = None
    elif step0 in ("left", "unknown"):
        report["notes"].append(f"{who} recorded step 0 as {step0!r} ({scheduler['why'] or 'no reason given'}): "
                               "judged from the checkpoint as an unpatched run")


def unreadable_report(report: dict[str, Any], why: str) -> dict[str, Any]:
    report["verdict"], report["why"] = UNREADABLE, why
    return report


def _scheduler_in_code(state: Any) -> str:
    """Which scheduler the engine held, as far as its saved state shows."""
    if state is None:
        return "the engine held no lr scheduler (none was passed to it: any schedule ran outside the engine)"
    if isinstance(state, dict) and set(state) == {"last_batch_iteration"}:
        return ("the engine's scheduler saved {'last_batch_iteration': ...}, as DeepSpeed's do: one built in code "
                "(a WarmupLR, WarmupDecayLR or WarmupCosineLR would be affected; the file does not name its class)")
    if isinstance(state, dict) and "base_lrs" in state:
        return ("the engine's scheduler saved a torch lr scheduler's state (base_lrs, last_epoch): not DeepSpeed's "
                "(the HF Trainer's lr_scheduler_type or your own); torch's set the lr when built")
    return f"the engine's scheduler saved a state this audit does not know ({type(state).__name__})"


def _judge(report: dict[str, Any], scheduler: str, params: dict[str, Any], version: str,
           newest_version: str, *, later: bool = True) -> dict[str, Any]:
    """Step 0 and the backported changes that apply from the start, on ``version`` (the release of the earliest
    save); the cosine past total_num_steps, which the last steps meet, on ``newest_version``."""
    try:
        level = releases.deepspeed_support(version)
    except ValueError:
        return unreadable_report(report, f"ds_version {version!r} is not a release number")
    if scheduler not in releases.scheduler_classes():
        report["why"] = f"scheduler type {scheduler!r} is not one of DeepSpeed's the table knows"
        return report
    fact = releases.start_fact(scheduler, version)
    groups = report["param_groups"]
    if releases.never_affected(scheduler):
        if fact is not None:
            ran, newest = step0lrs_text(fact.value, scheduler, params, report["optimizer_lr"], groups or 1)
            report["step0_lr"], report["newest_step0_lr"] = ran[0], newest[0]
            if groups:
                report["step0_lrs"], report["newest_step0_lrs"] = ran, newest
        report["verdict"], report["why"] = NOT_AFFECTED, f"{scheduler} sets the lr when built, on every release"
        return report
    if level is releases.Support.UNSUPPORTED or fact is None:
        report["why"] = (f"DeepSpeed {version} is older than the guard table ({releases.DEEPSPEED_FLOOR}) or has no "
                         f"{scheduler}: the table does not say what it did")
        return report
    if level is releases.Support.UNTESTED:
        report["notes"].append(f"DeepSpeed {version} is newer than the table: assumed to run as "
                               f"{releases.NEWEST_DEEPSPEED}")
    ran, newest = step0lrs_text(fact.value, scheduler, params, report["optimizer_lr"], groups or 1)
    report["step0_lr"], report["newest_step0_lr"] = ran[0], newest[0]
    if groups:
        report["step0_lrs"], report["newest_step0_lrs"] = ran, newest
    hurt, unsure = [], []
    start_missing = releases.lacks("start", scheduler, version)
    for index, (before, after) in enumerate(zip(ran, newest)):
        if before is None and start_missing:  # the group's own lr, which the file does not hold
            whose = "the optimizer's lr" if index == 0 else "its own lr"
            hurt.append(f"group {index} ran step 0 at {whose} (not in the file), 0.19.8 runs it at {lr_text(after)}")
        elif before is not None and after is not None and before != after:
            hurt.append(f"group {index} ran step 0 at {lr_text(before)}, 0.19.8 runs it at {lr_text(after)}")
        elif after is None or before is None:
            unsure.append(f"group {index}'s step-0 lr is not in the file")
    if groups is None and fact.value is releases.Start.SETS_GROUP_0_ONLY:
        unsure.append(f"{scheduler} on {version} sets group 0 only: groups 1+ ran step 0 at their own lr, 0.19.8 at "
                      "0; the file does not say how many groups there were")
    last_steps = [c for c in _differences(scheduler, newest_version, params) if c.key == "ratio_past_warmup"]
    for change in [c for c in _differences(scheduler, version, params) if c.key != "ratio_past_warmup"] + \
            (last_steps if later else []):
        if change.key in _STEP0_ONLY:
            continue  # the step-0 lrs above
        applied, how = _applied(change, report, params, version)
        if applied is None:
            unsure.append(f"{config_facts.label(change)}: {how}")
        elif applied:
            report["differences"].append(f"{config_facts.label(change)}: {how}")
    report["differences"][:0] = hurt
    if hurt or report["differences"]:
        report["verdict"] = AFFECTED
        report["why"] = "; ".join(report["differences"])
    elif unsure:
        report["why"] = "; ".join(unsure)
    else:
        report["verdict"] = NOT_AFFECTED
        report["why"] = (f"step 0 ran at {lr_text(ran[0])}, as on {releases.NEWEST_DEEPSPEED}, and no other backported "
                         "change applied")
    if unsure and report["verdict"] == AFFECTED:
        report["notes"].extend(unsure)
    return report


def _differences(scheduler: str, version: str, params: dict[str, Any]) -> tuple[releases.Change, ...]:
    try:
        return config_facts.differences(scheduler, version, params)
    except ValueError:  # a ds_version that is not a release number: the step-0 release was already checked
        return ()


def step0lrs_text(how: releases.Start, scheduler: str, params: dict[str, Any], lr: float | None,
              groups: int) -> tuple[list[float | None], list[float | None]]:
    """The lr each group ran optimizer step 0 at on a release that starts the class this way, and on 0.19.8
    (every group at its start: warmup_min_lr, 0.0 for WarmupCosineLR, cycle_min_lr for OneCycle). Group 0 runs
    at the optimizer's lr from the config; groups 1+ at their own lr, which no checkpoint holds (None)."""
    name, default = releases.REFERENCE_STARTS[scheduler]
    start = params.get(name, default) if name else default
    newest = [number(m) for m in start] if isinstance(start, (list, tuple)) else [number(start)] * groups
    newest = (newest + [None] * groups)[:groups]
    own: list[float | None] = [lr] + [None] * (groups - 1)
    if how is releases.Start.SETS_EVERY_GROUP:
        return list(newest), newest
    if how is releases.Start.SETS_GROUP_0_ONLY:
        return [newest[0], *own[1:]], newest
    return own, newest


def _applied(change: releases.Change, report: dict[str, Any], params: dict[str, Any],
             version: str) -> tuple[bool | None, str]:
    """Whether a backported change the release lacks changed an lr this run used (None: the file cannot say)."""
    if change.key == "default_peak":
        peak = releases.warmup_max_lr_default(version)
        lr, groups = report["optimizer_lr"], report["param_groups"]
        if peak is releases.MaxLrDefault.CONSTANT:
            if lr is not None and lr != releases.DEFAULT_PEAK:
                return True, (f"no warmup_max_lr: the warmup peaked at {releases.DEFAULT_PEAK}, 0.19.8 at the "
                              f"optimizer's lr {lr_text(lr)}")
            if lr is None:
                return None, (f"no warmup_max_lr: the peak was {releases.DEFAULT_PEAK}, 0.19.8's is the optimizer's "
                              "lr (not in the file)")
        if groups is None or groups > 1:
            return None, (f"no warmup_max_lr: the peak was {peak.value}, 0.19.8's is each group's own lr; groups 1+ "
                          "differ unless their lr was that peak (the file does not hold the groups' lrs)")
        return False, ""
    if change.key == "ratio_past_warmup":
        return _past_the_cosine(params, report["last_batch_iteration"])
    if change.key == "unknown_warmup_type":
        return True, (f"warmup_type {params.get('warmup_type')!r}: this release fails at the first step, 0.19.8 "
                      "warns and runs log")
    return True, change.what


def _past_the_cosine(params: dict[str, Any], iteration: int | None) -> tuple[bool | None, str]:
    """0.19.3 (#8142) holds cos_min_ratio past total_num_steps; before, the cosine swung back up. Step k runs at
    the lr of iteration k-1, so the steps this run took used iterations up to the saved one minus 1."""
    total, warmup = number(params.get("total_num_steps")), number(params.get("warmup_num_steps", 1000))
    if total is None or warmup is None:
        return None, "total_num_steps or warmup_num_steps is not a number in the ds_config"
    if iteration is None:
        return None, "the scheduler's saved iteration is not in the file"
    warmup = max(2, warmup)
    last_used = iteration - 1
    if last_used >= warmup and (total <= warmup or last_used >= total):
        return True, (f"steps past total_num_steps={total} ran (to iteration {last_used}): their cosine swung back "
                      "up, 0.19.8 holds cos_min_ratio")
    return False, ""


def lr_text(value: float | str | None) -> str:
    """An lr as the report shows it: ``?`` where unknown; NaN and infinities (strings in the JSON) as such."""
    if value is None:
        return "?"
    return value if isinstance(value, str) else f"{value:g}"


def lrs_text(per_group: list[float | str | None] | None, first: float | str | None) -> str:
    if per_group:
        return ", ".join(lr_text(v) for v in per_group)
    return lr_text(first)


# A run's report as the command writes it --------------------------------------------------------------------

def judged_report(run: Run, config_root: str | None) -> dict[str, Any]:
    """One run's report as plain JSON data, its engine named; never raises (one process's or a worker's)."""
    report = audit_run(run, config_root)
    return _plain_report({"path": report["path"], "engine": run.engine, **report})


def blank_row(path: str) -> dict[str, Any]:
    """A report with nothing read yet, its fields in the order every report has them (engine after path)."""
    return {"path": path, "engine": None, **blank_report(path)}


def _plain_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as plain JSON data; a value that will not go (a nest past the bound, say) makes it unreadable."""
    try:
        plain = checkpoint_pickle.plain(report)
        json.dumps(plain)
        return plain  # type: ignore[no-any-return]
    except (Unreadable, ValueError, TypeError, RecursionError) as error:
        return unreadable_report({**blank_row(str(report.get("path"))), "engine": report.get("engine")},
                                 f"its report cannot be written ({error})")
