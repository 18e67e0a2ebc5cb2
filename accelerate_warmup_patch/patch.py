"""The wrapt wrappers, and the one routine they call before an engine's first optimizer step.

Loaded only once deepspeed or accelerate is imported (see ``bootstrap``): wrapt costs ~50 ms.

- ``deepspeed.initialize`` is wrapped: right after an engine is built, its scheduler is put where
  the newest DeepSpeed puts it at construction. Raw DeepSpeed, accelerate and the HF Trainer all
  build engines through it.
- ``accelerate.utils.deepspeed.DeepSpeedEngineWrapper.backward`` is wrapped: it runs right before
  accelerate's ``engine.step()``, so engines built before the patch was applied are caught too.
  After its first call an instance calls the original directly (``_step_aside``): per step, the
  patch costs nothing.
- ``deepspeed.runtime.lr_schedules.WarmupLR.__init__`` is wrapped to see the param groups' lrs
  before the scheduler overwrites them: the newest release takes its default peak lr from them.

The routine acts at most once per scheduler, never on one that has stepped, and fails open.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import wrapt

from . import releases, schedules, settings
from .settings import Mode

logger = logging.getLogger("accelerate_warmup_patch")


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


@dataclass
class _State:
    mode: str = Mode.RESET
    active: bool = False
    patched: list[_Patched] = field(default_factory=list)
    deepspeed_version: str | None = None
    accelerate_version: str | None = None
    fixes: int = 0
    warned: set[str] = field(default_factory=set)


state = _State()
_seen: weakref.WeakSet[Any] = weakref.WeakSet()
_constructions: weakref.WeakKeyDictionary[Any, schedules.Construction] = weakref.WeakKeyDictionary()


class PatchError(RuntimeError):
    """Raised instead of failing open when ACCELERATE_WARMUP_PATCH_STRICT is set."""


# Logging ---------------------------------------------------------------------------------

def _rank() -> int:
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 0


def _info(message: str, *args: Any) -> None:
    """INFO on rank 0, DEBUG elsewhere: one line per job, not one per rank."""
    _make_visible()
    logger.log(logging.INFO if _rank() == 0 else logging.DEBUG, message, *args)


def _make_visible() -> None:
    """With no logging configured anywhere, Python shows only warnings: give our INFO line a home."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[accelerate_warmup_patch] %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def warn_once(key: str, message: str, *args: Any) -> None:
    if key not in state.warned:
        state.warned.add(key)
        _make_visible()
        logger.warning(message, *args)


def _fail_open(what: str, error: BaseException) -> None:
    if settings.strict():
        raise PatchError(f"accelerate_warmup_patch: {what} failed: {error!r}") from error
    warn_once(f"fail:{what}", "%s failed (%r); this run continues exactly as unpatched", what, error)


# Patching --------------------------------------------------------------------------------

def _wrap(owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    if any(p.owner is owner and p.name == name for p in state.patched):
        return  # one wrap, however often apply() runs
    original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    # no `enabled=` callable: it costs a Python call per call; the wrappers read state.active
    function_wrapper = wrapt.FunctionWrapper(original, wrapper)
    setattr(owner, name, function_wrapper)
    state.patched.append(_Patched(owner, name, original, function_wrapper))


def unpatch_all() -> None:
    """Put every original back; a wrapper someone stacked on ours stays, with ours disabled."""
    state.active = False
    _step_back_in()
    for patched in reversed(state.patched):
        current = vars(patched.owner).get(patched.name)
        if current is patched.wrapper:
            setattr(patched.owner, patched.name, patched.original)
        else:
            warn_once(f"stacked:{patched.name}", "%s.%s was wrapped again after this patch; "
                      "leaving that wrapper in place with this patch disabled",
                      getattr(patched.owner, "__name__", patched.owner), patched.name)
    state.patched.clear()


def patch_deepspeed(module: ModuleType) -> None:
    version = str(getattr(module, "__version__", "0"))
    state.deepspeed_version = version
    level = releases.deepspeed_support(version)
    if level is releases.Support.UNSUPPORTED:
        warn_once("ds-floor", "DeepSpeed %s is older than %s, the oldest release this patch knows; "
                  "nothing is patched", version, releases.DEEPSPEED_FLOOR)
        return
    if level is releases.Support.UNTESTED:
        warn_once("ds-untested", "DeepSpeed %s is newer than %s, the newest release this patch was "
                  "tested on; it acts only where it sees a scheduler start at the wrong lr",
                  version, releases.NEWEST_DEEPSPEED)
    state.active = True
    _wrap(module, "initialize", _initialize_wrapper)


def patch_lr_schedules(module: ModuleType) -> None:
    # deepspeed/__init__.py imports this module before it sets __version__: no version check
    # here; the capture is read only by the routine, which checks the release.
    if isinstance(getattr(module, "WarmupLR", None), type) and "__init__" in vars(module.WarmupLR):
        _wrap(module.WarmupLR, "__init__", _warmup_init_wrapper)


def patch_engine(module: ModuleType) -> None:
    engine_class = getattr(module, "DeepSpeedEngine", None)
    if isinstance(engine_class, type) and "load_checkpoint" in vars(engine_class):
        _wrap(engine_class, "load_checkpoint", _load_checkpoint_wrapper)


def patch_accelerate(module: ModuleType) -> None:
    accelerate = _loaded("accelerate")
    version = str(getattr(accelerate, "__version__", "0"))
    state.accelerate_version = version
    level = releases.accelerate_support(version)
    engine_wrapper = getattr(module, "DeepSpeedEngineWrapper", None)
    if level is releases.Support.UNSUPPORTED or engine_wrapper is None or "backward" not in vars(engine_wrapper):
        warn_once("acc-floor", "accelerate %s is older than %s, the oldest release this patch knows; "
                  "DeepSpeedEngineWrapper.backward is not patched", version, releases.ACCELERATE_FLOOR)
        return
    if level is releases.Support.UNTESTED:
        warn_once("acc-untested", "accelerate %s is newer than %s, the newest release this patch was "
                  "tested on", version, releases.NEWEST_ACCELERATE)
    state.active = True
    _wrap(engine_wrapper, "backward", _backward_wrapper)


def _loaded(name: str) -> Any:
    return sys.modules.get(name)


# Wrappers --------------------------------------------------------------------------------

def _initialize_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # the original first: our logic never changes its inputs
    if state.active:
        prepare_first_step(result[0] if isinstance(result, tuple) and result else result)
    return result


def _backward_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    if state.active and not getattr(instance, _SEEN, False):
        prepare_first_step(getattr(instance, "engine", None))
        with contextlib.suppress(Exception):  # a slotted wrapper: the per-scheduler check still holds
            setattr(instance, _SEEN, True)
        _step_aside(instance)
    return wrapped(*args, **kwargs)


_SEEN = "_accelerate_warmup_patch_seen"
_stepped_aside: weakref.WeakKeyDictionary[Any, Callable[..., Any]] = weakref.WeakKeyDictionary()


def _step_aside(instance: Any) -> None:
    """Let this engine wrapper call the original backward directly from now on.

    Our work is done after its first call, but wrapt's dispatch would still cost ~1 µs on every
    step. The direct call goes in the instance's ``__dict__`` only when the class's ``backward`` is
    our wrapper (a subclass's own override is never bypassed), and holds the instance weakly (no
    cycle that would keep an engine alive until the next garbage collection)."""
    patched = _patched_method_of(type(instance), "backward")
    if patched is None:
        return
    original, reference = patched.original, weakref.ref(instance)

    def backward(*args: Any, **kwargs: Any) -> Any:
        return original(reference(), *args, **kwargs)

    backward.__name__, backward.__qualname__, backward.__doc__ = "backward", original.__qualname__, original.__doc__
    try:
        vars(instance)["backward"] = backward
        _stepped_aside[instance] = backward
    except TypeError:
        pass  # no __dict__: the class-level wrapper stays in the way, which is only slower


def _patched_method_of(cls: type, name: str) -> _Patched | None:
    """Our patch record when ``cls`` resolves ``name`` to one of our wrappers, else None."""
    for klass in cls.__mro__:
        if name in vars(klass):
            found = vars(klass)[name]
            return next((p for p in state.patched if p.wrapper is found), None)
    return None


def _step_back_in() -> None:
    for instance, direct in list(_stepped_aside.items()):
        if vars(instance).get("backward") is direct:
            del vars(instance)["backward"]
        vars(instance).pop(_SEEN, None)
    _stepped_aside.clear()


def _load_checkpoint_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)
    loaded = result[0] if isinstance(result, tuple) and result else result
    if loaded is not None and state.active:
        try:
            align_after_load(instance)
        except PatchError:
            raise
        except Exception as error:
            _fail_open("aligning the lr after load_checkpoint", error)
    return result


def _warmup_init_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    if state.active and instance is not None and instance not in _constructions:
        try:
            _constructions[instance] = _capture_construction(wrapped, args, kwargs)
        except Exception as error:
            _fail_open("reading WarmupLR's arguments", error)
    return wrapped(*args, **kwargs)


def _capture_construction(wrapped: Callable[..., Any], args: Any, kwargs: Any) -> schedules.Construction:
    bound = inspect.signature(wrapped).bind(*args, **kwargs)
    groups = bound.arguments["optimizer"].param_groups
    lrs = tuple(lr.clone() if hasattr(lr, "clone") else lr for lr in (g["lr"] for g in groups))
    return schedules.Construction(lrs, bound.arguments.get("warmup_max_lr") is not None)


# The routine -----------------------------------------------------------------------------

def prepare_first_step(engine: Any) -> None:
    """Before an engine's first optimizer step, start its scheduler where the newest release does."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if not state.active or scheduler is None or scheduler in _seen:
        return
    try:
        _seen.add(scheduler)
    except TypeError:
        return  # not weak-referenceable, so not a DeepSpeed scheduler either
    try:
        _prepare(scheduler)
    except PatchError:
        raise
    except Exception as error:
        _fail_open("preparing the first optimizer step", error)


def _prepare(scheduler: Any) -> None:
    name = schedules.class_name(scheduler)
    if name is None:
        logger.debug("%s is not a DeepSpeed scheduler; left alone", type(scheduler).__name__)
        return
    if not schedules.is_fresh(scheduler):
        logger.debug("%s has already stepped (a resumed run?); left alone", name)
        return
    mode = _current_mode()
    if mode == Mode.OFF:
        return
    version = _supported_deepspeed()
    if version is None:
        return
    groups = scheduler.optimizer.param_groups
    saved = _snapshot(scheduler, groups)
    try:
        changes = _apply(scheduler, name, groups, mode)
    except BaseException:
        _restore(scheduler, groups, saved)
        raise
    if changes:
        state.fixes += 1
        _info("%s: %s before the first optimizer step (%s)", name, "; ".join(changes),
              _why(name, version, mode))


def _apply(scheduler: Any, name: str, groups: list[dict[str, Any]], mode: str) -> list[str]:
    changes: list[str] = []
    new_max = schedules.newest_max_lrs(scheduler, name, _constructions.get(scheduler))
    if new_max is not None:
        old_max = list(scheduler.max_lrs)
        scheduler.max_lrs = new_max
        scheduler.delta_lrs = [big - small for big, small in zip(new_max, scheduler.min_lrs)]
        changes.append(f"warmup_max_lr {_fmt(old_max)} -> {_fmt(new_max)} (each group's own lr)")
    before = [schedules.lr_value(g["lr"]) for g in groups]
    for group, target in zip(groups, schedules.newest_start_lrs(scheduler, name)):
        if schedules.lr_value(group["lr"]) != schedules.lr_value(target):
            schedules.set_group_lr(group, target)
    if mode == Mode.STEP:
        scheduler.step()
        changes.append("stepped once")  # said even when lr(0) equals the start lr
    after = [schedules.lr_value(g["lr"]) for g in groups]
    changes.extend(f"group {i} lr {old!r} -> {new!r}" for i, (old, new) in enumerate(zip(before, after))
                   if old != new)
    return changes


def align_after_load(engine: Any) -> None:
    """After a checkpoint load, each group holds the lr its scheduler says, as in an uninterrupted run.

    With load_optimizer_states=False (or a module-only load) the optimizer keeps the lr of the
    fresh run while the scheduler resumes mid-schedule: every release, the newest included, then
    runs the first resumed step at a stale lr. With the optimizer's states loaded nothing changes.
    """
    scheduler: Any = getattr(engine, "lr_scheduler", None)
    name = schedules.class_name(scheduler) if scheduler is not None else None
    if name is None or _current_mode() == Mode.OFF:
        return
    version = _supported_deepspeed()
    if version is None:
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
        _info("%s: %s after load_checkpoint (the scheduler resumed at iteration %s; the optimizer's lr "
              "was not restored from the checkpoint)", name, "; ".join(changes), scheduler.last_batch_iteration)


def _supported_deepspeed() -> str | None:
    """The running DeepSpeed's version, or None when it is older than the table's floor."""
    version = state.deepspeed_version or str(getattr(_loaded("deepspeed"), "__version__", "0"))
    return None if releases.deepspeed_support(version) is releases.Support.UNSUPPORTED else version


def _why(name: str, version: str, mode: str) -> str:
    if mode == Mode.STEP:
        return "mode=step: the scheduler is stepped once first, so step k uses lr(k)"
    fact = releases.start_fact(name, version)
    if fact is None or fact.start is releases.Start.SETS_EVERY_GROUP:
        return f"DeepSpeed {version}"
    return f"DeepSpeed {version} {fact.start.value}"


def _fmt(values: list[Any]) -> str:
    return "[" + ", ".join(repr(schedules.lr_value(v)) for v in values) + "]"


def _snapshot(scheduler: Any, groups: list[dict[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    lrs = [g["lr"].clone() if hasattr(g["lr"], "clone") else g["lr"] for g in groups]
    return copy.copy(vars(scheduler)), lrs


def _restore(scheduler: Any, groups: list[dict[str, Any]], saved: tuple[dict[str, Any], list[Any]]) -> None:
    attributes, lrs = saved
    vars(scheduler).clear()
    vars(scheduler).update(attributes)
    for group, lr in zip(groups, lrs):
        if hasattr(group["lr"], "copy_") and hasattr(lr, "shape"):
            group["lr"].copy_(lr)
        else:
            group["lr"] = lr


def _current_mode() -> str:
    return state.mode
