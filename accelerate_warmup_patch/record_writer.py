"""The record a patched run leaves beside each checkpoint: how the run's step 0 really ran, bound to the save.

Where the patch already acts (``backport.settle``, step mode's one step, the load_checkpoint net), it notes what
it did about optimizer step 0 of that scheduler (``note``); ``step_watch`` observes the lr the first optimizer step
really ran at, and ``loaded_record`` reads what a loaded save's record said. After
``DeepSpeedEngine.save_checkpoint`` returns, while the patch is armed, global rank 0 writes record 2 (docs/mark.md)
as plain JSON into the tag folder, ``<save_dir>/<tag>/accelerate_warmup_patch.json``, bound to the model-states
file beside it, so that ``audit`` can tell a run the patch fixed from one it only warned about, or one a restore or
an unpatched process hurt.

A file of its own, because each other place changes what a user sees: a key of the model-states file comes back
in the client_state that load_checkpoint returns, and a key in the scheduler's state is loaded into the scheduler.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import (
    attest,
    binding,
    failures,
    loaded_record,
    own_writes,
    record_data,
    record_schema,
    releases,
    schedules,
    settings,
    step_watch,
    whole_file,
    wrapping,
)
from .state import STATE

FILE_NAME = record_data.RECORD_FILE
RECORD = record_data.RECORD

# what this process's patch did about optimizer step 0 of a scheduler (the record's "scheduler.step0"): the words
# are the record's (record_data), which the audit reads; step0.patch_did keeps "fixed" and "as-release" only where
# the first step ran at the reference release's lrs
FIXED, WARNED, AS_RELEASE = record_data.FIXED, record_data.WARNED, record_data.AS_RELEASE
EARLIER_PROCESS, LEFT, UNKNOWN = record_data.EARLIER_PROCESS, record_data.LEFT, record_data.UNKNOWN


@dataclass(frozen=True)
class Action:
    """What the patch did about one scheduler's optimizer step 0 (the record's ``scheduler.step0``), with each
    group's lr before and after."""

    what: str
    lrs_before: list[float] | None
    lrs_after: list[float] | None
    why: str
    built_at: int | None = None  # the iteration it was built at, where that was later than -1 (not in the record)


def note(scheduler: object, action: Action, first_only: bool = False) -> None:
    """Remember ``action`` for ``scheduler`` until it dies (``first_only``: unless something is noted already).

    An object without ``__weakref__`` is not remembered: its id could be reused by a newer object."""
    key = id(scheduler)
    notes = STATE.actions
    if key in notes:
        if not first_only:
            notes[key] = action
        return
    try:
        weakref.finalize(scheduler, notes.pop, key, None)
    except TypeError:
        return
    notes[key] = action


def noted(scheduler: object) -> Action | None:
    """What was noted for ``scheduler``; None when the patch never saw it."""
    found = STATE.actions.get(id(scheduler))
    return found if isinstance(found, Action) else None


def lrs(values: list[Any]) -> list[float]:
    """Each group's lr as a float (a tensor lr too), for the record."""
    return [schedules.lr_value(v) for v in values]


def group_lrs(scheduler: Any) -> list[float] | None:
    """The lrs its optimizer's groups hold now; None where they cannot be read (a scheduler the patch failed on)."""
    try:
        return lrs([g["lr"] for g in scheduler.optimizer.param_groups])
    except Exception:
        return None


def resumed(engine: Any) -> None:
    """After load_checkpoint: a scheduler the checkpoint set past step 0 ran its step 0 in an earlier process."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is not None and not schedules.is_fresh(scheduler):
        note(scheduler, earlier_process(scheduler, "load_checkpoint restored it"))


def earlier_process(scheduler: Any, how: str) -> Action:
    """A scheduler past step 0 when the patch saw it (``how``): its step 0 ran in an earlier process."""
    return Action(EARLIER_PROCESS, None, None, f"{how} at iteration {getattr(scheduler, 'last_batch_iteration', '?')}: "
                  "its optimizer step 0 ran in an earlier process")


# The save ------------------------------------------------------------------------------------------------

def save_checkpoint_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DeepSpeedEngine.save_checkpoint``: the original first (the states files this process writes in it noted
    as it writes them, and told to the record's writer by the other ranks: own_writes.saving), its result returned
    unchanged; then the record."""
    arguments = wrapping.arguments_reader(original, defaults=True)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        this = _save_notes(instance)
        if this is not None:  # before the original, whose closing barrier then orders it before the writer's ask
            _tell_the_writer(instance, this, lambda: arguments(instance, args, kwargs))
        with own_writes.saving(this) as notes:
            result = wrapped(*args, **kwargs)
        if not settings.record_wanted():  # ACCELERATE_WARMUP_PATCH_RECORD=off: no record (docs/mark.md)
            return result
        mode = STATE.mode
        if mode is not None and instance is not None:
            try:
                step_watch.unhook_fired(instance)  # outside torch's loop over the hooks, where it can go
                if not writes_records(instance):
                    return result
                given = arguments(instance, args, kwargs)
                tag = given["tag"]
                # the tag the original used: with none given, f"global_step{self.global_steps}" (engine.py's
                # save_checkpoint @ v0.9.0, v0.14.4, v0.15.2, v0.19.8; it does not move global_steps)
                folder = os.path.join(given["save_dir"],
                                      f"global_step{instance.global_steps}" if tag is None else str(tag))
                write_checked(folder, record(instance, mode, folder, notes), notes)
            except Exception as error:  # the checkpoint is saved: never break the user's save
                failures.report("mark", what="writing the patch's record beside the checkpoint", error=error,
                                consequence="the checkpoint is saved without it; audit judges that run as it judges "
                                "an unpatched one")
        return result

    return wrapper


def _save_notes(engine: Any) -> own_writes.SaveNotes | None:
    """The notes of this process's own writes in the save about to run, on every rank of an armed job that writes
    records (the record's writer keeps its notes, the others tell it theirs); None where no record is written."""
    try:
        if not settings.record_wanted() or STATE.mode is None or engine is None:
            return None
        return own_writes.notes_of_save(writes_records(engine), _node_local(engine))
    except Exception:  # an engine whose ranks cannot be read: no record is bound for it (own_writes.rewritten_since)
        return None


def _tell_the_writer(engine: Any, this: own_writes.SaveNotes, given: Callable[[], dict[str, Any]]) -> None:
    """Name the save for every rank alike (``this.save``), and, on a rank whose word the record's writer needs (each
    but the writer; each where every node writes its own), put this rank's word in the job's store (attest.py)."""
    try:
        named = given()
        # with node-local storage each node names a save_dir of its own: the tag and step count name the save
        this.save = attest.save_id(None if this.node else named["save_dir"], named["tag"], int(engine.global_steps))
        if this.kv is not None and (not this.writer or this.node):
            word = attest.word_of(engine, str(STATE.mode), this.save, _built_at_of(engine))
            attest.tell(this.kv, this.budget, _global_rank(engine), word)
    except Exception:  # the writer then hears nothing of this rank: its record is unbound, saying so
        return


def _ranks_unheard(engine: Any, this: own_writes.SaveNotes | None) -> str | None:
    """Why this record may not speak for every rank of the job (attest.unheard); None in a job of one rank, or where
    every other rank told, for this save, the word this rank's own first step gives."""
    world = attest.world()
    if world < 2:
        return None
    if this is None or not this.save:
        return "this save could not be named to the other ranks: their word on their first optimizer step is not known"
    own = attest.word_of(engine, str(STATE.mode), this.save, _built_at_of(engine))
    return attest.unheard(this.kv, this.budget, world_size=world, own_rank=_global_rank(engine), own=own)


def writes_records(engine: Any) -> bool:
    """Whether this process writes ``engine``'s records: only it needs to watch the first step and read a load's
    record (the nets ask it too)."""
    return _writer_rank(engine) == 0


def _writer_rank(engine: Any) -> int:
    """The rank whose 0 writes the record: the one save_checkpoint itself makes ``save_dir`` with. With
    ``checkpoint.use_node_local_storage`` each node saves into a folder of its own, and DeepSpeed uses the local rank
    (``rank = self.local_rank if self.use_node_local_storage() else self.global_rank``: engine.py's
    save_checkpoint @ v0.9.0, v0.12.6, v0.15.2, v0.19.8), so that every node's tag folder gets its record."""
    if _node_local(engine) and isinstance(getattr(engine, "local_rank", None), int):
        return int(engine.local_rank)
    return _global_rank(engine)


def _node_local(engine: Any) -> bool:
    """Whether each node saves into a tag folder of its own (``checkpoint.use_node_local_storage``)."""
    node_local = getattr(engine, "use_node_local_storage", None)
    return callable(node_local) and node_local() is True


def _global_rank(engine: Any) -> int:
    """The engine's global rank (``dist.get_rank()``, set when it was built: engine.py @ v0.9.0..v0.19.8), else
    torch.distributed's, else 0."""
    rank = getattr(engine, "global_rank", None)
    if isinstance(rank, int):
        return rank
    torch = sys.modules.get("torch")
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    return 0


def record(engine: Any, mode: str, folder: str, notes: own_writes.SaveNotes | None = None) -> dict[str, Any]:
    """Record 2 (docs/mark.md): record 1's fields, the model-states file it is bound to, this process's first
    optimizer step as observed, the run's step 0 as far as this process knows it, and the loads behind it."""
    scheduler = getattr(engine, "lr_scheduler", None)
    history = loaded_record.history(engine)
    world = attest.world()
    ranks = {"ranks": world} if world > 1 else {}  # a record with it speaks for each of them or is unbound (#55)
    return record_schema.written({
        "record": RECORD,
        "package": record_data.PACKAGE,
        "version": _package_version(),
        "mode": mode,
        "deepspeed": wrapping.deepspeed_version(),
        "reference": releases.BEHAVIOR_REFERENCE,
        "global_steps": int(engine.global_steps),
        "bound_to": _bound_to(engine, folder, notes),
        "scheduler": _scheduler(scheduler),
        "first_step": step_watch.first_step(engine),
        "step0": _step0(engine, scheduler, mode, history),
        "loads": history.loads if history is not None else [],
        **ranks,
    })


def _package_version() -> str:
    return str(getattr(sys.modules.get(__package__ or ""), "__version__", "unknown"))


def _bound_to(engine: Any, folder: str, notes: own_writes.SaveNotes | None) -> dict[str, Any]:
    """The binding to the model-states file the audit will judge this folder by, read back now. Only DeepSpeed's
    own TorchCheckpointEngine is read back: save_checkpoint ends with a barrier after every rank's torch.save and
    the engine's commit (engine.py @ v0.15.2, v0.19.8), so every rank's file is complete when it returns. Another
    engine (Nebula, a decoupled or fast one) may write later or elsewhere: the record says it is unbound. So does
    one whose files hold other bytes now than this job wrote (``notes``: another job saved the same tag)."""
    checkpoint_engine = getattr(engine, "checkpoint_engine", None)
    kind = type(checkpoint_engine)
    if kind.__name__ != "TorchCheckpointEngine" or not kind.__module__.startswith("deepspeed."):
        return binding.unbound(f"the checkpoint engine is {kind.__module__}.{kind.__qualname__}, which may write "
                                   "after save_checkpoint returns or elsewhere: only DeepSpeed's "
                                   "TorchCheckpointEngine is read back")
    decoupled = getattr(checkpoint_engine, "is_decoupled", None)
    if callable(decoupled) and decoupled() is not False:
        return binding.unbound("the checkpoint engine is decoupled: it writes after save_checkpoint returns")
    unheard = _ranks_unheard(engine, notes)
    if unheard is not None:
        return binding.unbound(unheard)
    own = own_writes.known(notes, folder)
    # a job of one rank wrote every states file in this process: bound from what its own writes left, and checked
    # by a stat of each after the record is written (write_checked)
    found = binding.bound_from_own(own_writes.noted_in(notes, folder)) \
        if attest.world() == 1 and own_writes.all_read(notes, folder) else None
    raced = None
    if found is None:
        found = binding.read_back_known(folder, own, lambda names: own_writes.told_stamps(notes, folder, names),
                                            checked_later=True)  # write_checked stats each bound file
        raced = own_writes.rewritten_since(folder, notes, found.stamps) if found.bound["file"] is not None else None
    if notes is not None:
        notes.read = found
    return binding.unbound(raced) if raced is not None else found.bound


def _scheduler(scheduler: Any) -> dict[str, Any] | None:
    """What the patch did about the scheduler's step 0 (record 1's ``scheduler``), its lrs encoded."""
    if scheduler is None:
        return None
    name = schedules.class_name(scheduler)
    kind = type(scheduler)
    action = _noted_or_unknown(scheduler, name)
    return {"class": name or f"{kind.__module__}.{kind.__qualname__}", "step0": action.what,
            "lrs_before": _encoded(action.lrs_before), "lrs_after": _encoded(action.lrs_after), "why": action.why}


def _noted_or_unknown(scheduler: Any, name: str | None) -> Action:
    action = noted(scheduler)
    if action is None:
        why = "the patch never saw this scheduler" if name else "not one of DeepSpeed's schedulers: the patch leaves it"
        action = Action(UNKNOWN, None, None, why)
    return action


def _encoded(values: list[float] | None) -> list[float | str] | None:
    return None if values is None else [record_data.encode_lr(v) for v in values]


# what the patch says it did that claims step 0 runs as the reference release runs it: checked against the reference's
# formula at the first optimizer step (``_checked``)
_CLAIMS_THE_REFERENCE = (FIXED, AS_RELEASE)


def _step0(engine: Any, scheduler: Any, mode: str, history: loaded_record.LoadedHistory | None) -> dict[str, Any]:
    """The run's step 0 as this process knows it: handed on from the save it loaded when that save had stepped (or
    the load restored the scheduler past step 0), else what this process observed at its first optimizer step (the
    run started here)."""
    if history is not None and (history.global_steps != 0 or history.resumed):
        return history.step0
    version = wrapping.deepspeed_version()
    name = schedules.class_name(scheduler) if scheduler is not None else None
    base = {"deepspeed": version, "scheduler": name, "mode": mode, "patch": _package_version()}
    torch_scheduler = schedules.torch_class(scheduler)
    if torch_scheduler is not None:  # the audit clears a step 0 observed under one (#55, a Trainer's own)
        base["torch_scheduler"] = torch_scheduler
    first = step_watch.first_step(engine)
    if first is None:
        if int(engine.global_steps) == 0 and not attest.stepped_outside_the_engine(engine, scheduler):
            return {"how": record_data.NO_STEP_YET, **base}
        return {"how": record_data.UNOBSERVED, **base,
                "why": "the patch did not watch this engine's first optimizer step (built before it was applied?)"}
    if not first["observed"]:
        return {"how": record_data.UNOBSERVED, **base, "why": first["why"]}
    steps, skipped = first["global_steps"], first["skipped_steps"] or 0
    if steps is None or steps - skipped != 0:
        return {"how": record_data.UNOBSERVED, **base,
                "why": f"the first optimizer step this process saw was at global step {steps}, not the run's step 0 "
                       "(the patch was applied after the engine had stepped)"}
    action = _noted_or_unknown(scheduler, name) if scheduler is not None else None
    expected = attest.expected(scheduler, name, first["last_batch_iteration"], first["lrs"], _built_at(action))
    return {"how": record_data.OBSERVED, **base, "lrs": first["lrs"], "expected": _encoded(expected),
            "patch_did": _checked(action, first["lrs"], expected), "global_steps": steps}


def _built_at_of(engine: Any) -> int | None:
    """The iteration the engine's scheduler was built at, as the patch noted it (``_built_at``)."""
    return _built_at(noted(getattr(engine, "lr_scheduler", None)))


def _built_at(action: Action | None) -> int | None:
    """The iteration a scheduler was built at, where the patch noted a later one than -1 (reference.step_lrs)."""
    return action.built_at if action is not None else None


def _checked(action: Action | None, observed: list[Any], expected: list[float] | None) -> str | None:
    """What the patch did, as the record says it: "fixed" and "as-release" only where the observed lrs are
    the reference's; where they are not, "left" (what the patch meant was not what ran). A class without a formula here
    keeps its word: the audit compares its lrs with the table's reading."""
    if action is None:
        return None
    ran = record_data.decode_lrs(observed)
    if action.what in _CLAIMS_THE_REFERENCE and expected is not None and not (
            ran is not None and record_data.same_lrs(ran, expected)):
        return LEFT
    return action.what


def write(folder: str, data: dict[str, Any], names: list[str] | None = None) -> None:
    """``folder``/accelerate_warmup_patch.json, whole or not at all, and nothing left by a kill (whole_file.py;
    ``names``: the folder's listing where it was just read). Valid JSON always: the lrs are encoded
    (record_data.encode_lr), and anything else non-finite is refused."""
    text = record_data.fitted(data)  # never past the bound the job's load and the audit read
    whole_file.write(folder, FILE_NAME, text, record_data.PARTIAL, names)


def write_checked(folder: str, data: dict[str, Any], notes: own_writes.SaveNotes | None) -> None:
    """``write``, then the binding checked again: where the folder changed while the record was written (another job
    saving the same tag), the record is written again, unbound, saying so (docs/mark.md, "A race"). Where this save's
    binding read the folder (``notes.read``), a stat of each bound file that shows the very file read is that check;
    else, or where one changed, the binding is read again."""
    found = notes.read if notes is not None and isinstance(notes.read, binding.ReadBack) else None
    write(folder, data, found.names if found is not None else None)
    bound = data["bound_to"]
    if bound.get("file") is None:
        return
    if found is not None and found.bound == bound and binding.unchanged(folder, found.identities):
        return
    again, now = binding.read_back(folder)
    raced = own_writes.rewritten_since(folder, notes, now) if again.get("file") is not None else again.get("unbound")
    if raced is None and not binding.same_binding(bound, again):
        raced = f"the tag folder changed while the record was written ({binding.binding_problem(bound, again)})"
    if raced is not None:
        write(folder, {**data, "bound_to": binding.unbound(raced)})


STALE_PARTIAL_S = whole_file.STALE_S  # a temporary file this old was left by a killed process
