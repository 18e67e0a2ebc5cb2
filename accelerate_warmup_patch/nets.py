"""The nets: for a scheduler the constructor's fix (backport.py) did not see, on every road to a step.

- ``deepspeed.initialize`` (accelerate and the HF Trainer build their engines through it too) settles a
  scheduler built before the patch was applied (``prepare_first_step``); ``apply()`` after deepspeed was
  imported settles the live ones once (``settle_live``, the late scan). Nothing of this runs per step.
- ``step`` mode (wrapped in step mode only): the engine's optimizer step (``releases.optimizer_step_method``)
  looks at its scheduler just before the first one, and steps it once only if it is still fresh (user code
  may have stepped it).
- ``DeepSpeedEngine.load_checkpoint``: on a release that starts the class wrong, or in step mode, the
  optimizer's lr is aligned with the scheduler the checkpoint restored when the optimizer's lr was not (as
  observed before and after the load: loads.py).
- For the record (record_writer.py), where a net already sees an engine: a one-shot watch of its first optimizer
  step (step_watch.py), and after a load what the loaded save brings in (loaded_record.py).

A net changes only a scheduler that this release builds otherwise than the reference (``backport.settle``
asks what the build does: installed.py), and only through ``schedules.change``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from . import (
    backport,
    failures,
    installed,
    loaded_record,
    loads,
    log,
    record_writer,
    releases,
    schedules,
    step_watch,
    upstream,
)
from .settings import ENV_MODE, Mode
from .state import STATE


def initialize_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    """``deepspeed.initialize``: the original first (our logic never changes its inputs), then its engine."""
    result = wrapped(*args, **kwargs)
    if STATE.mode is not None:
        prepare_first_step(_first_of(result))
    return result


def _first_of(result: Any) -> Any:
    """The engine of ``deepspeed.initialize``'s tuple, the load path of ``load_checkpoint``'s."""
    return result[0] if isinstance(result, tuple) and result else result


def optimizer_step_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    """DeepSpeedEngine._take_model_step: the optimizer step, at a gradient accumulation boundary, on every road
    (engine.step, accelerate's backward, the Trainer, a PipelineEngine's train_batch)."""
    if STATE.mode == Mode.STEP and instance is not None:
        scheduler = getattr(instance, "lr_scheduler", None)
        if scheduler is not None and id(scheduler) not in STATE.looked.ids:  # after the first step: one set lookup
            step_before_first_optimizer_step(instance, scheduler)
    return wrapped(*args, **kwargs)


def load_checkpoint_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    """``DeepSpeedEngine.load_checkpoint``: after a load that restored the scheduler but not the optimizer's lr,
    align it. What the load restored is observed (loads.py), not read from the arguments: a fork's load may
    restore what upstream's does not."""
    before = _look(instance) if STATE.mode is not None else None
    result = wrapped(*args, **kwargs)
    if _first_of(result) is not None and STATE.mode is not None:
        resumed = False
        try:
            found = _restored(before, instance)
            if found.scheduler:
                record_writer.resumed(instance)  # the record: step 0 of a restored scheduler ran in an earlier process
                resumed = not schedules.is_fresh(instance.lr_scheduler)
            if found.aligns:
                align_after_load(instance)
        except Exception as error:
            failures.report("align", what="aligning the lr after load_checkpoint", error=error,
                            consequence="the lr after this load is left as DeepSpeed set it")
        try:  # after the align: the watch sees the lr the next step really runs at
            if record_writer.writes_records(instance):
                loaded_record.loaded(instance, _first_of(result), result[1] if isinstance(result, tuple) and
                                     len(result) > 1 else None, resumed=resumed)
            else:  # every rank's word on its first step after the load (attest.py)
                step_watch.watch(instance, again=True)
        except Exception as error:
            failures.report("loaded-record", what="reading the record of the loaded checkpoint", error=error,
                            consequence="the records this process writes say step 0's history is unknown")
    return result


def _look(engine: Any) -> loads.Look | BaseException | None:
    """The engine before the load; what went wrong where it cannot be read (the load runs all the same)."""
    try:
        return loads.look(engine)
    except Exception as error:
        return error


def _restored(before: loads.Look | BaseException | None, engine: Any) -> loads.Restored:
    """What the load restored; raises where the engine could not be read before it (nothing is aligned)."""
    if isinstance(before, BaseException):
        raise before
    after = loads.look(engine)
    if before is None or after is None:  # no scheduler before or after: nothing to align, nothing resumed
        return loads.Restored(scheduler=False, optimizer_lr=False)
    return loads.restored(before, after)


def prepare_first_step(engine: Any, when: str = "before the first optimizer step") -> None:
    """Before an engine's first optimizer step: a scheduler built before the patch was applied is settled
    as the constructor's fix would have. Step mode's step waits for the optimizer step itself."""
    try:
        # the lr this engine's first optimizer step really runs at, on every rank: the record's writer's own, and each
        # other rank's word to it (attest.py)
        step_watch.watch(engine)
        scheduler = getattr(engine, "lr_scheduler", None)
        if scheduler is None or id(scheduler) in STATE.netted.ids:  # a scheduler seen before: one set lookup
            return
        STATE.netted.add(scheduler)
        if scheduler not in STATE.settled:
            backport.settle(scheduler, _construction_from_config(engine, scheduler), when)
    except Exception as error:  # the nets run inside the user's initialize and optimizer step: never break them
        failures.report("net", what="preparing the scheduler for the first optimizer step", error=error,
                        consequence="that scheduler runs as this DeepSpeed made it")


def settle_live() -> None:
    """``apply()`` after deepspeed was imported: settle the engines and schedulers built before it, once."""
    import gc

    lr_schedules = sys.modules[schedules.SCHEDULES_MODULE]
    engine_types = _with_subclasses([sys.modules["deepspeed.runtime.engine"].DeepSpeedEngine])
    scheduler_types = _with_subclasses([c for c in (getattr(lr_schedules, name, None) for name in schedules.KNOWN)
                                        if isinstance(c, type)])
    # every instance of a class defined in Python refers to its class (Python 3.9+): asking the collector
    # who refers to these classes finds them in C (measured: 0.17 s, against 0.39 s for a Python loop over
    # the 385k objects of gc.get_objects() with deepspeed, accelerate and transformers imported)
    found = gc.get_referrers(*engine_types, *scheduler_types)
    engines = [obj for obj in found if type(obj) in engine_types]  # type(), never a proxy's __class__
    schedulers = [obj for obj in found if type(obj) in scheduler_types]
    when = "when the patch was applied (built before it)"
    for engine in engines:
        prepare_first_step(engine, when)
    for scheduler in schedulers:
        if scheduler not in STATE.settled:
            backport.settle(scheduler, None, when)


def _with_subclasses(classes: list[type]) -> set[type]:
    found: set[type] = set()
    pending = list(classes)
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.add(cls)
            pending.extend(cls.__subclasses__())
    return found


def _construction_from_config(engine: Any, scheduler: Any) -> backport.Construction | None:
    """What the constructor saw, for a scheduler built from the engine's config before the patch.

    Only where the release's constructor leaves the optimizer's lr: the groups still hold the lrs
    they were built with. Elsewhere (a client scheduler, or a release that overwrote them) unknown.
    """
    name = schedules.class_name(scheduler)
    if name is None or getattr(engine, "client_lr_scheduler", True) or not callable(getattr(engine, "scheduler_params",
                                                                                              None)):
        return None
    untouched = installed.lacks(upstream.START, name)
    lrs = tuple(g["lr"] for g in scheduler.optimizer.param_groups) if untouched else None
    return backport.Construction(lrs, (engine.scheduler_params() or {}).get("warmup_max_lr") is not None)


def step_before_first_optimizer_step(engine: Any, scheduler: Any) -> None:
    """Step mode, just before the first optimizer step of ``engine`` with ``scheduler``: look first. Only a
    scheduler that is still fresh is stepped, once; one that user code (or a checkpoint) has stepped is left."""
    try:
        STATE.looked.add(scheduler)
        prepare_first_step(engine)  # built before the patch, on a road no net saw: settled as every net settles
        _step_once(scheduler)
    except Exception as error:  # runs inside the user's optimizer step: never break it
        failures.report("step-net", what="stepping the scheduler before the first optimizer step", error=error,
                        consequence="that scheduler runs as in mode reset")


def _step_once(scheduler: Any) -> None:
    name = schedules.class_name(scheduler)
    if name is None:
        return  # not DeepSpeed's: left alone
    if not schedules.is_fresh(scheduler):
        log.info("%s: not stepped before the first optimizer step: it has stepped already (last_batch_iteration "
                 "%s: user code stepped it, or a checkpoint restored it); step mode steps only a fresh scheduler",
                 name, scheduler.last_batch_iteration)
        return
    changed = schedules.change(scheduler, key="step", what=f"stepping {name} once (mode=step)", action=scheduler.step,
                               consequence="that scheduler runs as in mode reset (this warning is not repeated)",
                               all_groups=True)
    if changed is not None:
        STATE.fixes += 1
        _mark_stepped(scheduler, changed.moved)
        log.info("%s: stepped once before the first optimizer step: %s (mode=step: step k uses lr(k))", name,
                 schedules.said(changed.moved))


def _mark_stepped(scheduler: Any, changes: list[schedules.Moved]) -> None:
    """The record: step 0 runs at the lrs of one step; before, at what the release would have used (the start lr
    that settle changed, if it did)."""
    settled = record_writer.noted(scheduler)
    before = settled.lrs_before if settled is not None and settled.what == record_writer.FIXED else None
    record_writer.note(scheduler, record_writer.Action(
        record_writer.FIXED, before or [old for _, old, _ in changes], [new for *_, new in changes],
        "step mode stepped it once before the first optimizer step: step k runs at the schedule's lr(k)"))


def align_after_load(engine: Any) -> None:
    """After a checkpoint load that did not restore the optimizer's lr, each group holds the lr its
    scheduler says, as in an uninterrupted run: on a release that builds the class wrong (the fresh
    optimizer holds a wrong lr), and in step mode; the reference itself does not align in reset mode.

    Where the load restored the optimizer's lr (it replaced the groups or changed their lrs), or did not restore
    the scheduler, the caller never gets here: the lr is the checkpoint's, or the one the run held, as on the
    reference.
    """
    scheduler: Any = getattr(engine, "lr_scheduler", None)
    name = schedules.class_name(scheduler) if scheduler is not None else None
    if name is None or not (installed.lacks(upstream.START, name) or STATE.mode == Mode.STEP):
        return
    groups = scheduler.optimizer.param_groups

    def align() -> None:
        targets = scheduler.get_lr()
        if [schedules.lr_value(g["lr"]) for g in groups] != [schedules.lr_value(t) for t in targets]:
            schedules.write(groups, targets)

    changed = schedules.change(scheduler, key="align", what="aligning the lr after load_checkpoint", action=align,
                               consequence="the lr after this load is left as DeepSpeed set it")
    changes = changed.moved if changed is not None else []
    if changes and STATE.mode == Mode.WARN:  # a dry run: nothing was left changed
        STATE.would_fix += 1
        log.warn_job_once(f"warn-align:{id(scheduler)}", "%s: after load_checkpoint the next optimizer step will run "
                          "at lr %s (the optimizer's lr was not restored from the checkpoint), as DeepSpeed %s runs "
                          "it: %s; %s=reset fixes it", name, schedules.fmt([old for _, old, _ in changes]),
                          releases.BEHAVIOR_REFERENCE, schedules.fmt([new for *_, new in changes]), ENV_MODE)
    elif changes:
        STATE.fixes += 1
        log.info("%s: %s after load_checkpoint (the scheduler resumed at iteration %s; the optimizer's lr "
                 "was not restored from the checkpoint)", name, schedules.said(changes), scheduler.last_batch_iteration)
