"""``audit PATH...``: were finished runs hurt? The step-0 lr each run's checkpoints say it ran at, against 0.19.8's.

A training log cannot tell (the HF Trainer logs the lr after the scheduler stepped, and never step 0's); the
checkpoint can. Every DeepSpeed model-states file holds ``ds_version`` (the release that wrote it), the
``ds_config`` the engine ran with (the HF Trainer and accelerate save it with their "auto" values filled
in), the scheduler's state (``{"last_batch_iteration": N}`` for DeepSpeed's), ``global_steps`` and, for the
optimizer, its param groups (``optimizer``, or ``param_shapes`` one entry per group under ZeRO and bf16). A run
this package patched also holds its record (``accelerate_warmup_patch.json`` in the tag folder), which says what
the patch did at step 0. What a release does comes from the guard table (``releases``, through ``config_facts``:
the answers ``doctor --config`` gives), never from an installed DeepSpeed: this module imports neither torch,
deepspeed nor wrapt, and reads each file through ``checkpoint_pickle`` (nothing the pickle names is imported or
called, no tensor data is read, every read is bounded).

Every PATH, run and folder that could not be read gets its line; a file's failure is its run's ``unreadable``.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import releases
from . import checkpoint_pickle, config_facts
from .checkpoint_pickle import Unreadable

AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE = "affected", "not affected", "unknown", "unreadable"
SKIPPED = "skipped"  # a symlinked folder inside a PATH: not followed, named (its own PATH audits it)
RECORD_FILE = "accelerate_warmup_patch.json"  # the record a patched run writes in each tag folder
# the bounds of the small files the audit reads beside a checkpoint
LATEST_BYTES, RECORD_BYTES, CONFIG_BYTES = 4096, 64 * 1024, 4 * 1024 * 1024
_STEP0 = ("fixed", "warned", "as-release", "earlier-process", "left", "unknown")
# the rank files an engine writes per tag: mp_rank_00_model_states.pt, zero_pp_rank_0_mp_rank_00_model_states.pt
_MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
# one save of a run that saves many: the HF Trainer's checkpoint-N, accelerate's automatic checkpoint_N
_SAVE_ROUND = re.compile(r"^checkpoint[-_](\d+)$")
# where each class starts every group on 0.19.8: the param, and its default (None: required); WarmupCosineLR at
# 0.0 (lr_schedules.py @ v0.19.8: the constructors' defaults, get_lr() at iteration -1)
_START: dict[str, tuple[str | None, float | None]] = {
    "WarmupLR": ("warmup_min_lr", 0.0), "WarmupDecayLR": ("warmup_min_lr", 0.0), "WarmupCosineLR": (None, 0.0),
    "OneCycle": ("cycle_min_lr", None), "LRRangeTest": ("lr_range_test_min_lr", 1e-3)}


class NoRun(Exception):
    """A PATH that holds no DeepSpeed checkpoint, or cannot be read at all."""


@dataclass(frozen=True)
class Run:
    path: Path  # the run: the folder named, a save folder (with ``latest``), or a Trainer output folder
    tags: tuple[Path, ...]  # its tag folders, earliest save first, newest last
    notes: tuple[str, ...] = ()  # what finding it met: a `latest` that is not a regular file, say

    @property
    def tag(self) -> Path:
        return self.tags[-1]


@dataclass
class Found:
    """What a PATH holds: its runs, and the folders under it that were not searched (path, verdict, why)."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower() if isinstance(error, OSError) else str(error)


def model_states(tag: Path) -> Path | None:
    """The rank-0 model-states file of a tag folder (every rank's holds the same config and scheduler)."""
    try:
        names = [n for n in os.listdir(tag) if _MODEL_STATES.match(n)]
    except OSError:
        return None
    ranked = sorted(names, key=lambda n: tuple(int(g or 0) for g in _MODEL_STATES.match(n).groups()))  # type: ignore[union-attr]
    return tag / ranked[0] if ranked else None


def find_runs(path: str) -> Found:
    """Each run under ``path`` once, with its tags (a tag folder named is that tag alone), and the folders under it
    that could not be searched. Raises NoRun for a PATH that is missing, not a folder, unlistable or empty of runs.
    Symlinked folders inside it are not followed (each is named), so a symlink loop ends."""
    root = Path(path)
    try:
        mode = os.stat(root).st_mode
    except OSError as error:
        raise NoRun(f"{path}: {_reason(error)}") from None
    if not stat.S_ISDIR(mode):
        raise NoRun(f"{path}: not a folder (give a checkpoint folder, a tag folder or a folder of runs)")
    try:
        os.listdir(root)
    except OSError as error:
        raise NoRun(f"{path}: cannot list it: {_reason(error)}") from None
    found = Found()
    if model_states(root) is not None:
        found.runs.append(Run(root, (root,)))
        return found

    def unlistable(error: OSError) -> None:
        found.skipped.append((str(error.filename or "?"), UNREADABLE,
                              f"cannot list it: {_reason(error)} (a run in it, if any, was not audited)"))

    tags: list[Path] = []
    for folder, subfolders, files in os.walk(root, onerror=unlistable):
        for name in [n for n in subfolders if os.path.islink(os.path.join(folder, n))]:
            found.skipped.append((os.path.join(folder, name), SKIPPED,
                                  "a symlink to a folder: not followed (name it as a PATH to audit what it points to)"))
            subfolders.remove(name)
        if any(_MODEL_STATES.match(name) for name in files):
            tags.append(Path(folder))
            subfolders[:] = []  # a tag holds no other run
        else:
            subfolders.sort()
    if not tags:
        if found.skipped:
            return found
        raise NoRun(f"{path}: no DeepSpeed checkpoint in it (no *model_states.pt in any folder)")
    saves: dict[Path, list[Path]] = {}  # save folder (the one save_checkpoint was given) -> its tags
    for tag in tags:
        saves.setdefault(tag.parent, []).append(tag)
    runs: dict[Path, list[tuple[int, list[Path]]]] = {}
    notes: dict[Path, list[str]] = {}
    for save, its_tags in saves.items():
        round_ = _SAVE_ROUND.match(save.name)
        run = save.parent if round_ and save != root else save  # the Trainer's checkpoint-N: the output folder
        runs.setdefault(run, []).append((int(round_.group(1)) if round_ and save != root else 0,
                                         _in_order(save, its_tags, notes.setdefault(run, []))))
    for run, rounds in sorted(runs.items()):
        ordered = [tag for _, its in sorted(rounds, key=lambda r: (r[0], _order(r[1][-1]))) for tag in its]
        found.runs.append(Run(run, tuple(ordered), tuple(notes[run])))
    return found


def _in_order(save: Path, tags: list[Path], notes: list[str]) -> list[Path]:
    """A save folder's tags, earliest first; the newest is the one ``latest`` names (what DeepSpeed resumes from),
    else the highest step number."""
    ordered = sorted(tags, key=_order)
    latest = save / "latest"
    if not os.path.lexists(latest):
        return ordered
    try:
        named = save / checkpoint_pickle.read_capped(str(latest), LATEST_BYTES).decode("utf-8").strip()
    except (Unreadable, UnicodeDecodeError) as error:
        notes.append(f"{latest}: {error}: ignored, the newest tag is the highest step")
        return ordered
    if named in ordered:
        ordered.remove(named)
        ordered.append(named)
    else:  # DeepSpeed's load_checkpoint would look for that tag and not find it
        notes.append(f"{latest} names {named.name!r}, which holds no model-states file here: ignored, the newest tag "
                     "is the highest step")
    return ordered


def _order(tag: Path) -> tuple[int, float]:
    number = re.search(r"(\d+)$", tag.name)
    try:
        mtime = tag.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(number.group(1)) if number else -1, mtime)


# One save's facts -------------------------------------------------------------------------------------------

@dataclass
class Save:
    """What one tag folder says: its model-states file's facts, its ds_config (or why it could not be read) and
    the patch's record, if any."""

    tag: Path
    file: Path
    version: str
    config: dict[str, Any]
    config_problem: str | None
    global_steps: Any
    iteration: Any
    groups: int | None
    scheduler_state: Any
    record: dict[str, Any] | None
    notes: list[str]


def read_save(tag: Path, config_root: str | None = None) -> Save:
    """The facts of one tag folder; raises Unreadable with the reason."""
    file = model_states(tag)
    if file is None:
        raise Unreadable(f"{tag}: no model-states file (or the folder cannot be listed)")
    try:
        data = checkpoint_pickle.load(str(file))
    except Unreadable as error:
        raise Unreadable(f"{file.name}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ds_version"), str):
        raise Unreadable(f"{file.name}: not a DeepSpeed model-states file (no ds_version)")
    notes: list[str] = []
    config, problem = _ds_config(data.get("ds_config"), notes, config_root)
    state = data.get("lr_scheduler")
    iteration = None
    if isinstance(state, dict) and set(state) == {"last_batch_iteration"}:
        iteration = _number(state["last_batch_iteration"])
    global_steps = _number(data.get("global_steps"))
    record = _record(tag, notes)
    if record is not None and None not in (record["global_steps"], global_steps) and \
            record["global_steps"] != global_steps:
        # The record is written after each save, with the engine's step count; the tag folder may be saved over
        # later by a job that wrote none (unpatched, off, or without the package), and the old record stays.
        notes.append(f"{record['file']}: ignored, it names global step {record['global_steps']} and the checkpoint "
                     f"{global_steps}: a record of an earlier save into this folder")
        record = None
    return Save(tag, file, data["ds_version"][:64], config, problem, global_steps, iteration,
                _group_count(data), state, record, notes)


def _number(value: Any) -> Any:
    """A number the file holds, or None (a bool, a huge int, a non-finite float, anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value if value.bit_length() <= 63 else None
    return value if math.isfinite(value) else None


def _ds_config(config: Any, notes: list[str], config_root: str | None) -> tuple[dict[str, Any], str | None]:
    """The saved ds_config, and why it could not be read (None when it could). An engine given a path saves the
    path: that file is read when the path is absolute, or relative and ``--config-root`` says against what."""
    if isinstance(config, dict):
        return config, None
    if not isinstance(config, str):
        return {}, None
    path = config
    if not os.path.isabs(path):
        if config_root is None:
            return {}, (f"the engine was given its config as a relative path, {path!r}: not read (relative to the "
                        "job's working directory, which the checkpoint does not hold; give --config-root DIR)")
        path = os.path.join(config_root, path)
    try:
        text = checkpoint_pickle.read_capped(path, CONFIG_BYTES).decode("utf-8")
        loaded = json.loads(text, parse_int=_bounded_int, parse_constant=lambda _: None)
        if not isinstance(loaded, dict):
            raise Unreadable("not a JSON object")
    except (Unreadable, ValueError, RecursionError) as error:
        return {}, f"the engine was given its config as a file, {path}, which cannot be read here: {error}"
    notes.append(f"the engine was given its config as a file: read {path} as it is now, not as it was")
    return loaded, None


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text) <= 30 else None  # int() of a long one is quadratic on Python 3.9


def _record(tag: Path, notes: list[str]) -> dict[str, Any] | None:
    """The record a patched run wrote beside this save (BRIEF's record 1), as plain data; None when there is none
    or it is malformed (then a note says why)."""
    path = tag / RECORD_FILE
    if not os.path.lexists(path):
        return None
    try:
        raw = json.loads(checkpoint_pickle.read_capped(str(path), RECORD_BYTES).decode("utf-8"),
                         parse_int=_bounded_int)
        record = _valid_record(raw)
    except (Unreadable, ValueError, RecursionError, TypeError, KeyError) as error:
        notes.append(f"{path}: ignored, not a record this audit reads ({error})")
        return None
    record["file"] = str(path)
    return record


def _valid_record(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("record") != 1:
        raise ValueError(f"record {raw.get('record') if isinstance(raw, dict) else None!r}, not 1")
    if raw.get("package") != "accelerate-warmup-patch":
        raise ValueError("not accelerate-warmup-patch's")
    record = {key: raw.get(key) for key in ("version", "mode", "deepspeed", "reference")}
    if not all(isinstance(value, str) for value in record.values()):
        raise ValueError("version, mode, deepspeed and reference must be strings")
    record["global_steps"] = _number(raw.get("global_steps"))
    scheduler = raw.get("scheduler")
    if scheduler is None:
        record["scheduler"] = None
        return record
    if not isinstance(scheduler, dict) or scheduler.get("step0") not in _STEP0:
        raise ValueError(f"scheduler.step0 is not one of {', '.join(_STEP0)}")
    lrs = {}
    for key in ("lrs_before", "lrs_after"):
        value = scheduler.get(key)
        if value is not None and (not isinstance(value, list) or len(value) > 10_000 or
                                  any(_number(v) is None for v in value)):
            raise ValueError(f"scheduler.{key} is not a list of numbers or null")
        lrs[key] = value
    record["scheduler"] = {"class": str(scheduler.get("class"))[:200], "step0": scheduler["step0"], **lrs,
                           "why": str(scheduler.get("why") or "")[:1000]}
    return record


def _group_count(data: dict[str, Any]) -> int | None:
    """The optimizer's param groups: its state_dict's (plain, fp16 or bf16 wrapper) or, under ZeRO and bf16,
    ``param_shapes`` (one entry per group); None where the file does not tell."""
    optimizer = data.get("optimizer")
    if isinstance(optimizer, dict):
        for state in (optimizer, optimizer.get("optimizer_state_dict"), optimizer.get("base_optimizer_state")):
            if isinstance(state, dict) and isinstance(state.get("param_groups"), list):
                return len(state["param_groups"])
    shapes = data.get("param_shapes")
    if isinstance(shapes, list) and shapes:
        return len(shapes)
    return None


# One run's verdict ------------------------------------------------------------------------------------------

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
        return _unreadable(report, str(error))
    except Exception as error:  # a bug of ours on an odd file: that run's line, not a traceback
        return _unreadable(report, f"the audit failed on it ({type(error).__name__}: {str(error)[:200]})")


def _audit_run(run: Run, report: dict[str, Any], config_root: str | None) -> dict[str, Any]:
    newest = read_save(run.tag, config_root)
    report["checkpoint"], report["deepspeed_version"] = str(newest.file), newest.version
    first = newest
    for tag in run.tags[:-1]:  # the earliest save that took an optimizer step (or does not say), else the newest
        try:
            save = read_save(tag, config_root)
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
    report["optimizer_lr"] = _number(opt_params.get("lr")) if isinstance(opt_params, dict) else None
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
        report["why"] = (f"fixed by {who}: step 0 ran at {_lrs(after, None)}, the release would have run "
                         f"{_lrs(before, None)}")
        report["step0_lrs"], report["step0_lr"] = after, after[0]
    elif step0 == "warned" and before:
        report["verdict"] = AFFECTED
        report["why"] = (f"warned, not fixed ({who}): step 0 ran at {_lrs(before, None)}, reset mode would have run "
                         f"it at {_lrs(after, None)}")
        report["step0_lrs"], report["step0_lr"] = before, before[0]
    elif step0 == "as-release" and before:
        report["verdict"], report["differences"] = NOT_AFFECTED, []
        report["why"] = f"{who} found nothing to change: step 0 ran at {_lrs(before, None)}, as the release runs it"
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


def _unreadable(report: dict[str, Any], why: str) -> dict[str, Any]:
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
        return _unreadable(report, f"ds_version {version!r} is not a release number")
    if scheduler not in releases.scheduler_classes():
        report["why"] = f"scheduler type {scheduler!r} is not one of DeepSpeed's the table knows"
        return report
    fact = releases.start_fact(scheduler, version)
    groups = report["param_groups"]
    if releases.never_affected(scheduler):
        if fact is not None:
            ran, newest = step0_lrs(fact.value, scheduler, params, report["optimizer_lr"], groups or 1)
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
    ran, newest = step0_lrs(fact.value, scheduler, params, report["optimizer_lr"], groups or 1)
    report["step0_lr"], report["newest_step0_lr"] = ran[0], newest[0]
    if groups:
        report["step0_lrs"], report["newest_step0_lrs"] = ran, newest
    hurt, unsure = [], []
    start_missing = releases.lacks("start", scheduler, version)
    for index, (before, after) in enumerate(zip(ran, newest)):
        if before is None and start_missing:  # the group's own lr, which the file does not hold
            whose = "the optimizer's lr" if index == 0 else "its own lr"
            hurt.append(f"group {index} ran step 0 at {whose} (not in the file), 0.19.8 runs it at {_lr(after)}")
        elif before is not None and after is not None and before != after:
            hurt.append(f"group {index} ran step 0 at {_lr(before)}, 0.19.8 runs it at {_lr(after)}")
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
        report["why"] = (f"step 0 ran at {_lr(ran[0])}, as on {releases.NEWEST_DEEPSPEED}, and no other backported "
                         "change applied")
    if unsure and report["verdict"] == AFFECTED:
        report["notes"].extend(unsure)
    return report


def _differences(scheduler: str, version: str, params: dict[str, Any]) -> tuple[releases.Change, ...]:
    try:
        return config_facts.differences(scheduler, version, params)
    except ValueError:  # a ds_version that is not a release number: the step-0 release was already checked
        return ()


def step0_lrs(how: releases.Start, scheduler: str, params: dict[str, Any], lr: float | None,
              groups: int) -> tuple[list[float | None], list[float | None]]:
    """The lr each group ran optimizer step 0 at on a release that starts the class this way, and on 0.19.8
    (every group at its start: warmup_min_lr, 0.0 for WarmupCosineLR, cycle_min_lr for OneCycle). Group 0 runs
    at the optimizer's lr from the config; groups 1+ at their own lr, which no checkpoint holds (None)."""
    name, default = _START[scheduler]
    start = params.get(name, default) if name else default
    newest = [_number(m) for m in start] if isinstance(start, (list, tuple)) else [_number(start)] * groups
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
                return True, f"no warmup_max_lr: the warmup peaked at 0.001, 0.19.8 at the optimizer's lr {_lr(lr)}"
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
    total, warmup = _number(params.get("total_num_steps")), _number(params.get("warmup_num_steps", 1000))
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


def _lr(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


# The command ------------------------------------------------------------------------------

def audit(paths: list[str], config_root: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports of every run under ``paths`` (each once) and of every folder under them that could not be
    searched, and one error line per PATH with no run found."""
    reports: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: dict[str, str] = {}  # the real path of a run's newest tag -> the run's path as first reported
    for path in paths:
        try:
            found = find_runs(path)
        except NoRun as error:
            errors.append(str(error))
            continue
        except Exception as error:  # a bug of ours on an odd folder: that PATH's line, not a traceback
            errors.append(f"{path}: the audit failed on it ({type(error).__name__}: {str(error)[:200]})")
            continue
        for folder, verdict, why in found.skipped:
            reports.append({**blank_report(folder), "verdict": verdict, "why": why})
        before, again = len(reports), []
        for run in found.runs:
            key = os.path.realpath(run.tag)
            if key in seen:
                again.append(seen[key])
                continue
            seen[key] = str(run.path)
            reports.append(_plain_report(audit_run(run, config_root)))
        if again and len(reports) == before:  # a PATH named twice, or through a link: still its line
            reports.append({**blank_report(path), "verdict": SKIPPED,
                            "why": f"the same run{'s' if len(again) > 1 else ''} as {', '.join(again)}, "
                                   "reported once (above)"})
    return reports, errors


def _plain_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as plain JSON data; a value that will not go (a nest past the bound, say) makes it unreadable."""
    try:
        plain = checkpoint_pickle.plain(report)
        json.dumps(plain)
        return plain  # type: ignore[no-any-return]
    except (Unreadable, ValueError, TypeError, RecursionError) as error:
        return _unreadable(blank_report(str(report.get("path"))), f"its report cannot be written ({error})")


def main(paths: list[str], as_json: bool = False, config_root: str | None = None) -> int:
    """Exit 1 if any run is affected; else 2 if anything could not be read (a PATH with no run, an unreadable run,
    a folder that cannot be listed); else 0. A run that could not be judged never makes it 1."""
    reports, errors = audit(paths, config_root)
    for error in errors:
        print(f"accelerate-warmup-patch audit: error: {error}", file=sys.stderr)
    if as_json:
        print(json.dumps(reports, indent=2))
    elif reports:
        print_table(reports)
    if any(r["verdict"] == AFFECTED for r in reports):
        return 1
    return 2 if errors or any(r["verdict"] == UNREADABLE for r in reports) else 0


def print_table(reports: list[dict[str, Any]]) -> None:
    header = ("verdict", "DeepSpeed", "scheduler", "groups", "step 0 ran at", f"on {releases.NEWEST_DEEPSPEED}",
              "run")
    rows = [(r["verdict"].upper() if r["verdict"] == AFFECTED else r["verdict"], _releases(r),
             r["scheduler"] or "-", "?" if r["param_groups"] is None else str(r["param_groups"]),
             _lrs(r["step0_lrs"], r["step0_lr"]), _lrs(r["newest_step0_lrs"], r["newest_step0_lr"]), r["path"])
            for r in reports]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    print()
    for r in reports:
        print(f"{r['path']}: {r['verdict']}")
        if r["checkpoint"]:
            print(f"  read {r['checkpoint']}")
        if r["step0_checkpoint"] and r["step0_checkpoint"] != r["checkpoint"]:
            print(f"  step 0 from {r['step0_checkpoint']} (DeepSpeed {r['step0_deepspeed_version']})")
        if r["record"]:
            print(f"  record: {_record_line(r['record'])}")
        if r["scheduler"]:
            params = ", ".join(f"{k}={v}" for k, v in (r["params"] or {}).items())
            print(f"  {r['scheduler']}({params}); optimizer lr {_lr(r['optimizer_lr'])}; "
                  f"at iteration {_or_unknown(r['last_batch_iteration'])}, {_or_unknown(r['global_steps'])} "
                  "optimizer steps")
        print(f"  {r['why']}")
        for note in r["notes"]:
            print(f"  note: {note}")


def _or_unknown(value: Any) -> str:
    """A count the file does not hold (or holds as a non-number, or past 63 bits) as ``?``, not ``None``."""
    return "?" if value is None else str(value)


def _releases(report: dict[str, Any]) -> str:
    newest, first = report["deepspeed_version"], report["step0_deepspeed_version"]
    if first and newest and first != newest:
        return f"{first}->{newest}"
    return newest or "?"


def _record_line(record: dict[str, Any]) -> str:
    line = f"accelerate-warmup-patch {record['version']} ({record['mode']}) on DeepSpeed {record['deepspeed']}"
    scheduler = record.get("scheduler")
    if not scheduler:
        return line + ": no lr scheduler"
    return (f"{line}: {scheduler['class']} step 0 {scheduler['step0']}, lrs "
            f"{_lrs(scheduler['lrs_before'], None)} -> {_lrs(scheduler['lrs_after'], None)}")


def _lrs(per_group: list[float | None] | None, first: float | None) -> str:
    if per_group:
        return ", ".join(_lr(v) for v in per_group)
    return _lr(first)
