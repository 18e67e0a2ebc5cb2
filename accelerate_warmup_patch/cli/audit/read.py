"""One save's facts: a tag folder's model-states file (through ``checkpoint_pickle``), its ds_config and the
patch's record beside it."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .find import model_states
from .stores import LOCAL, Store
from .verdicts import RECORD_FILE

# the bounds of the small files the audit reads beside a checkpoint
RECORD_BYTES, CONFIG_BYTES = 64 * 1024, 4 * 1024 * 1024
_STEP0 = ("fixed", "warned", "as-release", "earlier-process", "left", "unknown")


@dataclass
class Save:
    """What one tag folder says: its model-states file's facts, its ds_config (or why it could not be read) and
    the patch's record, if any."""

    tag: PurePath
    file: PurePath
    version: str
    config: dict[str, Any]
    config_problem: str | None
    global_steps: Any
    iteration: Any
    groups: int | None
    scheduler_state: Any
    record: dict[str, Any] | None
    notes: list[str]


def read_save(tag: PurePath, config_root: str | None = None, store: Store = LOCAL) -> Save:
    """The facts of one tag folder, read from ``store``; raises Unreadable with the reason."""
    file = model_states(tag, store)
    if file is None:
        raise Unreadable(f"{tag}: no model-states file (or the folder cannot be listed)")
    try:
        data = store.load(file)
    except Unreadable as error:
        raise Unreadable(f"{file.name}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ds_version"), str):
        raise Unreadable(f"{file.name}: not a DeepSpeed model-states file (no ds_version)")
    notes: list[str] = []
    config, problem = _ds_config(data.get("ds_config"), notes, config_root)
    state = data.get("lr_scheduler")
    iteration = None
    if isinstance(state, dict) and set(state) == {"last_batch_iteration"}:
        iteration = number(state["last_batch_iteration"])
    global_steps = number(data.get("global_steps"))
    record = _record(tag, notes, store)
    if record is not None and None not in (record["global_steps"], global_steps) and \
            record["global_steps"] != global_steps:
        # The record is written after each save, with the engine's step count; the tag folder may be saved over
        # later by a job that wrote none (unpatched, off, or without the package), and the old record stays.
        notes.append(f"{record['file']}: ignored, it names global step {record['global_steps']} and the checkpoint "
                     f"{global_steps}: a record of an earlier save into this folder")
        record = None
    return Save(tag, file, data["ds_version"][:64], config, problem, global_steps, iteration,
                _group_count(data), state, record, notes)


def number(value: Any) -> Any:
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


def _record(tag: PurePath, notes: list[str], store: Store) -> dict[str, Any] | None:
    """The record a patched run wrote beside this save (BRIEF's record 1), as plain data; None when there is none
    or it is malformed (then a note says why)."""
    path = tag / RECORD_FILE
    if not store.exists(path):
        return None
    try:
        raw = json.loads(store.read_capped(path, RECORD_BYTES).decode("utf-8"),
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
    record["global_steps"] = number(raw.get("global_steps"))
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
                                  any(number(v) is None for v in value)):
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

