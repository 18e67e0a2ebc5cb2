"""What this process saw of its run's history, for the record (record_writer.py): the lr its first optimizer step really
ran at, and what each load_checkpoint carried in from the save it loaded.

- **The first step, observed**: where the patch already sees an engine (the initialize net, and after each
  load_checkpoint) it registers a torch optimizer step pre-hook (``Optimizer.register_step_pre_hook``, torch 2.0+)
  on the engine's torch optimizer. At the first optimizer step it reads each group's lr, the scheduler's
  ``last_batch_iteration`` and ``engine.global_steps``. torch iterates the pre-hooks while it calls them, and a hook
  that removes itself there breaks the hook after it (``OrderedDict mutated during iteration``), so a post-hook it
  registers removes it at the end of that same step, and then itself: nothing is left on a steady step. What the
  record says is what the step ran at, never what the patch meant it to run at: a restore after the patch set the
  lr shows.
- **What a load carried in**: after load_checkpoint, the record beside the loaded model-states file, if it is
  bound to that very file, hands over its story of step 0; otherwise the story says why there is none (no record:
  step 0 ran unpatched, or patched by 0.4.0 or older), with the loaded save's release (its ``ds_version``, which
  load_checkpoint returns among the client_state) and ``global_steps``.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any

from . import record_data, schedules, torch_file
from .state import STATE


@dataclass
class Watch:
    """One engine's watch of the next optimizer step in this process (its first, or its first after a load)."""

    handle: Any = None  # the torch pre-hook's handle while registered
    cleanup: Any = None  # the post-hook that removes it after the first step, while registered
    groups: list[Any] = field(default_factory=list)  # the groups when registered (ZeRO 1/2 step one at a time)
    seen: dict[str, Any] | None = None  # what the step ran at: lrs, global_steps, last_batch_iteration
    why_not: str | None = None  # why it cannot be seen (no torch hook, no optimizer, a failure)


@dataclass
class Carried:
    """What the last load_checkpoint carried into this process: the run's step 0 and the loads before."""

    global_steps: int | None  # the engine's global_steps after the load (0: the run's step 0 is still to come)
    step0: dict[str, Any]  # the loaded record's step0, or why there is none
    loads: list[dict[str, Any]]  # this load and the loads the loaded record listed, newest first, bounded


def watch(engine: Any, *, again: bool = False) -> None:
    """Watch ``engine``'s next optimizer step; ``again`` after a load (the step to come is the one that counts)."""
    key = id(engine)
    old = STATE.watches.get(key)
    if old is not None and not again:
        return
    if old is not None:
        _unhook(old)
    else:
        try:
            weakref.finalize(engine, STATE.watches.pop, key, None)
            weakref.finalize(engine, STATE.carried.pop, key, None)
        except TypeError:
            return  # an engine without __weakref__: its id could be reused while recorded
    STATE.watches[key] = _hook(engine)


def _hook(engine: Any) -> Watch:
    optimizer = getattr(engine, "optimizer", None)
    if optimizer is None:
        return Watch(why_not="the engine has no optimizer")
    optimizer = schedules.torch_optimizer(optimizer)  # DeepSpeed's wrapper (ZeRO, fp16, bf16): the torch one in it
    register = getattr(optimizer, "register_step_pre_hook", None)
    if not callable(register):
        return Watch(why_not="this torch has no optimizer step pre-hook (torch 2.0+): the first step was not "
                     "observed")
    watched = Watch(groups=list(optimizer.param_groups))
    engine_ref = weakref.ref(engine)

    def first_step(opt: Any, args: Any, kwargs: Any) -> None:
        if watched.seen is not None or watched.why_not is not None:
            return  # seen: only until the post-hook below (or the next save or load) takes it out
        try:
            watched.seen = _observe(engine_ref(), opt, watched.groups)
            watched.cleanup = opt.register_step_post_hook(lambda *_: _clean_up(watched))
        except Exception as error:  # runs inside the user's optimizer step: never break it
            watched.why_not = f"reading the first step failed ({type(error).__name__}: {str(error)[:200]})"

    watched.handle = register(first_step)
    return watched


def _clean_up(watched: Watch) -> None:
    """After the first step: the pre-hook goes (torch is iterating the post-hooks now, not the pre-hooks), and so
    does this post-hook where it is the last one torch iterates (removing a hook that others follow breaks torch's
    loop: ``OrderedDict mutated during iteration``); else the next save or load removes it."""
    if watched.handle is not None:
        watched.handle.remove()
        watched.handle = None
    cleanup = watched.cleanup
    hooks = getattr(cleanup, "hooks_dict_ref", lambda: None)()
    if cleanup is not None and hooks is not None and next(reversed(hooks), None) == getattr(cleanup, "id", None):
        cleanup.remove()
        watched.cleanup = None


def _observe(engine: Any, optimizer: Any, groups: list[Any]) -> dict[str, Any]:
    """What the step about to run uses. ZeRO 1/2 narrow ``param_groups`` to one group per call, so the groups are
    those taken at registration unless the optimizer shows at least as many now (a load_state_dict replaced them)."""
    current = list(optimizer.param_groups)
    used = current if len(current) >= len(groups) else groups
    scheduler = getattr(engine, "lr_scheduler", None)
    iteration = getattr(scheduler, "last_batch_iteration", None)
    return {"lrs": [schedules.lr_value(group["lr"]) for group in used],
            "global_steps": _count(getattr(engine, "global_steps", None)),
            "skipped_steps": _count(getattr(engine, "skipped_steps", None)),
            "last_batch_iteration": _count(iteration)}


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _unhook(watched: Watch) -> None:
    for handle in (watched.handle, watched.cleanup):
        if handle is not None:
            handle.remove()
    watched.handle = watched.cleanup = None


def unhook_fired(engine: Any) -> None:
    """Remove a hook that has seen its step (outside torch's loop over the hooks: a save or a load)."""
    watched = STATE.watches.get(id(engine))
    if watched is not None and (watched.seen is not None or watched.why_not is not None):
        _unhook(watched)


def first_step(engine: Any) -> dict[str, Any] | None:
    """The record's ``first_step``: what this process's first optimizer step ran at; ``{"observed": false, "why"}``
    where it could not be seen; None while no step has run (or the patch never watched this engine)."""
    watched = STATE.watches.get(id(engine))
    if watched is None:
        return None
    if watched.seen is not None:
        seen = watched.seen
        return {"observed": True, "lrs": [record_data.encode_lr(lr) for lr in seen["lrs"]],
                "global_steps": seen["global_steps"], "skipped_steps": seen["skipped_steps"],
                "last_batch_iteration": seen["last_batch_iteration"]}
    if watched.why_not is not None:
        return {"observed": False, "why": watched.why_not}
    return None


def carried(engine: Any) -> Carried | None:
    found = STATE.carried.get(id(engine))
    return found if isinstance(found, Carried) else None


# The load ---------------------------------------------------------------------------------------------------

def loaded(engine: Any, load_path: Any, client_state: Any) -> None:
    """After load_checkpoint returned ``(load_path, client_state)``: what the save carries into this process."""
    if not isinstance(load_path, str):
        return
    folder = os.path.dirname(load_path)
    state = client_state if isinstance(client_state, dict) else {}
    version = state.get("ds_version") if isinstance(state.get("ds_version"), str) else None
    steps = _count(getattr(engine, "global_steps", None))
    hop: dict[str, Any] = {"tag": os.path.basename(folder), "deepspeed": version, "global_steps": steps,
                           "scheduler": record_data.scheduler_type(state.get("ds_config")), "record": None}
    story, earlier = _story(folder, hop)
    STATE.carried[id(engine)] = Carried(steps, story, [hop, *earlier][:record_data.MAX_LOADS])
    watch(engine, again=True)


def _story(folder: str, hop: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The loaded save's story of step 0 and its earlier loads: its record's, where bound to this save."""
    base = {"deepspeed": hop["deepspeed"], "global_steps": hop["global_steps"], "tag": hop["tag"],
            "scheduler": hop["scheduler"]}
    path = os.path.join(folder, record_data.RECORD_FILE)
    if not os.path.lexists(path):
        copied = _copied_from(folder, base)
        if copied is not None:
            return copied
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the save it resumed from ({hop['tag']}) holds no record: step 0 ran unpatched, or patched "
                       "by 0.4.0 or older"}, []
    try:
        raw = _read_record(path)
    except (torch_file.Unreadable, ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the record beside the save it resumed from ({hop['tag']}) cannot be read ({error})"}, []
    hop["record"] = raw.get("record") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and raw.get("record") == 1 and raw.get("package") == record_data.PACKAGE:
        scheduler = raw.get("scheduler")
        said = scheduler.get("step0") if isinstance(scheduler, dict) else None
        return {"how": record_data.RECORD_1, **base, "claimed": str(said)[:40] if said is not None else None,
                "why": f"the save it resumed from ({hop['tag']}) holds a record 1 (0.5.0), bound to no file"}, []
    valid = _valid_record_2(raw)
    if valid is None:
        return {"how": record_data.UNRECORDED, **base,
                "why": f"the record beside the save it resumed from ({hop['tag']}) is not one this release reads"}, []
    actual = record_data.bind(folder)
    if not record_data.same_binding(raw.get("bound_to"), actual):
        problem = record_data.binding_problem(raw.get("bound_to"), actual)
        bound_to = raw.get("bound_to")
        how = record_data.UNBOUND if not isinstance(bound_to, dict) or bound_to.get("file") is None else \
            record_data.UNRECORDED
        return {"how": how, **base, "why": f"the record beside the save it resumed from ({hop['tag']}) is not that "
                f"save's: {problem}"}, []
    hop["bound"] = True
    return valid["step0"], valid["loads"]


MAX_SIBLINGS = 256  # the tag folders beside a loaded save without a record that are asked whether it is their copy


def _copied_from(folder: str, base: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A loaded save without a record that is a copy of a recorded save beside it (ds_to_universal copies the model
    states into the universal checkpoint's folder, not the record): that save's story, where its record is bound to
    it and its model-states file, whose bytes this one's are, holds the weights; where it holds none (ZeRO 3, the
    pipeline), the copy proves nothing, and the story says so. None where no save beside it matches."""
    actual = record_data.bind(folder)
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
                not record_data.same_model_states(raw.get("bound_to"), actual) or \
                not record_data.same_binding(raw.get("bound_to"), record_data.bind(os.path.join(parent, name))):
            continue
        if record_data.holds_weights(os.listdir(os.path.join(parent, name)), str(actual["file"])):
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


def _valid_record_2(raw: Any) -> dict[str, Any] | None:
    """A record 2's step0 and loads, where the whole record is one the audit accepts (record_data.valid_record),
    rebuilt in the shape this process writes them (record_data.written_step0): a job carries exactly what the audit
    would read, and nothing that could make its own records unwritable or large. None where it is not."""
    if not isinstance(raw, dict) or raw.get("record") != record_data.RECORD:
        return None
    try:
        record_data.valid_record(raw)
        return {"step0": record_data.written_step0(raw.get("step0")),
                "loads": record_data.written_loads(raw.get("loads"))}
    except ValueError:
        return None
