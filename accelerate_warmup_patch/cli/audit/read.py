"""One save's facts: a tag folder's model-states file (through ``checkpoint_pickle``), its ds_config and the
patch's record beside it."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from ... import record_data
from ...binding import (
    UNREADABLE,
    beside_its_own,
    members_digest,
    model_states_binding,
    not_this_saves,
    other_states,
    others_binding,
)
from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .find import model_states
from .stores import LOCAL, Store

CONFIG_BYTES = 4 * 1024 * 1024  # the bound of a ds_config file the audit reads (a record's is record_data's)
# ``config_root`` that reads no ds_config file outside the checkpoint: what the checkpoint alone says (run_report
# judges a run that a file outside cleared once more with it). A NUL byte is in no path.
CHECKPOINT_ONLY = "\0the checkpoint only"


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
    # whether the optimizer's state in this file holds per-parameter state (Adam's moments, a step count), which a
    # torch optimizer builds at its first step: True, False (none yet), None (not in this file: ZeRO keeps it in
    # the *_optim_states.pt files)
    optimizer_stepped: bool | None = None
    # the model the engine held: a digest of its module's parameter names (None where the file holds none), which
    # tells one engine's saves from another's whatever their tags are named
    model: str | None = None
    binding: dict[str, Any] | None = None  # its model-states file's (model_states_binding), where it was read
    # the file its ds_config was read from, where the engine was given a path (the checkpoint holds the path alone):
    # a fact from outside the checkpoint, which may make a verdict worse, never clear it
    config_file: str | None = None
    skipped_steps: Any = None  # optimizer steps skipped on an fp16 overflow, which step no scheduler

    @property
    def vouched(self) -> bool:
        """Whether a record beside it is bound to it: only such a record speaks for this save."""
        return self.record is not None and bool(self.record.get("bound"))


def read_save(tag: PurePath, config_root: str | None = None, store: Store = LOCAL, *, bind: bool = False) -> Save:
    """The facts of one tag folder, read from ``store``; raises Unreadable with the reason. ``bind``: its
    model-states file's binding is kept (``Save.binding``) even without a record beside it."""
    file = model_states(tag, store)
    if file is None:
        raise Unreadable(f"{tag}: no model-states file (or the folder cannot be listed)")
    try:
        # the zip's members are gathered (a tuple each) only where a record beside the save will be checked
        directory = checkpoint_pickle.ZipDirectory() if bind or store.exists(tag / record_data.RECORD_FILE) else None
        data = store.load(file, directory)
    except Unreadable as error:
        raise Unreadable(f"{file.name}: {error}") from None
    if not isinstance(data, dict) or not isinstance(data.get("ds_version"), str):
        raise Unreadable(f"{file.name}: not a DeepSpeed model-states file (no ds_version)")
    notes: list[str] = []
    config, problem, config_file = _ds_config(data.get("ds_config"), notes, config_root)
    state = data.get("lr_scheduler")
    iteration = None
    if isinstance(state, dict) and set(state) == {"last_batch_iteration"}:
        iteration = number(state["last_batch_iteration"])
    global_steps = number(data.get("global_steps"))
    version = data["ds_version"][:64]
    binding = model_states_binding(file.name, directory.size, directory.members) \
        if directory is not None and directory.zip else None
    record = _record(tag, notes, store)
    others: list[tuple[str, int, str | None]] = []
    if record is not None and binding is not None and "others" in record.get("bound_to", {}):
        others = _other_stamps(tag, file.name, store)
        binding["others"] = others_binding(others)
    if record is not None:
        record = _this_saves(record, binding=binding, others=others, version=version, global_steps=global_steps,
                             scheduler=record_data.scheduler_type(config), notes=notes)
    stepped = _optimizer_stepped(data)
    if stepped is None and global_steps == 0 and isinstance(iteration, int) and iteration >= 0:
        stepped = _zero_optimizer_stepped(tag, store)  # only where global_steps and the scheduler disagree
    return Save(tag, file, version, config, problem, global_steps, iteration, _group_count(data), state, record,
                notes, stepped, model_identity(data), binding, config_file, number(data.get("skipped_steps")))


def _other_stamps(tag: PurePath, bound_file: str, store: Store) -> list[tuple[str, int, str | None]]:
    """The tag folder's other states files as it is now, as ``bound_to["others"]`` digests them: each one's name,
    size and members' digest, read from its central directory alone (record_data's selection, the writer's)."""
    files: list[tuple[str, int, str | None]] = []
    for name in other_states(store.names(tag), bound_file):
        try:
            directory = store.directory(tag / name)
        except Unreadable:
            files.append((name, -1, UNREADABLE))
            continue
        files.append((name, directory.size, members_digest(directory.members) if directory.zip else None))
    return files


def _this_saves(record: dict[str, Any], *, binding: dict[str, Any] | None, others: list[tuple[str, int, str | None]],
                version: str, global_steps: Any, scheduler: str | None, notes: list[str]) -> dict[str, Any] | None:
    """The record, if it can be this save's; else None and a note naming what disagrees. A record 2 must be bound
    to this very model-states file; every record must name this save's release, step count and scheduler class.
    A record 2 that says it is unbound is kept, marked ``bound: False``: a claim, never proof; so is one whose files
    are all here as it bound them, with states files it did not write beside them (``others``: the folder's)."""
    name = record["file"]
    problem = not_this_saves(record, binding, deepspeed=version, global_steps=global_steps, scheduler=scheduler)
    extra = beside_its_own(record, binding, others, deepspeed=version, global_steps=global_steps,
                           scheduler=scheduler) if problem is not None else None
    if extra is not None:
        # its writer wrote these very model states and its own other states files; the rest are another process's
        # (a rerun of ZeRO 0 over a ZeRO 1/2 save, or of one rank over a save of two, leaves the earlier run's; a
        # rank of a racing job writes its own): what the record says of its own process stands as a claim (a harm
        # counts, a fix clears nothing), where ignoring it would judge the save as a process that left no record
        notes.append(f"{name}: its writer wrote these model states and its own other states files, and {extra} "
                     "more lie beside them now (another process's): what it says is a claim, not proof")
        record["bound"] = False
        return record
    if problem is not None:
        notes.append(f"{name}: ignored, not that save's record: {problem}")
        return None
    record["bound"] = record["record"] == record_data.RECORD and record["bound_to"]["file"] is not None
    if record["record"] == record_data.RECORD and not record["bound"]:
        notes.append(f"{name}: unbound ({record['bound_to']['unbound']}): what it says is a claim, not proof")
    return record


def not_deepspeeds(save: Save) -> str | None:
    """Why the scheduler the engine held when it wrote ``save`` is not one of DeepSpeed's, from the state the file
    holds (a torch lr scheduler's ``base_lrs`` and ``last_epoch``; DeepSpeed's save ``{"last_batch_iteration": N}``
    alone); None where it may be. The bug is in DeepSpeed's scheduler constructors, so such a run is not affected."""
    state = save.scheduler_state
    if not isinstance(state, dict) or "last_batch_iteration" in state or not {"base_lrs", "last_epoch"} <= set(state):
        return None
    return (f"the engine's scheduler in {save.tag.name} saved a torch lr scheduler's state (base_lrs, last_epoch), "
            "not one of DeepSpeed's (the HF Trainer's lr_scheduler_type, or your own): the bug is in DeepSpeed's "
            "scheduler constructors and cannot reach it, patched or not")


def number(value: Any) -> Any:
    """A number the file holds, or None (a bool, a huge int, a non-finite float, anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, int):
        return value if value.bit_length() <= 63 else None
    return value if math.isfinite(value) else None


def _ds_config(config: Any, notes: list[str],
               config_root: str | None) -> tuple[dict[str, Any], str | None, str | None]:
    """The saved ds_config, why it could not be read (None when it could), and the file it was read from (None
    where the checkpoint holds it). The save holds what deepspeed.initialize handed the engine
    (``ds_config=self.config`` in engine.py's _save_checkpoint): the path alone on the releases whose initialize does
    not load it first (docs/audit.md names them). That file is read as it is now when the path is absolute, or
    relative and ``--config-root`` says against what; never with ``CHECKPOINT_ONLY``."""
    if isinstance(config, dict):
        return config, None, None
    if not isinstance(config, str):
        return {}, None, None
    path = config
    if config_root == CHECKPOINT_ONLY:
        return {}, (f"the engine was given its config as a file, {path!r}, and the checkpoint holds only its path "
                    "(a file read elsewhere never clears a run)"), None
    if not os.path.isabs(path):
        if config_root is None:
            return {}, (f"the engine was given its config as a relative path, {path!r}: not read (relative to the "
                        "job's working directory, which the checkpoint does not hold; give --config-root DIR)"), None
        path = os.path.join(config_root, path)
    try:
        text = checkpoint_pickle.read_capped(path, CONFIG_BYTES).decode("utf-8")
        loaded = json.loads(text, parse_int=_bounded_int, parse_constant=lambda _: None)
        if not isinstance(loaded, dict):
            raise Unreadable("not a JSON object")
    except (Unreadable, ValueError, RecursionError) as error:
        return {}, f"the engine was given its config as a file, {path}, which cannot be read here: {error}", None
    notes.append(f"the engine was given its config as a file: read {path} as it is now, not as it was (it may make "
                 "the verdict worse, never clear it)")
    return loaded, None, path


def _bounded_int(text: str) -> int | None:
    return int(text) if len(text) <= 30 else None  # int() of a long one is quadratic on Python 3.9


def _record(tag: PurePath, notes: list[str], store: Store) -> dict[str, Any] | None:
    """The record a patched run wrote beside this save (record 2, or 0.5.0's record 1), as plain data with its lrs
    decoded; None when there is none or it is malformed (then a note says why)."""
    path = tag / record_data.RECORD_FILE
    if not store.exists(path):
        return None
    try:
        raw = record_data.parse(store.read_capped(path, record_data.RECORD_BYTES))
        record = record_data.valid_record(raw)
    except (Unreadable, ValueError, RecursionError, TypeError, KeyError) as error:
        notes.append(f"{path}: ignored, not a record this audit reads ({error})")
        return None
    record["file"] = str(path)
    return record


def model_identity(data: dict[str, Any]) -> str | None:
    """A digest of the engine's model as the file holds it: each parameter's and buffer's name, shape and dtype
    (its module's state_dict), and each name and shape ``param_shapes`` lists (ZeRO's, where the module holds
    placeholders); None where the file holds neither. Two engines of one class (a GAN's two ``nn.Sequential``) share
    names; their shapes or dtypes tell them apart."""
    import hashlib

    entries: list[str] = []
    module = data.get("module")
    if isinstance(module, dict):
        entries.extend(f"module {key} {_tensor_text(value)}" for key, value in module.items())
    shapes = data.get("param_shapes")
    if isinstance(shapes, list):
        entries.extend(f"shape {key} {_shape_text(value)}" for group in shapes if isinstance(group, dict)
                       for key, value in group.items())
    if not entries:
        return None
    return "sha256:" + hashlib.sha256("\n".join(sorted(entries)).encode("utf-8", "surrogateescape")).hexdigest()


def _tensor_text(value: Any) -> str:
    if isinstance(value, checkpoint_pickle.Tensor):
        return f"{value.kind or '?'} {list(value.shape)}"
    return type(value).__name__


def _shape_text(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return str([n for n in value if isinstance(n, int)])
    shape = getattr(value, "shape", None)
    return str(list(shape)) if isinstance(shape, tuple) else type(value).__name__


def _optimizer_states(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The torch optimizer state_dicts the file holds: plain, or inside DeepSpeed's fp16 or bf16 wrapper."""
    optimizer = data.get("optimizer")
    if not isinstance(optimizer, dict):
        return []
    found = (optimizer, optimizer.get("optimizer_state_dict"), optimizer.get("base_optimizer_state"))
    return [state for state in found if isinstance(state, dict) and isinstance(state.get("param_groups"), list)]


def _optimizer_stepped(data: dict[str, Any]) -> bool | None:
    """Whether the optimizer had stepped when saved, from its own state: a torch optimizer fills ``state`` (one
    entry per parameter) at its first step; None where the file holds no optimizer state."""
    states = [state["state"] for state in _optimizer_states(data) if isinstance(state.get("state"), dict)]
    if not states:
        return None
    return any(len(state) > 0 for state in states)


# what a torch optimizer keeps per parameter once it has stepped (Adam, AdamW, SGD with momentum, RMSprop, Adagrad,
# Adadelta): ZeRO's optimizer states file holds it for the rank's fp32 partition
_PER_PARAMETER = frozenset({"exp_avg", "exp_avg_sq", "momentum_buffer", "square_avg", "sum", "acc_delta"})


def _zero_optimizer_stepped(tag: PurePath, store: Store) -> bool | None:
    """Whether the lowest-ranked ``*optim_states.pt`` of a ZeRO save (its ``optimizer_state_dict``: engine.py's
    _save_zero_checkpoint @ v0.15.2, v0.19.8) holds per-parameter state, which its optimizer builds at its first
    step; None where there is no such file or it cannot be read."""
    try:
        names = sorted(name for name in store.names(tag) if name.endswith("optim_states.pt"))
        data = store.load(tag / names[0]) if names else None
    except (OSError, Unreadable):
        return None
    state = data.get("optimizer_state_dict") if isinstance(data, dict) else None
    return _holds_per_parameter_state(state, 6) if isinstance(state, dict) else None


def _holds_per_parameter_state(value: Any, depth: int) -> bool:
    if depth <= 0:
        return False
    if isinstance(value, dict):
        if _PER_PARAMETER & {key for key in value if isinstance(key, str)}:
            return True
        return any(_holds_per_parameter_state(item, depth - 1) for key, item in value.items() if key != "param_groups")
    if isinstance(value, (list, tuple)):
        return any(_holds_per_parameter_state(item, depth - 1) for item in value[:10_000])
    return False


def _group_count(data: dict[str, Any]) -> int | None:
    """The optimizer's param groups: its state_dict's (plain, fp16 or bf16 wrapper) or, under ZeRO and bf16,
    ``param_shapes`` (one entry per group); None where the file does not tell."""
    for state in _optimizer_states(data):
        return len(state["param_groups"])
    shapes = data.get("param_shapes")
    if isinstance(shapes, list) and shapes:
        return len(shapes)
    return None

