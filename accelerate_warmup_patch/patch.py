"""The wrapt wrappers, and the one routine that starts a scheduler where the newest DeepSpeed starts it.

Loaded only once deepspeed or accelerate is imported (see ``bootstrap``): wrapt costs ~50 ms.

- The fix, where upstream made it (PR #6597): the constructors of ``WarmupLR`` (which
  ``WarmupDecayLR`` and user subclasses run through ``super().__init__``) and ``WarmupCosineLR``, on
  the releases where the guard table says they start differently from the newest release. Right
  after the original ``__init__`` returns at ``last_batch_iteration == -1``, every param group
  starts where the newest release starts it, however and wherever the scheduler was built.
- The nets: ``deepspeed.initialize`` and accelerate's ``DeepSpeedEngineWrapper.backward`` run the
  same routine for a scheduler built before the patch was applied, and are where ``step`` mode
  steps a fresh scheduler once before the first optimizer step.
- ``DeepSpeedEngine.load_checkpoint``: when the optimizer's lr was not restored, it is aligned with
  the scheduler the checkpoint restored.

Every failure goes through ``failures.report``: it restores what it changed and warns, or raises in
strict mode.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import wrapt

from . import failures, log, releases, schedules
from .settings import Mode


@dataclass
class _Patched:
    owner: Any  # a module or a class
    name: str
    original: Any
    wrapper: Any

    @property
    def label(self) -> str:
        """``deepspeed.initialize``, ``deepspeed.runtime.engine.DeepSpeedEngine.load_checkpoint``."""
        if isinstance(self.owner, ModuleType):
            return f"{self.owner.__name__}.{self.name}"
        return f"{self.owner.__module__}.{self.owner.__qualname__}.{self.name}"

    def in_place(self) -> bool:
        """False once the owner no longer holds our wrapper (a reload, someone else's setattr)."""
        current = getattr(self.owner, self.name, None) if isinstance(self.owner, ModuleType) \
            else vars(self.owner).get(self.name)
        return current is self.wrapper


@dataclass
class _State:
    mode: str = Mode.RESET
    active: bool = False
    patched: list[_Patched] = field(default_factory=list)
    deepspeed_version: str | None = None
    accelerate_version: str | None = None
    fixes: int = 0


state = _State()
_started: weakref.WeakSet[Any] = weakref.WeakSet()  # schedulers whose start the routine has settled
# the ids of the live schedulers a net has seen (step mode steps each once); an id leaves when its
# scheduler dies, before it can be reused. A set of ints: the check runs on every backward.
_netted: set[int] = set()


# Patching --------------------------------------------------------------------------------

def _wrap(owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    for patched in list(state.patched):
        if patched.owner is owner and patched.name == name:
            if patched.in_place():
                return  # one wrap, however often apply() runs
            state.patched.remove(patched)  # stale (the owner was reloaded): wrap what is there now
    original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    # no `enabled=` callable: it costs a Python call per call; the wrappers read state.active
    function_wrapper = wrapt.FunctionWrapper(original, wrapper)
    setattr(owner, name, function_wrapper)
    state.patched.append(_Patched(owner, name, original, function_wrapper))


def unpatch_since(mark: int) -> None:
    """Put back every original wrapped after the first ``mark`` records, newest first."""
    while len(state.patched) > mark:
        patched = state.patched.pop()
        if patched.in_place():
            setattr(patched.owner, patched.name, patched.original)
        elif vars(patched.owner).get(patched.name) is not None and isinstance(patched.owner, type):
            log.warn_once(f"stacked:{patched.label}", "%s was wrapped again after this patch; leaving that "
                          "wrapper in place with this patch disabled", patched.label)


def unpatch_all() -> None:
    """Put every original back; a wrapper someone stacked on ours stays, with ours disabled."""
    state.active = False
    unpatch_since(0)


def in_place() -> list[str]:
    """The labels of the wrappers that are in place now."""
    return [p.label for p in state.patched if p.in_place()]


def patch_deepspeed(module: ModuleType) -> None:
    """Everything on DeepSpeed's side, decided by its release: below the table's floor, nothing."""
    version = str(getattr(module, "__version__", "0"))
    state.deepspeed_version = version
    level = releases.deepspeed_support(version)
    if level is releases.Support.UNSUPPORTED:
        log.warn_once("ds-floor", "DeepSpeed %s is older than %s, the oldest release this patch knows; "
                      "nothing is patched", version, releases.DEEPSPEED_FLOOR)
        return
    if level is releases.Support.UNTESTED:
        log.warn_once("ds-untested", "DeepSpeed %s is newer than %s, the newest release this patch was "
                      "tested on; it acts only where it sees a scheduler start at the wrong lr",
                      version, releases.NEWEST_DEEPSPEED)
    lr_schedules = sys.modules[schedules.SCHEDULES_MODULE]  # deepspeed/__init__.py imported both
    engine_class = sys.modules["deepspeed.runtime.engine"].DeepSpeedEngine
    for name in releases.constructors_to_fix(version):
        cls = getattr(lr_schedules, name)
        _wrap(cls, "__init__", _constructor_wrapper(inspect.signature(vars(cls)["__init__"])))
    _wrap(module, "initialize", _initialize_wrapper)
    _wrap(engine_class, "load_checkpoint", _load_checkpoint_wrapper(
        inspect.signature(vars(engine_class)["load_checkpoint"])))
    state.active = True


def patch_accelerate(module: ModuleType) -> None:
    """accelerate's backward, a net for DeepSpeed engines: only where DeepSpeed itself is patched."""
    if releases.deepspeed_support(deepspeed_version()) is releases.Support.UNSUPPORTED:
        return  # deepspeed's own hook says why, once
    version = str(getattr(sys.modules.get("accelerate"), "__version__", "0"))
    state.accelerate_version = version
    level = releases.accelerate_support(version)
    if level is releases.Support.UNSUPPORTED:
        log.warn_once("acc-floor", "accelerate %s is older than %s, the oldest release this patch knows; "
                      "its DeepSpeedEngineWrapper.backward is not patched (DeepSpeed's side still is)",
                      version, releases.ACCELERATE_FLOOR)
        return
    engine_wrapper = getattr(module, "DeepSpeedEngineWrapper", None)
    if engine_wrapper is None or "backward" not in vars(engine_wrapper):
        raise LookupError(f"accelerate {version} has no DeepSpeedEngineWrapper.backward")
    if level is releases.Support.UNTESTED:
        log.warn_once("acc-untested", "accelerate %s is newer than %s, the newest release this patch was "
                      "tested on", version, releases.NEWEST_ACCELERATE)
    _wrap(engine_wrapper, "backward", _backward_wrapper)
    state.active = True


# Wrappers --------------------------------------------------------------------------------

def _constructor_wrapper(signature: inspect.Signature) -> Callable[..., Any]:
    """The wrapper of one scheduler class's ``__init__``; ``signature`` is the original's."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if not state.active or instance is None or state.mode == Mode.OFF:
            return wrapped(*args, **kwargs)
        construction = _capture(signature, instance, args, kwargs)
        result = wrapped(*args, **kwargs)
        name = schedules.class_name(instance)
        if name is not None and schedules.is_fresh(instance) and instance not in _started:
            # a failed capture has said that the default peak is left alone: no second warning about it
            _start_guarded(instance, name, construction, "at construction", peak=construction is not None)
        return result

    return wrapper


def _capture(signature: inspect.Signature, instance: Any, args: Any, kwargs: Any) -> schedules.Construction | None:
    """The groups' lrs and whether a peak was given, read before the original __init__ runs."""
    try:
        bound = signature.bind(instance, *args, **kwargs)
        groups = _torch_optimizer(bound.arguments["optimizer"]).param_groups
        return schedules.Construction(tuple(_lr_copies(groups)), bound.arguments.get("warmup_max_lr") is not None)
    except Exception as error:
        failures.report("capture", f"reading the arguments of {type(instance).__name__}", error,
                        "its first-step lr is still fixed; its default peak lr is left as this DeepSpeed sets it")
        return None


def _torch_optimizer(optimizer: Any) -> Any:
    """What DeepSpeed's schedulers unwrap to (get_torch_optimizer): the torch optimizer itself."""
    import torch

    if not isinstance(optimizer, torch.optim.Optimizer) and isinstance(getattr(optimizer, "optimizer", None),
                                                                       torch.optim.Optimizer):
        return optimizer.optimizer
    return optimizer


def _initialize_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # the original first: our logic never changes its inputs
    if state.active:
        prepare_first_step(_first_of(result))
    return result


def _first_of(result: Any) -> Any:
    """The engine of ``deepspeed.initialize``'s tuple, the load path of ``load_checkpoint``'s."""
    return result[0] if isinstance(result, tuple) and result else result


def _backward_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    if state.active:
        prepare_first_step(getattr(instance, "engine", None))
    return wrapped(*args, **kwargs)


def _load_checkpoint_wrapper(signature: inspect.Signature) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        result = wrapped(*args, **kwargs)
        if _first_of(result) is not None and state.active and state.mode != Mode.OFF:
            try:
                if not _optimizer_lr_restored(signature, instance, args, kwargs):
                    align_after_load(instance)
            except Exception as error:
                failures.report("align", "aligning the lr after load_checkpoint", error,
                                "the lr after this load is left as DeepSpeed set it")
        return result

    return wrapper


def _optimizer_lr_restored(signature: inspect.Signature, engine: Any, args: Any, kwargs: Any) -> bool:
    arguments = signature.bind(engine, *args, **kwargs)
    arguments.apply_defaults()
    return bool(arguments.arguments["load_optimizer_states"]) and not arguments.arguments.get("load_module_only")


# The routine -----------------------------------------------------------------------------

def prepare_first_step(engine: Any) -> None:
    """Before an engine's first optimizer step: its scheduler starts where the newest release starts it
    (if the constructor's fix did not run: a scheduler built before the patch), and in ``step``
    mode it is stepped once."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is None or id(scheduler) in _netted:
        return
    try:
        weakref.finalize(scheduler, _netted.discard, id(scheduler))
    except TypeError:
        return  # not weak-referenceable, so not a DeepSpeed scheduler either
    _netted.add(id(scheduler))
    name = schedules.class_name(scheduler)
    if name is None or not schedules.is_fresh(scheduler) or state.mode == Mode.OFF:
        return  # not DeepSpeed's, or it has stepped (a resumed run): left alone
    if scheduler not in _started:
        _start_guarded(scheduler, name, _construction_from_config(engine, scheduler, name),
                       "before the first optimizer step")
    if state.mode == Mode.STEP:
        _step_once_guarded(scheduler, name)


def _construction_from_config(engine: Any, scheduler: Any, name: str) -> schedules.Construction | None:
    """What the constructor saw, for a scheduler built from the engine's config before the patch.

    Only where the release's constructor leaves the optimizer's lr: the groups still hold the lrs
    they were built with. Elsewhere (a client scheduler, or a release that overwrote them) unknown.
    """
    if getattr(engine, "client_lr_scheduler", True) or not callable(getattr(engine, "scheduler_params", None)):
        return None
    fact = releases.start_fact(name, deepspeed_version())
    untouched = fact is not None and fact.start is releases.Start.LEAVES_OPTIMIZER_LR
    lrs = tuple(g["lr"] for g in scheduler.optimizer.param_groups) if untouched else None
    return schedules.Construction(lrs, (engine.scheduler_params() or {}).get("warmup_max_lr") is not None)


def _start_guarded(scheduler: Any, name: str, construction: schedules.Construction | None, when: str,
                   peak: bool = True) -> None:
    with contextlib.suppress(TypeError):  # a subclass without __weakref__ is simply not remembered
        _started.add(scheduler)  # settled, whatever happens below: one try, one warning at most
    try:
        _start(scheduler, name, construction, when, peak)
    except Exception as error:
        failures.report("start", f"starting {name} where DeepSpeed {releases.BEHAVIOR_REFERENCE} starts it", error,
                        "that scheduler runs exactly as unpatched (this warning is not repeated)")


def _start(scheduler: Any, name: str, construction: schedules.Construction | None, when: str, peak: bool) -> None:
    version = deepspeed_version()
    groups = scheduler.optimizer.param_groups
    saved = _snapshot(scheduler, groups)
    try:
        peak_changed = peak and _backport_default_peak(scheduler, name, construction, version)
        before = [schedules.lr_value(g["lr"]) for g in groups]
        for group, target in zip(groups, schedules.newest_start_lrs(scheduler, name)):
            if schedules.lr_value(group["lr"]) != schedules.lr_value(target):
                schedules.set_group_lr(group, target)
        after = [schedules.lr_value(g["lr"]) for g in groups]
    except BaseException:
        _restore(scheduler, groups, saved)
        raise
    changes = [f"group {i} lr {old!r} -> {new!r}" for i, (old, new) in enumerate(zip(before, after)) if old != new]
    if changes:
        scheduler._last_lr = [g["lr"] for g in groups]  # what the newest release's constructor leaves
        log.info("%s: %s %s (%s)", name, "; ".join(changes), when, _why(name, version))
    if changes or peak_changed:
        state.fixes += 1


def _backport_default_peak(scheduler: Any, name: str, construction: schedules.Construction | None,
                           version: str) -> bool:
    """WarmupLR without a warmup_max_lr peaks at each group's own lr on the newest release."""
    if not schedules.default_peak_differs(name, version):
        return False
    try:
        if construction is None:
            raise LookupError("whether it was given a warmup_max_lr is unknown")
        new_max = schedules.newest_max_lrs(scheduler, construction)
    except LookupError as unknown:
        log.warn_once(f"peak-unknown:{id(scheduler)}", "%s was built before the patch was applied (%s): its "
                      "peak lr is left at %s; DeepSpeed %s would use each group's own lr if none was given",
                      name, unknown, _fmt(list(scheduler.max_lrs)), releases.BEHAVIOR_REFERENCE)
        return False
    if new_max is None:
        return False
    old_max = list(scheduler.max_lrs)
    scheduler.max_lrs = new_max
    scheduler.delta_lrs = [big - small for big, small in zip(new_max, scheduler.min_lrs)]
    log.warn_once(f"peak:{id(scheduler)}", "%s: no warmup_max_lr was given: peak lr %s -> %s (each group's own "
                  "lr, the default of DeepSpeed %s; DeepSpeed %s's default is %s)", name, _fmt(old_max),
                  _fmt(new_max), releases.BEHAVIOR_REFERENCE, version,
                  releases.warmup_max_lr_default(version).value)
    return True


def _step_once_guarded(scheduler: Any, name: str) -> None:
    groups = scheduler.optimizer.param_groups
    saved = _snapshot(scheduler, groups)
    try:
        before = [schedules.lr_value(g["lr"]) for g in groups]
        scheduler.step()
    except Exception as error:
        _restore(scheduler, groups, saved)
        failures.report("step", f"stepping {name} once (mode=step)", error,
                        "that scheduler runs as in mode reset (this warning is not repeated)")
        return
    after = [schedules.lr_value(g["lr"]) for g in groups]
    state.fixes += 1
    log.info("%s: stepped once before the first optimizer step: %s (mode=step: step k uses lr(k))", name,
             "; ".join(f"group {i} lr {old!r} -> {new!r}" for i, (old, new) in enumerate(zip(before, after))))


def align_after_load(engine: Any) -> None:
    """After a checkpoint load that did not restore the optimizer's lr, each group holds the lr its
    scheduler says, as in an uninterrupted run.

    With load_optimizer_states=False (or a module-only load) the optimizer keeps the lr of the
    fresh run while the scheduler resumes mid-schedule: every release, the newest included, then
    runs the first resumed step at a stale lr. Where the optimizer's states were loaded, the
    caller never gets here: the restored lr is the checkpoint's, as on the newest release.
    """
    scheduler: Any = getattr(engine, "lr_scheduler", None)
    name = schedules.class_name(scheduler) if scheduler is not None else None
    if name is None:
        return
    fresh = schedules.is_fresh(scheduler)
    targets = schedules.newest_start_lrs(scheduler, name) if fresh else list(scheduler.get_lr())
    groups = scheduler.optimizer.param_groups
    saved = _snapshot(scheduler, groups)
    changes = []
    try:
        for index, (group, target) in enumerate(zip(groups, targets)):
            old = schedules.lr_value(group["lr"])
            if old != schedules.lr_value(target):
                schedules.set_group_lr(group, target)
                changes.append(f"group {index} lr {old!r} -> {schedules.lr_value(target)!r}")
    except BaseException:
        _restore(scheduler, groups, saved)
        raise
    if changes:
        state.fixes += 1
        log.info("%s: %s after load_checkpoint (the scheduler resumed at iteration %s; the optimizer's lr "
                 "was not restored from the checkpoint)", name, "; ".join(changes), scheduler.last_batch_iteration)


def deepspeed_version() -> str:
    """The running DeepSpeed's release: as its hook saw it, else as installed."""
    return state.deepspeed_version or releases.installed("deepspeed") or "0"


def _why(name: str, version: str) -> str:
    fact = releases.start_fact(name, version)
    if fact is None or fact.start is releases.Start.SETS_EVERY_GROUP:
        return f"DeepSpeed {version}"
    return f"DeepSpeed {version} {fact.start.value}"


def _fmt(values: list[Any]) -> str:
    return "[" + ", ".join(repr(schedules.lr_value(v)) for v in values) + "]"


def _snapshot(scheduler: Any, groups: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    return copy.copy(vars(scheduler)), _lr_copies(groups)


def _lr_copies(groups: list[dict[str, Any]]) -> list[Any]:
    """Each group's lr as it is now: a tensor lr is cloned, since the scheduler changes it in place."""
    return [g["lr"].clone() if hasattr(g["lr"], "clone") else g["lr"] for g in groups]


def _restore(scheduler: Any, groups: list[dict[str, Any]], saved: tuple[dict[str, Any], list[Any]]) -> None:
    attributes, lrs = saved
    vars(scheduler).clear()
    vars(scheduler).update(attributes)
    for group, lr in zip(groups, lrs):
        if hasattr(group["lr"], "copy_") and hasattr(lr, "shape"):
            group["lr"].copy_(lr)
        else:
            group["lr"] = lr
