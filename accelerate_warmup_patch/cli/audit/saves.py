"""Every save in a run's folder counts: the saves read beyond the one judged, a save no bound record vouches for,
the engine each save belongs to, and the earlier saves a chain is read from."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Any

from ... import binding, record_data
from . import checkpoint_pickle
from .chain import WORST, step0_from_origin, unseen_start
from .checkpoint_pickle import Unreadable
from .find import Run
from .judge import judge
from .read import Save, not_deepspeeds, number, read_save
from .report import Report
from .stores import Store
from .verdicts import AFFECTED, NOT_AFFECTED, RECORD_FILE, UNKNOWN


def schedule(block: dict[str, Any], save: Save) -> tuple[str, dict[str, Any]]:
    """The scheduler's type and params from a save's ``ds_config["scheduler"]``, as plain data."""
    scheduler = block["type"] if isinstance(block["type"], str) else repr(checkpoint_pickle.plain(block["type"]))
    try:
        params = checkpoint_pickle.plain(block.get("params") or {})
    except Unreadable as error:
        raise Unreadable(f"{save.file.name}: the scheduler's params: {error}") from None
    return scheduler, params if isinstance(params, dict) else {}


_NAMED_SAVES = 3  # the saves a verdict's why names one by one (a run may hold hundreds)


def every_save(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None, *,
                judged: tuple[Save, ...], scheduler: str, params: dict[str, Any]) -> None:
    """A run judged ``not affected`` from some of its saves stays so only if no other save that took a step says
    otherwise (its own, and those of the folder's other tag names that hold the same model: a tag's name does not
    prove which engine saved it): one whose bound record observed step 0 run at another lr is ``affected``; one no
    bound record vouches for was written by a process that resumed from a save here or started afresh unpatched, and
    where such a fresh start on its release would not be ``not affected``, the files cannot tell which
    (``unknown``). Each save is read once and not kept (a run with many saves costs one bounded read each)."""
    if report.verdict != NOT_AFFECTED:
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
        elif not _same_engine(save, read.get(run.tag), model, steps):
            continue
        if save.config_file and save.config_file not in report.config_files:
            report.config_files.append(save.config_file)
        if step_counts(save).ran is False or not_deepspeeds(save) is not None:
            continue  # no optimizer step before it (no lr was used yet), or a scheduler the bug cannot reach
        found.append(_vouched(report, save, scheduler, params) if save.vouched else
                     _copy_or_fresh_start(run, report, save, config_root, scheduler, params))
    worst = [item for item in found if item[0] != NOT_AFFECTED]
    if worst:
        verdict = max((verdict for verdict, _ in worst), key=WORST.__getitem__)
        report.verdict = verdict
        more = [f"and {len(worst) - _NAMED_SAVES} more saves"] if len(worst) > _NAMED_SAVES else []
        report.why = "; ".join([*(why for _, why in worst[:_NAMED_SAVES]), *more, f"the rest: {report.why}"])
        if verdict == UNKNOWN:
            report.step0_lrs = report.step0_lr = None


def _same_engine(sibling: Save, newest: Save | None, model: str | None, steps: set[Any]) -> bool:
    """Whether a save under another tag name is this engine's, from what the files hold: the same model (its
    parameters' names, shapes and dtypes), the same scheduler class where both saves' bound records name one, saved
    at a step count none of this engine's saves has (accelerate's save_state of two models saves both at one step:
    two engines; custom tags such as epoch1..epoch4 across an upgrade resume: one engine at several steps)."""
    if sibling.model is not None and model is not None and sibling.model != model:
        return False
    if newest is not None and _scheduler_classes_differ(sibling, newest):
        return False
    return sibling.global_steps not in steps


def _scheduler_classes_differ(one: Save, other: Save) -> bool:
    """Whether the bound records of two saves name different scheduler classes (two engines, whatever else
    they share)."""
    classes = [save.record["scheduler"]["class"] if save.vouched and save.record is not None and
               save.record.get("scheduler") else None for save in (one, other)]
    return None not in classes and classes[0] != classes[1]


def _vouched(report: Report, save: Save, scheduler: str, params: dict[str, Any]) -> tuple[str, str]:
    """Step 0 as another save's bound record tells it: an observed harm is proof; any other doubt is ``unknown``
    (its chain may have a gap that an earlier record closes)."""
    assert save.record is not None
    scratch = replace(report, differences=[], notes=[])
    verdict, why = step0_from_origin(scratch, save.record["step0"], scheduler, params, save)
    if verdict == NOT_AFFECTED:
        return verdict, why
    if verdict == AFFECTED and save.record["step0"]["how"] == record_data.OBSERVED:
        report.differences.extend(scratch.differences)
        return AFFECTED, f"the record of the save {save.tag.name} says: {why}"
    return UNKNOWN, f"the record of the save {save.tag.name} does not prove step 0: {why}"


def _copy_or_fresh_start(run: Run, report: Report, save: Save, config_root: str | None, scheduler: str,
                         params: dict[str, Any]) -> tuple[str, str]:
    """A save no bound record vouches for: where its model-states file, weights and all, is a byte copy of a save
    here that a bound record vouches for (a universal checkpoint beside its source, a copied tag), it ran as that
    one did; else ``_fresh_start``."""
    found = _recorded_original(run, save.tag, (*run.tags, *run.siblings), config_root)
    if found is None or not found[1]:
        return _fresh_start(report, save)
    return _vouched(report, found[0], scheduler, params)


def _fresh_start(report: Report, save: Save) -> tuple[str, str]:
    """A save no bound record vouches for: its process resumed from another save, or started afresh unpatched
    (a rerun into the same folder, a save_latest=False run, a job on another release). Only where such a fresh
    start, judged by the table on its release with its own config, would not be affected does it change nothing."""
    block = save.config.get("scheduler")
    if save.config_problem is not None or not isinstance(block, dict) or not block.get("type"):
        return UNKNOWN, (f"the save {save.tag.name} took optimizer steps, no bound record vouches for it, and its "
                         "config does not say which scheduler it ran")
    scheduler, params = schedule(block, save)
    optimizer = save.config.get("optimizer")
    lr = optimizer.get("params", {}).get("lr") if isinstance(optimizer, dict) and \
        isinstance(optimizer.get("params"), dict) else None
    own = replace(report, optimizer_lr=number(lr), param_groups=save.groups)
    fresh = judge(own, scheduler, params, save.version, save.version, later=False)
    unseen = unseen_start(own, scheduler, params, save.version) if fresh.verdict == NOT_AFFECTED else None
    if unseen is None and fresh.verdict == NOT_AFFECTED:
        return NOT_AFFECTED, ""
    then = f"then it ran as an unpatched run on that release: {fresh.verdict}" if unseen is None else \
        f"or resumed a save of another release: not affected {unseen}"
    return UNKNOWN, (f"the save {save.tag.name} (DeepSpeed {save.version}, {save.global_steps} optimizer steps) has "
                     "no record bound to it: its process resumed from a save this folder proves (then it changes "
                     f"nothing) or started afresh unpatched ({then}), and the files cannot tell which")


@dataclass(frozen=True)
class Steps:
    """Whether a save's optimizer had stepped, from every source the file holds: ``ran`` True (a source proves a
    step), False (every source says none), None (they disagree and none proves a step); ``disagree`` says how."""

    ran: bool | None
    disagree: str | None = None


def step_counts(save: Save) -> Steps:
    """``global_steps`` counts engine.step()'s optimizer steps; the scheduler's ``last_batch_iteration`` (-1 when
    built) counts its own steps, which engine.step() or user code takes; the optimizer's per-parameter state is
    built at its first step, however it was called. A script that steps the optimizer and scheduler itself leaves
    global_steps at 0."""
    steps, iteration = save.global_steps, save.iteration
    if steps != 0:
        return Steps(True)  # a count, or none in the file (judged as a run that stepped, as before)
    moved = isinstance(iteration, int) and iteration >= 0
    if save.optimizer_stepped:
        where = f", and the scheduler's last_batch_iteration is {iteration}" if moved else ""
        return Steps(True, f"{save.tag.name}: global_steps is 0, but its optimizer's state shows it stepped{where}: "
                            "the optimizer was stepped outside engine.step() (judged as a run that stepped)")
    if moved:
        return Steps(None, f"{save.tag.name}: global_steps is 0, but the scheduler's last_batch_iteration is "
                            f"{iteration}: the optimizer was stepped outside engine.step(), or user code stepped the "
                            "scheduler ahead of training, and this file does not show which")
    return Steps(False)


def restarted(save: Save) -> str | None:
    """Why the file shows that its scheduler was built after the run's step 0, in a process that resumed from an
    earlier save without the scheduler's state: its iteration counts fewer steps than the engine's (less the steps
    an fp16 overflow skipped, which step no scheduler). None where the counts agree or do not say."""
    steps, iteration, skipped = save.global_steps, save.iteration, save.skipped_steps or 0
    if not isinstance(steps, int) or not isinstance(iteration, int) or not isinstance(skipped, int) or iteration < 0:
        return None
    if iteration + 1 >= steps - skipped:
        return None
    return (f"{save.tag.name}'s scheduler counts {iteration + 1} steps and the engine {steps - skipped}: it was built "
            f"after global step {steps - skipped - iteration - 1}, in a process that resumed from an earlier save "
            "without the scheduler's state, so step 0 ran in an earlier process than the one that wrote it")


def read_earlier(tag: PurePath, read: dict[PurePath, Save], report: Report, config_root: str | None,
                  store: Store) -> Save | None:
    """An earlier save, read once; None (and a note) where it cannot be read."""
    if tag not in read:
        try:
            read[tag] = read_save(tag, config_root, store)
        except Unreadable as error:
            report.notes.append(f"an earlier save, {tag}, cannot be read ({error}): not used")
            return None
    return read[tag]


def newest_bound_record(run: Run, read: dict[PurePath, Save], report: Report,
                         config_root: str | None) -> Save | None:
    """The newest save whose record 2 is bound to it: its chain tells how the run's step 0 ran. Only saves with a
    record file beside them are read for it (an unpatched run's many saves are not)."""
    for tag in reversed(run.tags):
        if tag not in read and not run.store.exists(tag / RECORD_FILE):
            continue
        save = read[tag] if tag in read else read_earlier(tag, read, report, config_root, run.store)
        if save is not None and save.vouched:
            return save
    return None


def same_engine_record(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None,
                       newest: Save) -> Save | None:
    """Where none of an engine's own tags holds a bound record, the nearest earlier save of the same engine under
    another tag name that does: the same model (its parameters' names, shapes and dtypes) and scheduler class at
    fewer optimizer steps (custom tags such as epoch1..epoch4, a patched start resumed unpatched). A tag's name does
    not say which engine saved it; the files do. Its chain is then read as this engine's, and a fresh start in
    between stays possible (chain.py)."""
    found = _nearest_of_engine(run, read, report, config_root, newest, newest.global_steps)
    if found is not None:
        report.notes.append(f"{found.tag.name} holds the same model at fewer optimizer steps ({found.global_steps}, "
                            f"here {newest.global_steps}) and a bound record: weighed as an earlier save of this "
                            "engine, whatever the tags' names")
    return found


def _nearest_of_engine(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None, newest: Save,
                       before: Any, observed: bool = False, recorded: bool = True) -> Save | None:
    """The save under another tag of ``run``'s folder that holds the same model (its parameters' names, shapes and
    dtypes) and scheduler class as ``newest`` at the most optimizer steps fewer than ``before``, with a bound record
    (one that observed step 0, where ``observed``; any save, record or not, where not ``recorded``); None where there
    is none."""
    if newest.model is None or not isinstance(before, int):
        return None
    found: Save | None = None
    for tag in run.siblings:
        if recorded and tag not in read and not run.store.exists(tag / RECORD_FILE):
            continue
        save = read_earlier(tag, read, report, config_root, run.store)
        if save is None or (recorded and not save.vouched) or save.model != newest.model or \
                _scheduler_classes_differ(save, newest) or not isinstance(save.global_steps, int) or \
                save.global_steps >= before:
            continue
        if observed and (save.record is None or save.record["step0"]["how"] != record_data.OBSERVED):
            continue
        if found is None or save.global_steps > found.global_steps:
            found = save
    return found


def earlier_of_engine(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None,
                      first: Save) -> Save | None:
    """The nearest earlier save of ``first``'s engine under another tag beside it, recorded or not (a universal
    checkpoint's source run, a custom tag's earlier epochs): where the table judged ``first``'s process as the one that
    ran step 0, this run may have continued that save instead."""
    return _nearest_of_engine(run, read, report, config_root, first, first.global_steps, recorded=False)


def copied_from(run: Run, newest: Save, report: Report, config_root: str | None) -> Save | None:
    """A save without a record whose model-states file is a byte copy of another tag's in the folder that has a
    bound record (a universal checkpoint: ds_to_universal copies the model states, not the record; a copied tag
    folder): that save, its record marked ``bound`` where the file holds the weights (so its bytes tell runs
    apart), else with ``bound`` False and why (ZeRO 3, the pipeline). None where no tag matches."""
    found = _recorded_original(run, run.tag, run.siblings, config_root)
    if found is None:
        return None
    save, weights = found
    report.notes.append(f"{newest.tag.name} holds no record; its model-states file is a copy of "
                        f"{save.tag.name}'s (a universal checkpoint, or a copied tag folder)")
    if not weights:
        assert save.record is not None
        save.record = {**save.record, "bound": False,
                       "why": f"{newest.tag.name} holds no record, and the model states it copied from "
                              f"{save.tag.name} hold no weights (ZeRO 3, or the pipeline's layer files): its record "
                              "proves nothing about it"}
    return save


def _recorded_original(run: Run, copy: PurePath, among: tuple[PurePath, ...],
                       config_root: str | None) -> tuple[Save, bool] | None:
    """The tag of ``among`` with a bound record whose model-states file ``copy``'s is a byte copy of, and whether
    that file holds the weights (else its bytes do not tell runs apart); None where none is."""
    recorded = [tag for tag in among if tag != copy and run.store.exists(tag / RECORD_FILE)]  # the walk's listing
    if not recorded:
        return None
    try:
        bound = read_save(copy, config_root, run.store, bind=True).binding
    except Unreadable:
        return None
    if bound is None:
        return None
    for tag in recorded:
        try:
            save = read_save(tag, config_root, run.store)
        except Unreadable:
            continue
        if save.record is not None and save.vouched and binding.same_model_states(save.record["bound_to"], bound):
            return save, binding.holds_weights(run.store.names(tag), bound["file"])
    return None


def converted_elsewhere(run: Run, newest: Save, config_root: str | None) -> str | None:
    """Why the newest save is a conversion whose source is not in this folder, or None: a tag that a
    ``latest_universal`` beside it names (ds_to_universal's output), holding no record, whose model-states file is
    no byte copy of another tag's here. Its step 0 is its source's, which only that save's record tells."""
    if newest.record is not None or run.tag not in run.universal:
        return None
    try:
        bound = read_save(run.tag, config_root, run.store, bind=True).binding
    except Unreadable:
        bound = None
    for tag in run.siblings:
        try:
            source = read_save(tag, config_root, run.store, bind=True).binding
        except Unreadable:
            continue
        if bound is not None and binding.same_model_states(source, bound):
            return None  # its source is here: judged as that save is
    return (f"{run.tag.name} is a universal checkpoint (ds_to_universal's output, named by latest_universal) whose "
            "source save is not in this folder: its model states are a copy of that save's, and the record of the "
            "patch beside that save, which the conversion does not copy, is what tells how step 0 ran (audit the "
            "folder it was converted from)")


def earlier_proof(run: Run, read: dict[PurePath, Save], report: Report, config_root: str | None,
                   chain: Save) -> Save | None:
    """Where the chain's step 0 ran unrecorded (a save with no bound record between two patched processes), the
    newest save before it whose bound record observed step 0: it may be where that unrecorded process resumed from."""
    if chain.record is None or chain.record["step0"]["how"] != record_data.UNRECORDED:
        return None
    tags = run.tags[:run.tags.index(chain.tag)] if chain.tag in run.tags else ()
    for tag in reversed(tags):
        if tag not in read and not run.store.exists(tag / RECORD_FILE):
            continue
        save = read_earlier(tag, read, report, config_root, run.store)
        if save is not None and save.record is not None and save.vouched and \
                save.record["step0"]["how"] == record_data.OBSERVED:
            return save
    # under custom tags (epoch2, epoch3, ...) each tag is an engine of its own: the same model's earlier save under
    # another tag, before the unrecorded process's save, is where that process may have resumed from too
    unrecorded = chain.record["step0"].get("global_steps")
    return _nearest_of_engine(run, read, report, config_root, chain,
                              unrecorded if isinstance(unrecorded, int) else chain.global_steps, observed=True)
