"""THE FIX: the reference release's behaviour where an older build differs, done where upstream did it.

Each backported change is a unit of ``upstream/`` (its PR, its release, and its backport: what the reference does);
this module runs them inside the build's own scheduler methods, safely. Whether the installed build lacks a change
is what the build was seen to do (``installed.lacks``: probe.py, the table where the probe cannot run). targets.py
wraps, on a build that lacks a change, the scheduler method it changed upstream, with ``wrapper``:

- ``__init__``: the original first, then ``settle``: the constructor's changes the build lacks (each unit's
  ``AtConstruction``: an unknown warmup_type, #8151; the default peak, #8171; the start lr last, #6597 and #7969),
  in one ``schedules.change``, and what they did recorded and said once;
- any other method (``get_lr``, ``get_lr_ratio``): the first change the build lacks that answers there (each unit's
  ``Answer``: before the first step, #6597 and #7969; past the warmup, #8142), else the build's own method.

nets.py calls ``settle`` too, for a scheduler built before the patch was applied. Every lr is written the way the
running release writes it (``schedules.write``), every change goes through ``schedules.change``, and every failure
through ``failures.report``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from . import failures, installed, log, record_writer, reference, releases, schedules, upstream, wrapping
from .settings import ENV_MODE, Mode
from .state import STATE
from .upstream.unit import (
    BEFORE_START,
    Answer,
    AtConstruction,
    Construction as Construction,  # what a constructor saw: nets.py makes one too
    Outcome,
)


class _Building:
    """A scheduler the build's own constructor has just built, as each unit's constructor backport is handed it
    (``upstream.unit.Building``): what it may read, and the only ways it may write or speak."""

    def __init__(self, scheduler: Any, name: str, version: str, construction: Construction | None,
                 peak_known: bool) -> None:
        self.scheduler, self.name, self.version = scheduler, name, version
        self.construction, self.peak_known = construction, peak_known

    @property
    def warn_mode(self) -> bool:
        return STATE.mode == Mode.WARN

    @property
    def dry(self) -> bool:
        return bool(getattr(STATE.dry, "on", False))

    def write(self, lrs: list[Any]) -> list[Any]:
        kinds = self.construction.group_lrs if self.construction is not None else None
        return schedules.write(self.scheduler.optimizer.param_groups, lrs, kinds)

    def already_said(self, on: bool) -> AbstractContextManager[None]:
        return STATE.already_said(on)

    def start(self) -> releases.Start | None:
        return installed.start(self.name)

    def max_lr_default(self) -> releases.MaxLrDefault:
        return installed.max_lr_default()

    def fresh(self) -> bool:
        return schedules.is_fresh(self.scheduler)

    def group_lrs(self) -> list[Any]:
        return schedules.lr_copies(self.scheduler.optimizer.param_groups)

    def value(self, lr: Any) -> float:
        return schedules.lr_value(lr)

    def fmt(self, lrs: list[Any]) -> str:
        return schedules.fmt(lrs)

    def warn_once(self, key: str, message: str, *args: object) -> None:
        log.warn_once(key, message, *args)


# The reference constructor's behaviour, after this release's ----------------------------------------------------

def settle(scheduler: Any, construction: Construction | None, when: str, peak_known: bool = True,
           at_construction: bool = False) -> None:
    """A fresh scheduler that this release builds otherwise than the reference: build-time behaviour of the
    reference, once. Anything else is left exactly as the release made it (one built before the patch and
    resumed without a step is named in a warning: ``_name_unsettled``)."""
    try:
        _settle(scheduler, construction, when, peak_known, at_construction)
    except Exception as error:  # runs inside the user's constructor: never break it
        failures.report("settle", what=f"deciding how to start {type(scheduler).__name__} as DeepSpeed "
                        f"{releases.BEHAVIOR_REFERENCE} starts it", error=error,
                        consequence="that scheduler runs exactly as unpatched (this warning is not repeated)")


def _settle(scheduler: Any, construction: Construction | None, when: str, peak_known: bool,
            at_construction: bool) -> None:
    name = schedules.class_name(scheduler)
    version = wrapping.deepspeed_version()
    if name is None:
        return
    later = _later_answers(scheduler, name, version) if at_construction and STATE.mode == Mode.WARN else []
    if not installed.built_wrong(name):  # nothing to change: the record says how the patch found it
        if later:  # but reset answers a later step otherwise
            STATE.would_fix += 1
            _warn_instead(scheduler, name, version, [], [], later)
        mid_way = at_construction and not schedules.is_fresh(scheduler)
        record_writer.note(scheduler, _built_mid_way(scheduler, name) if mid_way else
                           _as_release(scheduler, name, version), first_only=True)
        return
    STATE.settled.add(scheduler)  # decided: a later net says nothing more about it
    if not schedules.is_fresh(scheduler):
        if at_construction:  # built at a later iteration: the reference's constructor writes no lr, the rest it does
            record_writer.note(scheduler, _built_mid_way(scheduler, name))
            _build_mid_way(_Building(scheduler, name, version, construction, peak_known), later)
        else:
            record_writer.note(scheduler, record_writer.earlier_process(
                scheduler, "it had stepped or was restored when the patch saw it"))
            _name_unsettled(scheduler, name, version)
        return
    warn = STATE.mode == Mode.WARN  # the same decisions and the same change, undone (schedules.change)
    building = _Building(scheduler, name, version, construction, peak_known)
    changed = schedules.change(
        scheduler, key="starting", what=f"starting {name} where DeepSpeed {releases.BEHAVIOR_REFERENCE} starts it",
        action=lambda: _build_as_reference(building),
        consequence="that scheduler runs exactly as unpatched (this warning is not repeated)", all_groups=True)
    if changed is None:  # it failed, was undone and reported
        record_writer.note(scheduler, record_writer.Action(
            record_writer.LEFT, record_writer.group_lrs(scheduler), None, "the patch failed to start "
            f"it as DeepSpeed {releases.BEHAVIOR_REFERENCE} does and left it as DeepSpeed {version} made it"))
        return
    changes = changed.moved
    moved = [(i, old, new) for i, old, new in changes if old != new]
    done = [outcome for outcome in changed.result if outcome.changed]
    left = [outcome for outcome in changed.result if not outcome.changed]  # as the release set it, and why
    before, after = [old for _, old, _ in changes], [new for *_, new in changes]
    if warn and (moved or done or later):
        STATE.would_fix += 1
        _warn_instead(scheduler, name, version, changes, done + left, later)
        # why the release differs: its start where reset would move or build something, else the later steps'
        because = _why(name, version) if moved or done else "; ".join(later)
        record_writer.note(scheduler, record_writer.Action(
            record_writer.WARNED, before, after, f"warn mode: reset would have set {_what(moved, done, later)} as "
            f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does ({because}); nothing was changed"))
        return
    for outcome in left:
        if outcome.left_line is not None:
            log.warn_once(outcome.left_line.key, outcome.left_line.message, *outcome.left_line.args)
    if moved:
        log.info("%s: %s %s (%s)", name, schedules.said(moved), when, _why(name, version))
    if moved or done:
        STATE.fixes += 1
        record_writer.note(scheduler, record_writer.Action(
            record_writer.FIXED, before, after, f"the patch set {_what(moved, done)} as "
            f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does ({_why(name, version)})"))
    elif left:
        record_writer.note(scheduler, record_writer.Action(record_writer.LEFT, after, None, "; ".join(
            f"{outcome.part} is left as DeepSpeed {version} set it ({outcome.why_left})" for outcome in left)))
    else:
        record_writer.note(scheduler, record_writer.Action(
            record_writer.AS_RELEASE, after, after, f"its start already agreed with DeepSpeed "
            f"{releases.BEHAVIOR_REFERENCE}'s: nothing to change"))


def _built_mid_way(scheduler: Any, name: str) -> record_writer.Action:
    """The record's word for a scheduler built at a later iteration: its start is the reference's, which writes no lr
    there (the record checks it against the reference's model at the first step: record_writer._expected)."""
    now, iteration = record_writer.group_lrs(scheduler), scheduler.last_batch_iteration
    return record_writer.Action(
        record_writer.AS_RELEASE, now, now, f"built at iteration {iteration}: DeepSpeed "
        f"{releases.BEHAVIOR_REFERENCE} writes no lr there either, so its step 0 runs at the optimizer's lr",
        built_at=iteration if isinstance(iteration, int) else None)


def _build_mid_way(building: _Building, later: list[str]) -> None:
    """A scheduler built at a later iteration (``last_batch_iteration`` given): the reference's constructor writes no
    lr there, so step 0 runs at the optimizer's lr on it too, but the rest of it runs (the default peak, an unknown
    warmup_type): those the build lacks, each said once (in warn mode, the one line says what reset would set)."""
    scheduler, name = building.scheduler, building.name
    changed = schedules.change(
        scheduler, key="starting", what=f"building {name} as DeepSpeed {releases.BEHAVIOR_REFERENCE} builds it",
        action=lambda: _build_as_reference(building, start=False),
        consequence="that scheduler runs exactly as unpatched (this warning is not repeated)")
    if changed is None:
        return
    done = [outcome for outcome in changed.result if outcome.changed]
    if STATE.mode == Mode.WARN and (done or later):
        STATE.would_fix += 1
        _warn_instead(scheduler, name, building.version, [], changed.result, later)
        return
    for outcome in changed.result:
        if not outcome.changed and outcome.left_line is not None:
            log.warn_once(outcome.left_line.key, outcome.left_line.message, *outcome.left_line.args)
    if done:
        STATE.fixes += 1


def _build_as_reference(building: _Building, start: bool = True) -> list[Outcome]:
    """What the reference's constructor does after this release's: each constructor change the build lacks, in the
    reference's order (``upstream.at_construction``; without the start lr's write where ``start`` is False); what
    each did beyond the groups' lrs."""
    outcomes = []
    for change in upstream.at_construction(building.name):
        if not start and isinstance(change.backport, AtConstruction) and change.backport.last:
            continue
        if isinstance(change.backport, AtConstruction) and installed.lacks(change.key, building.name):
            outcome = change.backport.build(building)
            if outcome is not None:
                outcomes.append(outcome)
    return outcomes


def _what(moved: list[schedules.Moved], done: list[Outcome], later: list[str] | None = None) -> str:
    """What reset mode changes of a scheduler, for the record: its start lr, its default peak lr, later steps' lrs."""
    return " and ".join((["its start lr"] if moved else []) + [outcome.part for outcome in done] +
                        (["the lrs of later steps"] if later else []))


def _as_release(scheduler: Any, name: str, version: str) -> record_writer.Action:
    """A scheduler of a class this release builds as the reference does, as the patch first found it."""
    if not schedules.is_fresh(scheduler):
        return record_writer.earlier_process(scheduler, "it had stepped or was restored when the patch saw it")
    now = record_writer.group_lrs(scheduler)
    return record_writer.Action(record_writer.AS_RELEASE, now, now, f"DeepSpeed {version} starts {name} as "
                                f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does: nothing to change")


def _later_answers(scheduler: Any, name: str, version: str) -> list[str]:
    """Warn mode's words for what reset's answers would change of this scheduler at later steps (each ``Answer``
    whose change the build lacks and that says where it differs: #8142 past the warmup)."""
    owner = releases.INHERITS.get(name, name)
    said = []
    for change in upstream.CHANGES:
        backport = change.backport
        if isinstance(backport, Answer) and backport.warns is not None and change.scheduler == owner and \
                installed.lacks(change.key, name):
            words = backport.warns(scheduler, version)
            if words:
                said.append(words)
    return said


def _warn_instead(scheduler: Any, name: str, version: str, changes: list[schedules.Moved],
                  outcomes: list[Outcome], later: list[str]) -> None:
    """Warn mode: one line per scheduler, on rank 0, with what reset mode would change and nothing changed."""
    parts = []
    if any(old != new for _, old, new in changes):
        parts.append(f"optimizer step 0 will run at lr {_lrs([old for _, old, _ in changes])} ({_why(name, version)}), "
                     f"DeepSpeed {releases.BEHAVIOR_REFERENCE} runs it at {_lrs([new for *_, new in changes])}")
    parts += [outcome.warning for outcome in outcomes]  # what else it would set, or leaves: said here, not again
    parts += later
    log.warn_job_once(f"warn:{id(scheduler)}", "%s: %s; %s=reset fixes it", name, "; ".join(parts), ENV_MODE)


def _lrs(values: list[float]) -> str:
    """One group's lr as a number, several as a list."""
    return repr(values[0]) if len(values) == 1 else schedules.fmt(values)


def _name_unsettled(scheduler: Any, name: str, version: str) -> None:
    """A scheduler built before the patch and set to a later iteration without a step, on a release that
    starts it wrong: the reference writes the start lr for one built fresh and then resumed, and leaves
    the lr of one built at that iteration. Both look the same now, so its lr is left and the user is told."""
    optimizer = scheduler.optimizer
    if not installed.lacks(upstream.START, name) or getattr(scheduler, "_last_lr", None) is not None or \
            getattr(optimizer, "state", None):
        return  # it has stepped, or its optimizer has (or holds restored state): its lr is not the build's
    iteration = scheduler.last_batch_iteration
    left = schedules.fmt([g["lr"] for g in optimizer.param_groups])
    start = schedules.fmt(reference.lr_before_start(scheduler, name))
    STATE.not_fixed.append(f"{name} at iteration {iteration}: built before the patch was applied and "
                           f"resumed without a step; its lr is left at {left}")
    log.warn_once(f"unsettled:{id(scheduler)}", "%s was built before the patch was applied and set to iteration %s "
                  "without a step (load_state_dict, or last_batch_iteration given to it): its lr is left at %s, "
                  "as DeepSpeed %s set it. DeepSpeed %s starts one built fresh and then resumed at %s, and leaves "
                  "one built at that iteration as it is; the patch cannot tell which this was. Import "
                  "accelerate_warmup_patch (or set ACCELERATE_WARMUP_PATCH) before building it",
                  name, iteration, left, version, releases.BEHAVIOR_REFERENCE, start)


def _why(name: str, version: str) -> str:
    start = installed.start(name)
    if start is None or start is releases.Start.SETS_EVERY_GROUP:
        return f"DeepSpeed {version}"
    return f"DeepSpeed {version} {start.value}"


# The wrappers of the scheduler methods that upstream changed -----------------------------------

def _constructor(original: Callable[..., Any], version: str) -> Callable[..., Any]:
    """The wrapper of one scheduler class's ``__init__``: the original first, then ``settle``."""
    arguments = wrapping.arguments_reader(original, defaults=False)  # a peak given, not a default's

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if STATE.mode is None or instance is None:
            return wrapped(*args, **kwargs)
        captured = _capture(arguments, instance, args, kwargs)
        # The original has its say first: arguments it refuses raise its own error, and nothing of ours is said.
        result = wrapped(*args, **kwargs)
        construction = captured if isinstance(captured, Construction) else None
        if isinstance(captured, Exception):  # the original took what we could not read: our failure
            failures.report("capture", what=f"reading the arguments of {type(instance).__name__}", error=captured,
                            consequence="its first-step lr is still fixed; its default peak lr is left as this "
                                        "DeepSpeed sets it")
        # a failed capture has said that the default peak is left alone: no second warning about it
        settle(instance, construction, "at construction", peak_known=construction is not None, at_construction=True)
        return result

    return wrapper


def _capture(arguments: Callable[[Any, Any, Any], dict[str, Any]], instance: Any, args: Any,
             kwargs: Any) -> Construction | Exception:
    """The groups' lrs and whether a peak was given, read before the original __init__ runs (it may change
    them); what went wrong instead, to be reported only if the original accepts these arguments."""
    try:
        given = arguments(instance, args, kwargs)
        groups = schedules.torch_optimizer(given["optimizer"]).param_groups
        return Construction(tuple(schedules.lr_copies(groups)), given.get("warmup_max_lr") is not None)
    except Exception as error:
        return error


def _answering(scheduler: str, method: str, version: str) -> Callable[..., Any]:
    """The wrapper of ``scheduler.method`` (no constructor), called on every step. Which of its changes the build
    lacks is decided once, here; then the first of them whose position holds (before the first step, past the
    warmup: tested here, with no call on a steady step) answers, in release order, else the original."""
    answers = [(change.backport.where == BEFORE_START, change.backport)
               for change in upstream.answers(scheduler, method)
               if isinstance(change.backport, Answer) and installed.lacks(change.key, scheduler)]
    said = {answer.when for _, answer in answers}
    when = said.pop() if len(said) == 1 else ""  # the words a failure adds, where every answer here says the same

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        mode = STATE.mode  # passes through unarmed, and in warn mode outside its dry run (STATE.dry)
        if mode is None or (mode == Mode.WARN and not getattr(STATE.dry, "on", False)) or instance is None or \
                args or kwargs:
            return wrapped(*args, **kwargs)  # it takes no arguments: given some, the original says so itself
        answer, value, found = None, None, False
        try:
            iteration = instance.last_batch_iteration
            for before_start, answer in answers:
                if iteration < 0 if before_start else iteration >= instance.warmup_num_steps:
                    value, found = answer.answer(instance), True
                    break
        except Exception as error:
            failures.report(method, what=f"{method}() of {type(instance).__name__}{when}", error=error,
                            consequence=f"{method}() returns what this DeepSpeed returns")
            return wrapped()
        if not found or answer is None:
            return wrapped()
        # The release's own method logs a warning before the first step, as the reference's does: reset and step mode
        # let it say it where the reference does. Warn mode's dry run is no call of the user's: it adds no line.
        if answer.original_too and mode != Mode.WARN and not getattr(STATE.said, "on", False):
            wrapped()
        return value

    return wrapper


def wrapper(scheduler: str, method: str, original: Callable[..., Any], version: str) -> Callable[..., Any]:
    """The wrapper targets.py puts on ``scheduler.method`` (``original``: the class's own) on this release."""
    if method == "__init__":
        return _constructor(original, version)
    return _answering(scheduler, method, version)
