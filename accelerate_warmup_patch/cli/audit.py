"""``audit PATH...``: were finished runs hurt? The step-0 lr each run's checkpoint says it ran at, against 0.19.8's.

A training log cannot tell (the HF Trainer logs the lr after the scheduler stepped, and never step 0's); the
checkpoint can. Every DeepSpeed model-states file holds ``ds_version`` (the release that wrote it), the
``ds_config`` the engine ran with (the HF Trainer and accelerate save it with their "auto" values filled
in), the scheduler's state (``{"last_batch_iteration": N}`` for DeepSpeed's) and, for the optimizer, its
param groups (``optimizer``, or ``param_shapes`` one entry per group under ZeRO and bf16). What a release
does with them comes from the guard table (``releases``, through ``config_facts``: the answers ``doctor
--config`` gives), never from an installed DeepSpeed: this module imports neither torch, deepspeed nor
wrapt, and reads each file through ``checkpoint_pickle`` (no pickle code runs, no tensor data is read).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import releases
from . import checkpoint_pickle, config_facts

AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE = "affected", "not affected", "unknown", "unreadable"
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
    tag: Path  # its newest tag folder (or the one named)


def model_states(tag: Path) -> Path | None:
    """The rank-0 model-states file of a tag folder (every rank's holds the same config and scheduler)."""
    try:
        names = [n for n in os.listdir(tag) if _MODEL_STATES.match(n)]
    except OSError:
        return None
    ranked = sorted(names, key=lambda n: tuple(int(g or 0) for g in _MODEL_STATES.match(n).groups()))  # type: ignore[union-attr]
    return tag / ranked[0] if ranked else None


def find_runs(path: str) -> list[Run]:
    """Each run under ``path`` once, with its newest tag; a tag folder named is that tag. Raises NoRun."""
    root = Path(path)
    if not root.exists():
        raise NoRun(f"{path}: no such file or folder")
    if not root.is_dir():
        raise NoRun(f"{path}: not a folder (give a checkpoint folder, a tag folder or a folder of runs)")
    if model_states(root) is not None:
        return [Run(root, root)]
    tags: list[Path] = []
    for folder, subfolders, files in os.walk(root):
        if any(_MODEL_STATES.match(name) for name in files):
            tags.append(Path(folder))
            subfolders[:] = []  # a tag holds no other run
        else:
            subfolders.sort()
    if not tags:
        raise NoRun(f"{path}: no DeepSpeed checkpoint in it (no *model_states.pt in any folder)")
    saves: dict[Path, list[Path]] = {}  # save folder (the one save_checkpoint was given) -> its tags
    for tag in tags:
        saves.setdefault(tag.parent, []).append(tag)
    runs: dict[Path, list[tuple[int, Path]]] = {}
    for save, its_tags in saves.items():
        newest = _newest_tag(save, its_tags)
        round_ = _SAVE_ROUND.match(save.name)
        if round_ and save != root:  # the Trainer's checkpoint-N: the run is the output folder above it
            runs.setdefault(save.parent, []).append((int(round_.group(1)), newest))
        else:
            runs.setdefault(save, []).append((0, newest))
    return [Run(run, max(rounds, key=lambda r: (r[0], _order(r[1])))[1]) for run, rounds in sorted(runs.items())]


def _newest_tag(save: Path, tags: list[Path]) -> Path:
    """The tag ``latest`` names (what DeepSpeed itself resumes from), else the highest step number."""
    try:
        named = save / (save / "latest").read_text().strip()
    except (OSError, UnicodeDecodeError):
        named = None
    if named in tags:
        return named
    return max(tags, key=_order)


def _order(tag: Path) -> tuple[int, float]:
    number = re.search(r"(\d+)$", tag.name)
    try:
        mtime = tag.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(number.group(1)) if number else -1, mtime)


# One run's facts and verdict --------------------------------------------------------------

def audit_run(run: Run) -> dict[str, Any]:
    """The report of one run: what its newest checkpoint says, the step-0 lrs and the verdict."""
    report: dict[str, Any] = {
        "path": str(run.path), "checkpoint": None, "deepspeed_version": None, "scheduler": None, "params": None,
        "optimizer_lr": None, "param_groups": None, "global_steps": None, "last_batch_iteration": None,
        "step0_lr": None, "newest_step0_lr": None, "step0_lrs": None, "newest_step0_lrs": None,
        "differences": [], "notes": [], "verdict": UNKNOWN, "why": ""}
    file = model_states(run.tag)
    if file is None:
        return _unreadable(report, f"{run.tag}: no model-states file")
    report["checkpoint"] = str(file)
    try:
        data = checkpoint_pickle.load(str(file))
    except checkpoint_pickle.Unreadable as error:
        return _unreadable(report, f"{file.name}: {error}")
    if not isinstance(data, dict) or not isinstance(data.get("ds_version"), str):
        return _unreadable(report, f"{file.name}: not a DeepSpeed model-states file (no ds_version)")
    version = data["ds_version"]
    report["deepspeed_version"] = version
    report["global_steps"] = _number(data.get("global_steps"))
    config = _ds_config(data.get("ds_config"), report["notes"])
    optimizer = (config.get("optimizer") or {}) if isinstance(config.get("optimizer"), dict) else {}
    report["optimizer_lr"] = _number((optimizer.get("params") or {}).get("lr")) if isinstance(
        optimizer.get("params"), dict) else None
    report["param_groups"] = _group_count(data)
    state = data.get("lr_scheduler")
    if isinstance(state, dict) and set(state) == {"last_batch_iteration"}:
        report["last_batch_iteration"] = _number(state["last_batch_iteration"])
    block = config.get("scheduler")
    if not isinstance(block, dict) or not block.get("type"):
        report["why"] = "no scheduler in the ds_config: " + _scheduler_in_code(state)
        return report
    scheduler = str(block["type"])
    params = dict(block.get("params") or {}) if isinstance(block.get("params"), dict) else {}
    report["scheduler"], report["params"] = scheduler, params
    report["notes"].extend(config_facts.refused_later(scheduler, params))
    return _judge(report, scheduler, params, version)


def _unreadable(report: dict[str, Any], why: str) -> dict[str, Any]:
    report["verdict"], report["why"] = UNREADABLE, why
    return report


def _number(value: Any) -> Any:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ds_config(config: Any, notes: list[str]) -> dict[str, Any]:
    """The saved ds_config; an engine given a path saves the path: then that file, if it is still there."""
    if isinstance(config, dict):
        return config
    if isinstance(config, str):
        try:
            loaded = json.loads(Path(config).read_text())
        except (OSError, ValueError):
            notes.append(f"the engine was given its config as a file, {config}, which cannot be read here")
            return {}
        notes.append(f"the engine was given its config as a file: read {config} as it is now, not as it was")
        return loaded if isinstance(loaded, dict) else {}
    return {}


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


def _judge(report: dict[str, Any], scheduler: str, params: dict[str, Any], version: str) -> dict[str, Any]:
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
    for change in config_facts.differences(scheduler, version, params):
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

def audit(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports of every run under ``paths`` (each once), and one error line per PATH with no readable run."""
    reports: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: set[Path] = set()
    for path in paths:
        try:
            runs = find_runs(path)
        except NoRun as error:
            errors.append(str(error))
            continue
        mine = [audit_run(run) for run in runs if run.tag.resolve() not in seen]
        seen.update(run.tag.resolve() for run in runs)
        if runs and all(r["verdict"] == UNREADABLE for r in mine) and mine:
            errors.append(f"{path}: no readable DeepSpeed checkpoint in it ({mine[0]['why']})")
        reports.extend(mine)
    return reports, errors


def main(paths: list[str], as_json: bool = False) -> int:
    """Exit 2 if a PATH cannot be read at all, else 1 if any run is affected, else 0."""
    reports, errors = audit(paths)
    for error in errors:
        print(f"accelerate-warmup-patch audit: error: {error}", file=sys.stderr)
    if as_json:
        print(json.dumps(reports, indent=2))
    elif reports:
        print_table(reports)
    if errors:
        return 2
    return 1 if any(r["verdict"] == AFFECTED for r in reports) else 0


def print_table(reports: list[dict[str, Any]]) -> None:
    header = ("verdict", "DeepSpeed", "scheduler", "groups", "step 0 ran at", f"on {releases.NEWEST_DEEPSPEED}",
              "run")
    rows = [(r["verdict"].upper() if r["verdict"] == AFFECTED else r["verdict"], r["deepspeed_version"] or "?",
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
        if r["scheduler"]:
            params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
            print(f"  {r['scheduler']}({params}); optimizer lr {_lr(r['optimizer_lr'])}; "
                  f"at iteration {r['last_batch_iteration']}, {r['global_steps']} optimizer steps")
        print(f"  {r['why']}")
        for note in r["notes"]:
            print(f"  note: {note}")


def _lrs(per_group: list[float | None] | None, first: float | None) -> str:
    if per_group:
        return ", ".join(_lr(v) for v in per_group)
    return _lr(first)
