"""What a load_checkpoint brought into this process, for the record (record_writer.py): the record beside the
loaded model-states file, if it is bound to that very file, hands over its story of step 0 and its earlier loads;
otherwise the story says why there is none (no record: step 0 ran unpatched, or patched by 0.4.0 or older), with the
loaded save's release (its ``ds_version``, which load_checkpoint returns among the client_state) and
``global_steps``. The loaded record is read as the audit reads it (``record_data.valid_record``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from . import binding, record_data, step_watch, torch_file, whole_file
from .state import STATE


@dataclass
class LoadedHistory:
    """What the last load_checkpoint brought into this process: the run's step 0 and the loads before."""

    global_steps: int | None  # the engine's global_steps after the load (0: the run's step 0 is still to come)
    step0: dict[str, Any]  # the loaded record's step0, or why there is none
    loads: list[dict[str, Any]]  # this load and the loads the loaded record listed, newest first, bounded
    # the load restored the scheduler past step 0: the run's step 0 is behind even where global_steps is 0 (a
    # fork's load_module_only restores the scheduler and not global_steps: loads.py)
    resumed: bool = False


def history(engine: Any) -> LoadedHistory | None:
    found = STATE.loaded.get(id(engine))
    return found if isinstance(found, LoadedHistory) else None


def loaded(engine: Any, load_path: Any, client_state: Any, *, resumed: bool = False) -> None:
    """After load_checkpoint returned ``(load_path, client_state)``: what the save brings into this process
    (``resumed``: the load restored the scheduler past step 0)."""
    if not isinstance(load_path, str):
        return
    folder = os.path.dirname(load_path)
    whole_file.clean(folder, record_data.PARTIAL)  # what a job killed while writing this save's record left
    state = client_state if isinstance(client_state, dict) else {}
    version = state.get("ds_version") if isinstance(state.get("ds_version"), str) else None
    steps = step_watch.count(getattr(engine, "global_steps", None))
    hop: dict[str, Any] = {"tag": os.path.basename(folder), "deepspeed": version, "global_steps": steps,
                           "scheduler": record_data.scheduler_type(state.get("ds_config")), "record": None}
    # the step count the save holds: the engine's after a full load, the state's where a module-only load left it
    saved_steps = step_watch.count(state["global_steps"]) if "global_steps" in state else steps
    story, earlier = _story(folder, hop, saved_steps=saved_steps, universal=_loads_universal(engine))
    story = _own_shape(story, _groups(engine), hop)
    STATE.loaded[id(engine)] = LoadedHistory(steps, story, [hop, *earlier][:record_data.MAX_LOADS], resumed)
    step_watch.watch(engine, again=True)


def _groups(engine: Any) -> int | None:
    """How many param groups this job's optimizer has (the torch optimizer a DeepSpeed one wraps, as
    schedules.torch_optimizer finds it, without importing torch); None where it cannot be read (no optimizer)."""
    optimizer = getattr(engine, "optimizer", None)
    inner = getattr(optimizer, "optimizer", None)
    groups = getattr(inner if hasattr(inner, "param_groups") else optimizer, "param_groups", None)
    return len(groups) if isinstance(groups, list) else None


def _own_shape(story: dict[str, Any], groups: int | None, hop: dict[str, Any]) -> dict[str, Any]:
    """The loaded story of step 0 as this job hands it on: only where its lrs are one per group of this job's own
    optimizer (#56 item 4). A story of another shape (a record of 1,300 groups' lrs loaded by a model of one) proves
    nothing about this run's groups, and handing it on would make every later record as large: it is handed on as
    ``unbound``, saying so."""
    lrs = story.get("lrs")
    if groups is None or not isinstance(lrs, list) or len(lrs) == groups:
        return story
    kept = {key: story[key] for key in ("deepspeed", "scheduler", "global_steps") if key in story}
    return {"how": record_data.UNBOUND, **kept, "tag": hop["tag"],
            "why": f"the record beside the save it resumed from ({hop['tag']}) gives step 0's lrs of {len(lrs)} param "
                   f"groups, this job's optimizer has {groups}: a story of another shape is not handed on"}


def _loads_universal(engine: Any) -> bool:
    """Whether the engine loads universal checkpoints (``checkpoint.load_universal``: engine.py's
    load_universal_checkpoint @ v0.15.2, v0.19.8), ds_to_universal's output, which copies no record."""
    try:
        return engine.load_universal_checkpoint() is True
    except Exception:
        return False


def _story(folder: str, hop: dict[str, Any], *, saved_steps: int | None, universal: bool = False) -> \
        tuple[dict[str, Any], list[dict[str, Any]]]:
    """The loaded save's story of step 0 and its earlier loads: its record's, where it is this save's
    (binding.not_this_saves, the audit's rule; ``saved_steps``: the step count the save holds)."""
    base = {"deepspeed": hop["deepspeed"], "global_steps": hop["global_steps"], "tag": hop["tag"],
            "scheduler": hop["scheduler"]}
    path = os.path.join(folder, record_data.RECORD_FILE)
    if not os.path.lexists(path):
        copied = _copied_from(folder, base)
        if copied is not None:
            return copied
        if universal:  # converted from a save elsewhere: that save's record, not copied, told its step 0
            return {"how": record_data.UNBOUND, **base,
                    "why": f"the save it resumed from ({hop['tag']}) is a universal checkpoint with no record, and no "
                           "save beside it is its source: how its source's step 0 ran is not known here"}, []
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the save it resumed from ({hop['tag']}) holds no record: step 0 ran unpatched, or patched "
                       "by 0.4.0 or older"}, []
    try:
        raw = _read_record(path)
    except (torch_file.Unreadable, ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the record beside the save it resumed from ({hop['tag']}) cannot be read ({error})"}, []
    hop["record"] = raw.get("record") if isinstance(raw, dict) else None
    record = _valid(raw)
    if record is None or (not record_data.is_record_1(record) and _valid_record_2(raw) is None):
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the record beside the save it resumed from ({hop['tag']}) is not one this release reads"}, []
    actual, stamps = binding.read_back(folder)
    if not record_data.is_record_1(record) and record["bound_to"]["file"] is None:
        return {"how": record_data.UNBOUND, **base, "why": f"the record beside the save it resumed from ({hop['tag']}) "
                f"is not that save's: {binding.binding_problem(raw.get('bound_to'), actual)}"}, []
    zip_read = actual if actual.get("file") is not None else None  # None: the model states are not a zip
    save = {"deepspeed": hop["deepspeed"], "global_steps": saved_steps, "scheduler": hop["scheduler"]}
    problem = binding.not_this_saves(record, zip_read, **save)
    others = [(name, *stamp) for name, stamp in stamps.items() if name != actual.get("file")]
    extra = binding.beside_its_own(record, zip_read, others, **save) if problem is not None else None
    if extra is not None:  # as the audit reads it (cli/audit/read.py): a claim, never proof
        return {"how": record_data.UNBOUND, **base, "why": f"the record beside the save it resumed from "
                f"({hop['tag']}) was written with its model states, but {extra} states files of another process lie "
                "beside them: what it says is a claim"}, []
    if problem is not None:
        return {"how": record_data.UNRECORDED, **base, "why": f"the record beside the save it resumed from "
                f"({hop['tag']}) is not that save's: {problem}"}, []
    if record_data.is_record_1(record):
        said = record["scheduler"]["step0"] if record["scheduler"] is not None else None
        return {"how": record_data.RECORD_1, **base, "claimed": said,
                "why": f"the save it resumed from ({hop['tag']}) holds a record 1 (0.5.0), bound to no file"}, []
    valid = _valid_record_2(raw)
    assert valid is not None  # checked above
    hop["bound"] = True
    return valid["step0"], valid["loads"]


MAX_SIBLINGS = 256  # the tag folders beside a loaded save without a record that are asked whether it is their copy


def _copied_from(folder: str, base: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A loaded save without a record that is a copy of a recorded save beside it (ds_to_universal copies the model
    states into the universal checkpoint's folder, not the record): that save's story, where its record is bound to
    it and its model-states file, whose bytes this one's are, holds the weights; where it holds none (ZeRO 3, the
    pipeline), the copy proves nothing, and the story says so. None where no save beside it matches."""
    actual = binding.bind(folder)
    if actual.get("file") is None:
        return None
    parent, own = os.path.split(os.path.normpath(folder))
    try:
        siblings = sorted(name for name in os.listdir(parent) if name != own)[:MAX_SIBLINGS]
    except OSError:
        return None
    for name in siblings:
        record_path = os.path.join(parent, name, record_data.RECORD_FILE)
        try:
            raw = _read_record(record_path) if os.path.isfile(record_path) else None
        except (torch_file.Unreadable, ValueError, RecursionError):
            continue
        valid = _valid_record_2(raw)
        if valid is None or not isinstance(raw, dict) or \
                not binding.same_model_states(raw.get("bound_to"), actual) or \
                not binding.same_binding(raw.get("bound_to"), binding.bind(os.path.join(parent, name))):
            continue
        if binding.holds_weights(os.listdir(os.path.join(parent, name)), str(actual["file"])):
            return valid["step0"], valid["loads"]
        return {"how": record_data.UNBOUND, **base,
                "why": f"the save it resumed from ({base['tag']}) holds no record; its model states are a copy of "
                       f"{name}'s, whose record is bound to them, but they hold no weights (ZeRO 3, or the "
                       "pipeline's layer files), so the copy proves nothing"}, []
    return None


def _read_record(path: str) -> Any:
    """A record as JSON, read as the audit reads it: a regular file of at most RECORD_BYTES, never blocking on a
    FIFO; raises torch_file.Unreadable, or ValueError where it is not JSON."""
    return record_data.parse(torch_file.read_capped(path, record_data.RECORD_BYTES))


def _valid(raw: Any) -> dict[str, Any] | None:
    """The record as the audit reads it (record_data.valid_record); None where it is not one."""
    try:
        return record_data.valid_record(raw)
    except ValueError:
        return None


def _valid_record_2(raw: Any) -> dict[str, Any] | None:
    """A record 2's step0 and loads, where the whole record is one the audit accepts (record_data.valid_record),
    rebuilt in the shape this process writes them (record_data.written_step0): a job hands on exactly what the audit
    would read, and nothing that could make its own records unwritable or large. None where it is not."""
    if not isinstance(raw, dict) or raw.get("record") != record_data.RECORD:
        return None
    try:
        record_data.valid_record(raw)
        return {"step0": record_data.written_step0(raw.get("step0")),
                "loads": record_data.written_loads(raw.get("loads"))}
    except ValueError:
        return None
