"""One run's verdict: step 0 from its earliest save that took a step (and the patch's record there), the later
changes from its newest save, against the guard table (``releases``, through ``config_facts``)."""

from __future__ import annotations

from typing import Any

from ... import releases
from .. import config_facts
from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .find import Run
from .read import number, read_save
from .verdicts import AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE

# where each class starts every group on 0.19.8: the param, and its default (None: required); WarmupCosineLR at
# 0.0 (lr_schedules.py @ v0.19.8: the constructors' defaults, getlr_text() at iteration -1)
_START: dict[str, tuple[str | None, float | None]] = {
    "WarmupLR": ("warmup_min_lr", 0.0), "WarmupDecayLR": ("warmup_min_lr", 0.0), "WarmupCosineLR": (None, 0.0),
    "OneCycle": ("cycle_min_lr", None), "LRRangeTest": ("lr_range_test_min_lr", 1e-3)}



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
    first = newest
    for tag in run.tags[:-1]:  # the earliest save that took an optimizer step (or does not say), else the newest
        try:
            save = read_save(tag, config_root, run.store)
        except Unreadable as error:
            report["notes"].append(f"an earlier save, {tag}, cannot be read ({error}): not used")
            continue
        if save.global_steps != 0 or save.record is not None:
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
    if first.record is not None:
        report["record"] = first.record
    if first.global_steps == 0 and newest.global_steps == 0 and first.record is None:
        report["verdict"] = NOT_AFFECTED
        report["why"] = "0 optimizer steps: no step ran, so no lr was used yet (the release that resumes it decides)"
        return report
    if first.record is None and isinstance(first.global_steps, int) and first.global_steps > 0:
        report["notes"].append(f"step 0 ran before the save {first.tag.name} ({first.global_steps} optimizer "
                               "steps), in this job or one it resumed from; no record of the patch says otherwise")
    block = config.get("scheduler")
    if first.config_problem is not None:
        report["why"] = first.config_problem
    elif not isinstance(block, dict) or not block.get("type"):
        report["why"] = "no scheduler in the ds_config: " + _scheduler_in_code(first.scheduler_state)
    else:
        scheduler = block["type"] if isinstance(block["type"], str) else repr(checkpoint_pickle.plain(block["type"]))
        try:
            params = checkpoint_pickle.plain(block.get("params") or {})
        except Unreadable as error:
            raise Unreadable(f"{first.file.name}: the scheduler's params: {error}") from None
        params = params if isinstance(params, dict) else {}
        report["scheduler"], report["params"] = scheduler, params
        report["notes"].extend(config_facts.refused_later(scheduler, params))
        _judge(report, scheduler, params, first.version, newest.version)
    if first.record is not None:
        _apply_record(report, first.record)
    return report


def _apply_record(report: dict[str, Any], record: dict[str, Any]) -> None:
    """What the patch's record says about step 0 decides over the table's reading of the config."""
    scheduler = record["scheduler"]
    who = f"accelerate-warmup-patch {record['version']} ({record['mode']})"
    if record["deepspeed"] != report["step0_deepspeed_version"]:
        report["notes"].append(f"the record names DeepSpeed {record['deepspeed']}, the checkpoint "
                               f"{report['step0_deepspeed_version']}")
    if scheduler is None:
        report["notes"].append(f"{who} recorded no lr scheduler in the engine")
        return
    step0, before, after = scheduler["step0"], scheduler["lrs_before"], scheduler["lrs_after"]
    if report["scheduler"] is None:
        report["scheduler"] = scheduler["class"]
    if step0 == "fixed" and after:
        report["verdict"], report["differences"] = NOT_AFFECTED, []
        report["why"] = (f"fixed by {who}: step 0 ran at {lrs_text(after, None)}, the release would have run "
                         f"{lrs_text(before, None)}")
        report["step0_lrs"], report["step0_lr"] = after, after[0]
    elif step0 == "warned" and before:
        report["verdict"] = AFFECTED
        report["why"] = (f"warned, not fixed ({who}): step 0 ran at {lrs_text(before, None)}, reset mode would have "
                         f"run it at {lrs_text(after, None)}")
        report["step0_lrs"], report["step0_lr"] = before, before[0]
    elif step0 == "as-release" and before:
        report["verdict"], report["differences"] = NOT_AFFECTED, []
        report["why"] = f"{who} found nothing to change: step 0 ran at {lrs_text(before, None)}, as the release runs it"
        report["step0_lrs"], report["step0_lr"] = before, before[0]
    elif step0 == "earlier-process":
        if not _table_alone_decides(report):
            report["verdict"] = UNKNOWN
            report["why"] = (f"step 0 ran in an earlier process whose save is not here (the record of {who} says "
                             "so): audit that run's first save")
            report["step0_lrs"] = report["step0_lr"] = None
    else:
        report["notes"].append(f"{who} recorded step 0 as {step0!r} ({scheduler['why'] or 'no reason given'}): "
                               "judged from the checkpoint as an unpatched run")


def _table_alone_decides(report: dict[str, Any]) -> bool:
    """Whether the release and class alone settle step 0 (every group at 0.19.8's start, or a class never
    affected), so that when and where step 0 ran does not matter."""
    scheduler, version = report["scheduler"], report["step0_deepspeed_version"]
    if report["verdict"] != NOT_AFFECTED or scheduler not in releases.scheduler_classes():
        return False
    if releases.never_affected(scheduler):
        return True
    fact = releases.start_fact(scheduler, version)
    return fact is not None and fact.value is releases.Start.SETS_EVERY_GROUP


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
           newest_version: str) -> dict[str, Any]:
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
    later = [c for c in _differences(scheduler, newest_version, params) if c.key == "ratio_past_warmup"]
    for change in [c for c in _differences(scheduler, version, params) if c.key != "ratio_past_warmup"] + later:
        if change.key in ("start", "get_lr_before_start", "ratio_before_start"):
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
    name, default = _START[scheduler]
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
            if lr is not None and lr != 0.001:
                return True, f"no warmup_max_lr: the warmup peaked at 0.001, 0.19.8 at the optimizer's lr {lr_text(lr)}"
            if lr is None:
                return None, "no warmup_max_lr: the peak was 0.001, 0.19.8's is the optimizer's lr (not in the file)"
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


def lr_text(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def lrs_text(per_group: list[float | None] | None, first: float | None) -> str:
    if per_group:
        return ", ".join(lr_text(v) for v in per_group)
    return lr_text(first)
