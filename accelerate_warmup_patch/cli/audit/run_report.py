"""One run's verdict from all the facts (docs/audit.md, "When each verdict is given"): step 0 from the chain of the
newest record bound to its save (``chain``), else from its earliest save that took a step, read with the guard table
(``judge``); the later changes from its newest save; every save in the folder counted (``saves``). The worst wins;
"not affected" only from proof. And the report as the command writes it."""

from __future__ import annotations

import json
from pathlib import PurePath
from typing import Any

from ... import record_data, releases
from .. import config_facts
from . import checkpoint_pickle
from .chain import (
    WORST,
    apply_claim,
    chain_step0,
    from_table,
    judge_from_chain,
    needs_nothing,
    patched_process,
    proves_step0,
    table_reading,
    unseen_start,
)
from .checkpoint_pickle import Unreadable
from .find import Run
from .judge import STEP0_DIFFERENCE, judge
from .read import CHECKPOINT_ONLY, Save, not_deepspeeds, number, read_save
from .report import Report
from .saves import (
    converted_elsewhere,
    copied_from,
    earlier_of_engine,
    earlier_proof,
    every_save,
    newest_bound_record,
    read_earlier,
    restarted,
    same_engine_record,
    schedule,
    step_counts,
)
from .verdicts import AFFECTED, NOT_AFFECTED, UNKNOWN


def audit_run(run: Run, config_root: str | None = None) -> Report:
    """The report of one run: step 0 judged from its earliest save that took a step (and the patch's record
    there), the later changes from its newest save; never raises. Only the checkpoint's own facts clear a run: one
    that a ds_config file read outside it cleared is judged once more from the checkpoint alone, and is ``not
    affected`` only where that reading is too."""
    report = _guarded(run, Report(str(run.path)), config_root)
    if report.verdict != NOT_AFFECTED or not report.config_files:
        return report
    alone = _guarded(run, Report(str(run.path)), CHECKPOINT_ONLY)
    if alone.verdict == NOT_AFFECTED:
        return report
    report.verdict = max(UNKNOWN, alone.verdict, key=WORST.__getitem__)
    report.step0_lrs = report.step0_lr = None
    report.differences.extend(alone.differences)
    report.why = (f"only {', '.join(report.config_files)}, read as it is now and not as it was, clears it "
                  f"({report.why}); the checkpoint alone says: {alone.why}")
    return report


def _guarded(run: Run, report: Report, config_root: str | None) -> Report:
    report.notes.extend(run.notes)
    try:
        return _audit_run(run, report, config_root)
    except Unreadable as error:
        return report.unreadable(str(error))
    except Exception as error:  # a bug of ours on an odd file: that run's line, not a traceback
        return report.unreadable(f"the audit failed on it ({type(error).__name__}: {str(error)[:200]})")


def _audit_run(run: Run, report: Report, config_root: str | None) -> Report:
    newest = read_save(run.tag, config_root, run.store)
    report.checkpoint, report.deepspeed_version = str(newest.file), newest.version
    read: dict[PurePath, Save] = {run.tag: newest}
    first = newest
    for tag in run.tags[:-1]:  # the earliest save that took an optimizer step (or does not say), else the newest
        save = read_earlier(tag, read, report, config_root, run.store)
        if save is not None and (step_counts(save).ran is not False or save.record is not None):
            first = save
            break
    report.step0_checkpoint, report.step0_deepspeed_version = str(first.file), first.version
    report.notes.extend(newest.notes if first is newest else [*first.notes, *newest.notes])
    report.global_steps, report.last_batch_iteration = newest.global_steps, newest.iteration
    if first.version != newest.version:
        report.notes.append(f"saves of two DeepSpeed releases: {first.version} ({first.tag.name}, the earliest "
                            f"that took a step) and {newest.version} ({newest.tag.name}, the newest); step 0 is "
                            f"judged from {first.version}, the later changes from {newest.version}")
    config = first.config
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    opt_params = optimizer.get("params") if isinstance(optimizer, dict) else None
    report.optimizer_lr = number(opt_params.get("lr")) if isinstance(opt_params, dict) else None
    report.param_groups = first.groups
    counts = [step_counts(save) for save in ([first] if first is newest else [first, newest])]
    report.notes.extend(count.disagree for count in counts if count.disagree)
    if all(count.ran is False for count in counts):
        report.record = newest.record
        report.verdict = NOT_AFFECTED
        report.why = ("0 optimizer steps (global_steps, the scheduler's iteration and the optimizer's state agree): "
                      "no step ran, so no lr was used yet (the release that resumes it decides)")
        return report
    chain = newest_bound_record(run, read, report, config_root)
    copy_of = copied_from(run, newest, report, config_root) if chain is None and newest.record is None else None
    if copy_of is not None and copy_of.vouched:
        chain = copy_of
    if chain is None and copy_of is None:
        chain = same_engine_record(run, read, report, config_root, newest)
    report.record = chain.record if chain is not None else first.record
    if chain is None and first.record is None and isinstance(first.global_steps, int) and first.global_steps > 0:
        # a job that resumed a save of another release, unpatched, leaves the same files: the note says so, and the
        # verdict clears step 0 only where every release would (unseen_start; docs/audit.md, "Which release ran
        # step 0")
        report.notes.append(f"step 0 ran before the save {first.tag.name} ({first.global_steps} optimizer "
                            "steps), in this job or one it resumed from; no record of the patch says otherwise, and "
                            "these files do not say which release ran it, or whether the patch did, if that job "
                            "resumed a save of another")
    report.config_files.extend(dict.fromkeys(s.config_file for s in (first, newest) if s.config_file))
    block = config.get("scheduler")
    scheduler: str | None = None
    params: dict[str, Any] = {}
    if first.config_problem is None and isinstance(block, dict) and block.get("type"):
        scheduler, params = schedule(block, first)
        report.scheduler, report.params = scheduler, params
        report.notes.extend(config_facts.refused_later(scheduler, params))
    foreign = None if _step0_elsewhere(chain) else not_deepspeeds(first)
    if foreign is not None:  # whatever the config says or lacks, and patched or not
        report.verdict, report.why = NOT_AFFECTED, foreign
        step0 = chain_step0(chain)
        if chain is not None and step0 is not None and step0.get("how") in _IN_THE_LOADED_SAVE:
            report.notes.append(f"the record of {chain.tag.name} says step 0 ran in the save it resumed from "
                                f"({step0.get('tag')}), whose record proves nothing ({step0.get('how')}): read, as "
                                "a save without one is, by the scheduler state these files hold")
        every_save(run, read, report, config_root, judged=(first,), scheduler=scheduler or "", params=params)
        return report
    if scheduler is None:
        return _unconfigured(run, read, report, config_root, first=first, newest=newest, chain=chain,
                             copy=chain is not None and chain is copy_of)
    if copy_of is not None and copy_of.record is not None and not copy_of.vouched:
        # a copy of a recorded save whose model states hold no weights: that record is a claim about these files
        report.verdict, report.why = from_table(report, scheduler, params, newest.version,
                                                 copy_of.record.get("why", ""), proof=False)
        return report
    converted = converted_elsewhere(run, newest, config_root) if chain is None and copy_of is None else None
    if converted is not None:  # a conversion of a save elsewhere: only a release or class that needs no fix clears it
        report.verdict, report.why = from_table(report, scheduler, params, newest.version, converted, proof=False,
                                                 seen=False)
        return report
    if chain is not None:
        earlier = earlier_proof(run, read, report, config_root, chain)
        judge_from_chain(report, chain, scheduler, params, newest, earlier, copy=chain is copy_of)
        if earlier is None:
            _unless_loaded_save_resumed(run, read, report, config_root, chain)
        every_save(run, read, report, config_root, judged=(chain, newest), scheduler=scheduler, params=params)
        return report
    judge(report, scheduler, params, first.version, newest.version).onto(report)
    if first.record is not None:
        apply_claim(report, first.record)
    resumed = restarted(first) if first.record is None else None
    if resumed is not None:
        # the table judged this save's process as the one that ran step 0; its own counts say it resumed
        _read_as_resumed(report, resumed, first.version)
    if report.verdict == AFFECTED and first.record is None:
        _unless_continued(run, read, report, config_root, first, scheduler, params)
    unsure = next((count.disagree for count in counts if count.ran is None and count.disagree), None)
    if unsure is not None and report.verdict == AFFECTED:
        # the scheduler moved and nothing shows an optimizer step: user code may have stepped it ahead of training
        report.verdict, report.step0_lrs, report.step0_lr = UNKNOWN, None, None
        report.why = (f"{unsure}; if an optimizer step ran, this run is affected: {report.why}")
    every_save(run, read, report, config_root, judged=(first,), scheduler=scheduler, params=params)
    unseen = unseen_start(report, scheduler, params, first.version) if report.verdict == NOT_AFFECTED else None
    if unseen is not None:  # the table read first's release as the one that ran step 0: no record says it did
        report.verdict, report.step0_lrs, report.step0_lr = UNKNOWN, None, None
        report.why = f"{report.why} {unseen}"
    return report


def _unless_loaded_save_resumed(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None,
                                chain: Save) -> None:
    """The chain's record says step 0 ran unrecorded in the save it loaded, and the table read that save's release as
    the one that ran it (affected); where that save is here, with no record, and its own counts show that it resumed
    too (restarted: its scheduler was built after step 0), step 0 ran before it, in a process these files do not
    name: ``unknown``, as for a save without a record that shows the same (found by the run-history search: a run
    started on 0.19.8, resumed on 0.15.2 without the scheduler's state, then resumed in warn mode, read affected)."""
    step0 = chain_step0(chain)
    if report.verdict != AFFECTED or step0 is None or step0.get("how") != record_data.UNRECORDED:
        return
    for tag in run.tags:
        if tag.name != step0.get("tag") or tag == chain.tag:
            continue
        loaded = read_earlier(tag, read, report, config_root, run.store)
        resumed = restarted(loaded) if loaded is not None and loaded.record is None else None
        if resumed is not None and loaded is not None and loaded.global_steps == step0.get("global_steps"):
            _read_as_resumed(report, resumed, loaded.version)
            return


def _read_as_resumed(report: Report, resumed: str, release: str) -> None:
    """A table's ``affected`` that judged a save's process, on ``release``, as the one that ran step 0, where that
    save's own counts say it resumed (``resumed``, saves.restarted's why): ``unknown``, naming both; a difference of
    the later steps, which that process ran, still stands."""
    if report.verdict != AFFECTED or not all(d.startswith(STEP0_DIFFERENCE) for d in report.differences):
        return
    report.verdict, report.step0_lrs, report.step0_lr = UNKNOWN, None, None
    report.differences.clear()
    report.why = f"{resumed}; if that process ran unpatched on DeepSpeed {release}: {report.why}"


def _unless_continued(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None, first: Save,
                      scheduler: str, params: dict[str, Any]) -> None:
    """The table judged ``first``'s process, on its release, as the one that ran step 0 unpatched (affected); where an
    earlier save of the same model lies beside it under another tag (the source run of a universal checkpoint, a
    custom tag's earlier epoch), written by a release that ran step 0 as 0.19.8 does, this run may have continued it:
    then ``unknown``, naming both readings."""
    earlier = earlier_of_engine(run, read, report, config_root, first)
    if earlier is None or earlier.version == first.version:
        return
    scratch = table_reading(report, scheduler, params, earlier.version)
    if scratch.verdict == AFFECTED:
        return
    report.verdict, report.step0_lrs, report.step0_lr = UNKNOWN, None, None
    report.differences.clear()
    report.why = (f"{earlier.tag.name} holds the same model at fewer optimizer steps ({earlier.global_steps}, here "
                  f"{first.global_steps}), saved by DeepSpeed {earlier.version}: if this run continued it, step 0 ran "
                  f"there ({scratch.why}); if it started afresh unpatched on DeepSpeed {first.version}: {report.why}")


def _unconfigured(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None, *, first: Save,
                  newest: Save, chain: Save | None, copy: bool) -> Report:
    """A run whose ds_config names no scheduler (one built in code, a callable) or is not in the checkpoint (a
    path): a bound record that observed step 0 against the reference's lrs it computed decides; so does a release
    that lacks no backported change for any class; so does one that observed step 0 under a torch lr scheduler;
    else ``unknown``, naming what the file shows."""
    under_torch = _observed_under_torch(chain, first, newest) if chain is not None else None
    if chain is not None and under_torch is not None:
        report.verdict, report.why = NOT_AFFECTED, under_torch
        every_save(run, read, report, config_root, judged=(chain, newest), scheduler="", params={})
        return report
    if chain is not None and proves_step0(chain):
        step0 = chain_step0(chain) or {}
        scheduler = step0.get("scheduler") or (chain.record or {}).get("scheduler", {}).get("class") or ""
        report.scheduler = report.scheduler or scheduler or None
        earlier = earlier_proof(run, read, report, config_root, chain)
        judge_from_chain(report, chain, scheduler, {}, newest, earlier, copy=copy, params_known=False)
        every_save(run, read, report, config_root, judged=(chain, newest), scheduler=scheduler, params={})
        return report
    why = first.config_problem or "no scheduler in the ds_config: " + _scheduler_in_code(first.scheduler_state)
    ran = chain.record.get("step0", {}).get("deepspeed") if chain is not None and chain.record is not None else None
    if chain is not None and not isinstance(ran, str):
        report.why = f"{why}; the record of {chain.tag.name} does not name the release that ran step 0"
        return report
    reference = needs_nothing(first.version, newest.version, *([ran] if isinstance(ran, str) else []))
    if reference is None:
        report.why = why
        return report
    if not _ran_by_its_recorder(chain):
        report.why = (f"{why}; {reference}, if it ran step 0; but no record says which release did: a job that "
                      "resumed a save of another release unpatched leaves these same files, and DeepSpeed "
                      f"{releases.DEEPSPEED_FLOOR} ran step 0 of a WarmupLR, WarmupDecayLR or WarmupCosineLR at the "
                      "optimizer's lr")
        return report
    report.verdict, report.why = NOT_AFFECTED, f"{reference} ({why})"
    every_save(run, read, report, config_root, judged=(first, newest), scheduler="", params={})
    return report


def _observed_under_torch(chain: Save, *saves: Save) -> str | None:
    """Why step 0 ran as every release runs it, where the chain's bound record observed it under a torch lr scheduler
    the engine held (step0.torch_scheduler, not one of DeepSpeed's) and no save weighed holds a DeepSpeed scheduler's
    state, and each whose engine held none was written by a process that ran the patch's fixes (a DeepSpeed scheduler
    stepped outside that engine was then fixed when built, as judge_from_chain holds for a later process); None
    otherwise. Found by the run-history search: a patched run of the HF Trainer's own scheduler, resumed by a patched
    process without one, read ``unknown`` ("the engine held no lr scheduler")."""
    step0 = chain_step0(chain)
    if not chain.vouched or step0 is None or step0.get("how") != record_data.OBSERVED:
        return None
    named = step0.get("torch_scheduler")
    if not isinstance(named, str) or step0.get("scheduler") is not None:
        return None
    for save in (chain, *saves):
        if save.scheduler_state is None and not patched_process(save):
            return None  # its engine held no scheduler, and one of DeepSpeed's outside it would have run unfixed
        if save.scheduler_state is not None and not_deepspeeds(save) is None:
            return None  # a save of this run held a scheduler that may be DeepSpeed's: the record does not speak for it
    return (f"the bound record of {chain.tag.name} observed step 0 under the engine's {named}, a torch lr scheduler, "
            "not one of DeepSpeed's: the bug is in DeepSpeed's scheduler constructors and cannot reach it, patched "
            "or not")


def _ran_by_its_recorder(chain: Save | None) -> bool:
    """Whether a record names the release of the process that ran step 0 itself (it observed it or not), rather than
    that of a save it loaded (``unrecorded``, ``no-step-yet``, a loaded claim: ``unbound``, ``record-1``)."""
    step0 = chain_step0(chain)
    return step0 is not None and step0.get("how") in (record_data.OBSERVED, record_data.UNOBSERVED)


# what a record says of step 0 where it knows only that step 0 ran in the save it loaded, whose record proves nothing
_IN_THE_LOADED_SAVE = (record_data.UNRECORDED, record_data.UNBOUND, record_data.RECORD_1)


def _step0_elsewhere(chain: Save | None) -> bool:
    """Whether a bound record says step 0 ran under one of DeepSpeed's schedulers, or in a process it did not
    observe: then it, not the state a later process's scheduler saved, decides. Not a record that says only that
    step 0 ran in the save it loaded, which left no record or one that proves nothing (unbound, record 1), where its
    own process held a torch scheduler too: it knows no more than that save's files tell, and such a save is read by
    the scheduler state it holds (docs/audit.md, assumption 9; a patched resume of an unpatched run of the HF
    Trainer's own scheduler, or of a run one of whose ranks was not armed)."""
    step0 = chain_step0(chain)
    if step0 is None or step0.get("how") == record_data.OBSERVED:
        return False
    if step0.get("scheduler") in releases.scheduler_classes():
        return True
    return not (step0.get("how") in _IN_THE_LOADED_SAVE and chain is not None and not_deepspeeds(chain))


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


# A run's report as the command writes it --------------------------------------------------------------------

def judged_report(run: Run, config_root: str | None) -> dict[str, Any]:
    """One run's report as plain JSON data, its engine named; never raises (one process's or a worker's)."""
    report = audit_run(run, config_root)
    report.engine = run.engine
    return _plain_report(report)


def _plain_report(report: Report) -> dict[str, Any]:
    """The report as plain JSON data; a value that will not go (a nest past the bound, say) makes it unreadable."""
    try:
        plain = checkpoint_pickle.plain(report.row())
        json.dumps(plain)
        return plain  # type: ignore[no-any-return]
    except (Unreadable, ValueError, TypeError, RecursionError) as error:
        return Report(report.path, engine=report.engine).unreadable(f"its report cannot be written ({error})").row()
