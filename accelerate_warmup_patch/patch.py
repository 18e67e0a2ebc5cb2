"""The wrapt wrappers, and the one routine that changes a scheduler's lrs.

Loaded only once deepspeed or accelerate is imported (see ``bootstrap``): wrapt costs ~50 ms.

- The fix, where upstream made it: each method of the warmup schedulers that carries a change the
  guard table backports (``releases.UPSTREAM_CHANGES``) and the running release lacks: the
  constructors (the start lr, the default peak, an unknown warmup_type), ``get_lr`` and
  ``get_lr_ratio`` (what they return before the first step; the cosine past its total).
- The nets: ``deepspeed.initialize`` and accelerate's ``DeepSpeedEngineWrapper.backward`` settle a
  scheduler built before the patch was applied. ``apply()`` after deepspeed was imported settles the
  live ones once (``settle_live``).
- ``step`` mode: the engine's optimizer step (``releases.optimizer_step_method``) looks at its scheduler
  just before the first one, and steps it once only if it is still fresh (user code may have stepped it).
- ``DeepSpeedEngine.load_checkpoint``: on a release that starts the class wrong, the optimizer's lr
  is aligned with the scheduler the checkpoint restored when the optimizer's lr was not restored.

The nets change only a scheduler that this release builds otherwise than the newest release, and
every lr is written the way the running release writes it (``schedules.write``). Every failure goes
through ``failures.report``: what was changed is restored, then a warning, or strict mode raises.
"""

from __future__ import annotations

import copy
import inspect
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import wrapt

from . import api, failures, log, releases, schedules
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
        """True while the wrapper is what a caller reaches: the owner holds it, and the owner is still what
        its module exports (a reload makes new classes and functions that were never wrapped)."""
        if isinstance(self.owner, ModuleType):
            return sys.modules.get(self.owner.__name__) is self.owner and \
                getattr(self.owner, self.name, None) is self.wrapper
        module = sys.modules.get(self.owner.__module__)
        current_owner = getattr(module, self.owner.__qualname__, None) if "." not in self.owner.__qualname__ \
            else self.owner
        return current_owner is self.owner and vars(self.owner).get(self.name) is self.wrapper


@dataclass
class _State:
    patched: list[_Patched] = field(default_factory=list)
    deepspeed_version: str | None = None
    accelerate_version: str | None = None
    fixes: int = 0
    not_fixed: list[str] = field(default_factory=list)  # one line per scheduler the patch had to leave wrong


class _Seen:
    """Objects seen, by id (a scheduler may be unhashable), forgotten when they die. An object without
    __weakref__ is not remembered: its id could be reused by a newer object while it is recorded."""

    def __init__(self) -> None:
        self.ids: set[int] = set()  # a set of ints: `id(x) in seen.ids` runs on every backward

    def __contains__(self, obj: object) -> bool:
        return id(obj) in self.ids

    def add(self, obj: object) -> None:
        key = id(obj)
        if key in self.ids:
            return
        try:
            weakref.finalize(obj, self.ids.discard, key)
        except TypeError:
            return
        self.ids.add(key)


state = _State()
_settled = _Seen()  # schedulers whose build-time behaviour the patch has decided on: one try each
_netted = _Seen()  # schedulers a net has seen (each is settled once)
_looked = _Seen()  # schedulers step mode has looked at, at their engine's first optimizer step


# Patching --------------------------------------------------------------------------------

class _Reference:
    """What a wrapper adds to wrapt's: it pickles, copies and deep-copies as the function it wraps.

    wrapt's proxies refuse all three (``object proxy must define __reduce__()``, wrapt 1.14.1 to 2.x). A
    function pickles by its module and qualified name, a bound method by its instance and name: unpickled,
    the name is looked up again, so a process without the patch gets the original and one with it the
    wrapper. A function copies as itself; a bound method deep-copies as one bound to a copy of its instance.
    """

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _by_reference(self)

    def __reduce__(self) -> Any:
        return _by_reference(self)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        instance = _bound_to(self)
        return self if instance is None else getattr(copy.deepcopy(instance, memo), _bound_name(self))


class _BoundFunctionWrapper(_Reference, wrapt.BoundFunctionWrapper):  # type: ignore[misc]
    __slots__ = ()


class _FunctionWrapper(_Reference, wrapt.FunctionWrapper):  # type: ignore[misc]
    __slots__ = ()
    __bound_function_wrapper__ = _BoundFunctionWrapper


def _bound_to(wrapper: Any) -> Any:
    """The instance (or class) a wrapped method is bound to; None for a function or an unbound method."""
    instance = getattr(wrapper.__wrapped__, "__self__", None)
    return None if isinstance(instance, ModuleType) else instance


def _bound_name(wrapper: Any) -> str:
    return str(wrapper.__wrapped__.__name__)


def _by_reference(wrapper: Any) -> Any:
    """pickle's answer for the wrapped callable, as it pickles the original (``save_global``)."""
    instance = _bound_to(wrapper)
    if instance is not None:
        return getattr, (instance, _bound_name(wrapper))
    owner_path, _, name = wrapper.__qualname__.rpartition(".")
    if not owner_path:  # a module's function: pickle checks that the module holds this very object
        return wrapper.__qualname__
    try:
        owner: Any = sys.modules[wrapper.__module__]
        for part in owner_path.split("."):
            owner = getattr(owner, part)
    except (KeyError, AttributeError) as error:
        import pickle

        raise pickle.PicklingError(f"Can't pickle {wrapper!r}: {wrapper.__qualname__} is not found in "
                                   f"{wrapper.__module__}") from error
    # a method reached through its class is a new bound wrapper at each lookup: by its class and name
    return getattr, (owner, name)


def _wrap(owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
    for patched in list(state.patched):
        if patched.owner is owner and patched.name == name:
            if patched.in_place():
                return  # one wrap, however often apply() runs
            state.patched.remove(patched)  # stale (the owner was reloaded): wrap what is there now
    original = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    # no `enabled=` callable: it costs a Python call per call; the wrappers read api.active_mode
    function_wrapper = _FunctionWrapper(original, wrapper)
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
    """Put every original back; a wrapper someone stacked on ours stays, disabled (api.active_mode is None)."""
    unpatch_since(0)


def in_place() -> list[str]:
    """The labels of the wrappers that callers reach now."""
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
                      "tested on; it has every change the patch backports, so only step mode acts",
                      version, releases.NEWEST_DEEPSPEED)
    lr_schedules = sys.modules[schedules.SCHEDULES_MODULE]  # deepspeed/__init__.py imported both
    engine_class = sys.modules["deepspeed.runtime.engine"].DeepSpeedEngine
    for target in releases.methods_to_fix(version):
        class_name, method = target.split(".")
        cls = getattr(lr_schedules, class_name)
        _wrap(cls, method, _method_wrapper(method, vars(cls)[method], version))
    _wrap(module, "initialize", _initialize_wrapper)
    _wrap(engine_class, "load_checkpoint", _load_checkpoint_wrapper(
        inspect.signature(vars(engine_class)["load_checkpoint"])))
    optimizer_step = releases.optimizer_step_method(version)
    if optimizer_step is not None and optimizer_step in vars(engine_class):
        _wrap(engine_class, optimizer_step, _optimizer_step_wrapper)
    else:  # an untested release that moved it: reset mode is whole, step mode has no moment to act
        failures.report("optimizer-step", f"finding DeepSpeedEngine.{optimizer_step}, where step mode acts",
                        LookupError(f"DeepSpeed {version} has no DeepSpeedEngine.{optimizer_step}"),
                        "step mode steps no scheduler; everything else applies")


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


# The scheduler methods -------------------------------------------------------------------

def _method_wrapper(method: str, original: Callable[..., Any], version: str) -> Callable[..., Any]:
    if method == "__init__":
        return _constructor_wrapper(inspect.signature(original))
    if method == "get_lr":
        return _get_lr_wrapper
    if method == "get_lr_ratio":
        return _get_lr_ratio_wrapper(before_start=releases.lacks("ratio_before_start", "WarmupCosineLR", version),
                                     past_warmup=releases.lacks("ratio_past_warmup", "WarmupCosineLR", version))
    raise LookupError(f"no wrapper for {method}")


def _constructor_wrapper(signature: inspect.Signature) -> Callable[..., Any]:
    """The wrapper of one scheduler class's ``__init__``; ``signature`` is the original's."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if api.active_mode is None or instance is None:
            return wrapped(*args, **kwargs)
        captured = _capture(signature, instance, args, kwargs)
        # The original has its say first: arguments it refuses raise its own error, and nothing of ours is said.
        result = wrapped(*args, **kwargs)
        construction = captured if isinstance(captured, schedules.Construction) else None
        if isinstance(captured, Exception):  # the original took what we could not read: our failure
            failures.report("capture", f"reading the arguments of {type(instance).__name__}", captured,
                            "its first-step lr is still fixed; its default peak lr is left as this DeepSpeed sets it")
        # a failed capture has said that the default peak is left alone: no second warning about it
        settle(instance, construction, "at construction", peak_known=construction is not None, at_construction=True)
        return result

    return wrapper


def _capture(signature: inspect.Signature, instance: Any, args: Any,
             kwargs: Any) -> schedules.Construction | Exception:
    """The groups' lrs and whether a peak was given, read before the original __init__ runs (it may change
    them); what went wrong instead, to be reported only if the original accepts these arguments."""
    try:
        bound = signature.bind(instance, *args, **kwargs)
        groups = schedules.torch_optimizer(bound.arguments["optimizer"]).param_groups
        return schedules.Construction(tuple(_lr_copies(groups)), bound.arguments.get("warmup_max_lr") is not None)
    except Exception as error:
        return error


def _get_lr_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # before the first step it logs the release's warning, as the newest does
    if api.active_mode is None or instance is None:
        return result
    try:
        if instance.last_batch_iteration < 0:
            return schedules.lr_before_start(instance, schedules.class_name(instance) or "")
    except Exception as error:
        failures.report("get_lr", f"get_lr() of {type(instance).__name__} before its first step", error,
                        "get_lr() returns what this DeepSpeed returns")
    return result


def _get_lr_ratio_wrapper(before_start: bool, past_warmup: bool) -> Callable[..., Any]:
    """WarmupCosineLR.get_lr_ratio, called on every step: what this release lacks is decided once, here."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        if api.active_mode is None or instance is None or args or kwargs:
            return wrapped(*args, **kwargs)  # it takes no arguments: given some, the original says so itself
        try:
            before = before_start and instance.last_batch_iteration < 0
            past = not before and past_warmup and instance.last_batch_iteration >= instance.warmup_num_steps
            ratio = schedules.cosine_ratio(instance) if past else None
        except Exception as error:
            failures.report("get_lr_ratio", f"get_lr_ratio() of {type(instance).__name__}", error,
                            "get_lr_ratio() returns what this DeepSpeed returns")
            return wrapped()
        if before:
            wrapped()  # the release's warning, as the newest logs it
            return 0.0
        return wrapped() if ratio is None else ratio

    return wrapper


# The nets --------------------------------------------------------------------------------

def _initialize_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    result = wrapped(*args, **kwargs)  # the original first: our logic never changes its inputs
    if api.active_mode is not None:
        prepare_first_step(_first_of(result))
    return result


def _first_of(result: Any) -> Any:
    """The engine of ``deepspeed.initialize``'s tuple, the load path of ``load_checkpoint``'s."""
    return result[0] if isinstance(result, tuple) and result else result


def _backward_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    if api.active_mode is not None:
        prepare_first_step(getattr(instance, "engine", None))
    return wrapped(*args, **kwargs)


def _optimizer_step_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    """DeepSpeedEngine._take_model_step: the optimizer step, at a gradient accumulation boundary, on every road
    (engine.step, accelerate's backward, the Trainer, a PipelineEngine's train_batch)."""
    if api.active_mode == Mode.STEP and instance is not None:
        scheduler = getattr(instance, "lr_scheduler", None)
        if scheduler is not None and id(scheduler) not in _looked.ids:  # after the first step: one set lookup
            step_before_first_optimizer_step(instance, scheduler)
    return wrapped(*args, **kwargs)


def _load_checkpoint_wrapper(signature: inspect.Signature) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        result = wrapped(*args, **kwargs)
        if _first_of(result) is not None and api.active_mode is not None:
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


def prepare_first_step(engine: Any, when: str = "before the first optimizer step") -> None:
    """Before an engine's first optimizer step: a scheduler built before the patch was applied is settled
    as the constructor's fix would have. Step mode's step waits for the optimizer step itself."""
    try:
        scheduler = getattr(engine, "lr_scheduler", None)
        if scheduler is None or id(scheduler) in _netted.ids:  # every backward: no Python-level call
            return
        _netted.add(scheduler)
        if scheduler not in _settled:
            settle(scheduler, _construction_from_config(engine, scheduler), when)
    except Exception as error:  # the nets run inside the user's initialize and backward: never break them
        failures.report("net", "preparing the scheduler for the first optimizer step", error,
                        "that scheduler runs as this DeepSpeed made it")


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
        if scheduler not in _settled:
            settle(scheduler, None, when)


def _with_subclasses(classes: list[type]) -> set[type]:
    found: set[type] = set()
    pending = list(classes)
    while pending:
        cls = pending.pop()
        if cls not in found:
            found.add(cls)
            pending.extend(cls.__subclasses__())
    return found


def _construction_from_config(engine: Any, scheduler: Any) -> schedules.Construction | None:
    """What the constructor saw, for a scheduler built from the engine's config before the patch.

    Only where the release's constructor leaves the optimizer's lr: the groups still hold the lrs
    they were built with. Elsewhere (a client scheduler, or a release that overwrote them) unknown.
    """
    name = schedules.class_name(scheduler)
    if name is None or getattr(engine, "client_lr_scheduler", True) or not callable(getattr(engine, "scheduler_params",
                                                                                              None)):
        return None
    untouched = releases.lacks("start", name, deepspeed_version())
    lrs = tuple(g["lr"] for g in scheduler.optimizer.param_groups) if untouched else None
    return schedules.Construction(lrs, (engine.scheduler_params() or {}).get("warmup_max_lr") is not None)


# The routine -----------------------------------------------------------------------------

def settle(scheduler: Any, construction: schedules.Construction | None, when: str, peak_known: bool = True,
           at_construction: bool = False) -> None:
    """A fresh scheduler that this release builds otherwise than the newest: build-time behaviour of the
    newest, once. Anything else is left exactly as the release made it (one built before the patch and
    resumed without a step is named in a warning: ``_name_unsettled``)."""
    try:
        _settle(scheduler, construction, when, peak_known, at_construction)
    except Exception as error:  # runs inside the user's constructor: never break it
        failures.report("start", f"starting {type(scheduler).__name__} where DeepSpeed "
                        f"{releases.BEHAVIOR_REFERENCE} starts it", error,
                        "that scheduler runs exactly as unpatched (this warning is not repeated)")


def _settle(scheduler: Any, construction: schedules.Construction | None, when: str, peak_known: bool,
            at_construction: bool) -> None:
    name = schedules.class_name(scheduler)
    version = deepspeed_version()
    if name is None or not releases.built_wrong(name, version):
        return
    if not schedules.is_fresh(scheduler):
        _settled.add(scheduler)  # decided: a later net says nothing more about it
        if not at_construction:  # built at a later iteration, the newest release too leaves its lr
            _name_unsettled(scheduler, name, version)
        return
    _settled.add(scheduler)
    peak: list[bool] = []
    changes = _change(scheduler, "start", f"starting {name} where DeepSpeed {releases.BEHAVIOR_REFERENCE} starts it",
                      lambda: peak.append(_build_as_newest(scheduler, name, construction, version, peak_known)),
                      "that scheduler runs exactly as unpatched (this warning is not repeated)")
    if changes:
        log.info("%s: %s %s (%s)", name, "; ".join(changes), when, _why(name, version))
    if changes or any(peak):
        state.fixes += 1


def _name_unsettled(scheduler: Any, name: str, version: str) -> None:
    """A scheduler built before the patch and set to a later iteration without a step, on a release that
    starts it wrong: the newest release writes the start lr for one built fresh and then resumed, and leaves
    the lr of one built at that iteration. Both look the same now, so its lr is left and the user is told."""
    optimizer = scheduler.optimizer
    if not releases.lacks("start", name, version) or getattr(scheduler, "_last_lr", None) is not None or \
            getattr(optimizer, "state", None):
        return  # it has stepped, or its optimizer has (or holds restored state): its lr is not the build's
    iteration = scheduler.last_batch_iteration
    left = _fmt([g["lr"] for g in optimizer.param_groups])
    start = _fmt(schedules.lr_before_start(scheduler, name))
    state.not_fixed.append(f"{name} at iteration {iteration}: built before the patch was applied and resumed "
                           f"without a step; its lr is left at {left}")
    log.warn_once(f"unsettled:{id(scheduler)}", "%s was built before the patch was applied and set to iteration %s "
                  "without a step (load_state_dict, or last_batch_iteration given to it): its lr is left at %s, "
                  "as DeepSpeed %s set it. DeepSpeed %s starts one built fresh and then resumed at %s, and leaves "
                  "one built at that iteration as it is; the patch cannot tell which this was. Import "
                  "accelerate_warmup_patch (or set ACCELERATE_WARMUP_PATCH) before building it",
                  name, iteration, left, version, releases.BEHAVIOR_REFERENCE, start)


def _build_as_newest(scheduler: Any, name: str, construction: schedules.Construction | None, version: str,
                     peak_known: bool) -> bool:
    """What the newest constructor does after this release's: returns whether the peak changed."""
    if releases.lacks("unknown_warmup_type", name, version) and scheduler.warmup_type not in ("log", "linear"):
        from deepspeed.utils import logger  # DeepSpeed's own words, as 0.19.4+ logs them

        logger.warning(f"Using unknown warmup_type: {scheduler.warmup_type}. The increasing function "
                       f"is set to default (log)")
        scheduler.warmup_type = "log"
    peak = peak_known and releases.lacks("default_peak", name, version) and \
        _backport_default_peak(scheduler, name, construction, version)
    if releases.lacks("start", name, version):  # the newest constructor's last line, asking the instance
        scheduler._last_lr = schedules.write(scheduler.optimizer.param_groups, scheduler.get_lr(), version)
    return peak


def _backport_default_peak(scheduler: Any, name: str, construction: schedules.Construction | None,
                           version: str) -> bool:
    """WarmupLR without a warmup_max_lr peaks at each group's own lr on the newest release."""
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


def step_before_first_optimizer_step(engine: Any, scheduler: Any) -> None:
    """Step mode, just before the first optimizer step of ``engine`` with ``scheduler``: look first. Only a
    scheduler that is still fresh is stepped, once; one that user code (or a checkpoint) has stepped is left."""
    try:
        _looked.add(scheduler)
        if scheduler not in _settled:  # built before the patch, on a road no net saw
            settle(scheduler, _construction_from_config(engine, scheduler), "before the first optimizer step")
        _step_once(scheduler)
    except Exception as error:  # runs inside the user's optimizer step: never break it
        failures.report("step-net", "stepping the scheduler before the first optimizer step", error,
                        "that scheduler runs as in mode reset")


def _step_once(scheduler: Any) -> None:
    name = schedules.class_name(scheduler)
    if name is None:
        return  # not DeepSpeed's: left alone
    if not schedules.is_fresh(scheduler):
        log.info("%s: not stepped before the first optimizer step: it has stepped already (last_batch_iteration "
                 "%s: user code stepped it, or a checkpoint restored it); step mode steps only a fresh scheduler",
                 name, scheduler.last_batch_iteration)
        return
    changes = _change(scheduler, "step", f"stepping {name} once (mode=step)", scheduler.step,
                      "that scheduler runs as in mode reset (this warning is not repeated)", all_groups=True)
    if changes is not None:
        state.fixes += 1
        log.info("%s: stepped once before the first optimizer step: %s (mode=step: step k uses lr(k))", name,
                 "; ".join(changes))


def align_after_load(engine: Any) -> None:
    """After a checkpoint load that did not restore the optimizer's lr, each group holds the lr its
    scheduler says, as in an uninterrupted run: on a release that builds the class wrong (the fresh
    optimizer holds a wrong lr), and in step mode; the newest release itself does not align in reset mode.

    Where the optimizer's states were loaded, the caller never gets here: the restored lr is the
    checkpoint's, as on the newest release.
    """
    scheduler: Any = getattr(engine, "lr_scheduler", None)
    name = schedules.class_name(scheduler) if scheduler is not None else None
    version = deepspeed_version()
    if name is None or not (releases.lacks("start", name, version) or api.active_mode == Mode.STEP):
        return
    groups = scheduler.optimizer.param_groups

    def align() -> None:
        targets = scheduler.get_lr()
        if [schedules.lr_value(g["lr"]) for g in groups] != [schedules.lr_value(t) for t in targets]:
            schedules.write(groups, targets, version)

    changes = _change(scheduler, "align", "aligning the lr after load_checkpoint", align,
                      "the lr after this load is left as DeepSpeed set it")
    if changes:
        state.fixes += 1
        log.info("%s: %s after load_checkpoint (the scheduler resumed at iteration %s; the optimizer's lr "
                 "was not restored from the checkpoint)", name, "; ".join(changes), scheduler.last_batch_iteration)


def _change(scheduler: Any, key: str, what: str, action: Callable[[], object], consequence: str,
            all_groups: bool = False) -> list[str] | None:
    """The one way the patch changes a scheduler: snapshot, act, restore on error and report; returns the
    groups' lr changes (every group's with ``all_groups``), or None when it failed and restored."""
    saved = None
    try:
        groups = scheduler.optimizer.param_groups
        saved = _snapshot(scheduler, groups)
        before = [schedules.lr_value(g["lr"]) for g in groups]
        action()
        after = [schedules.lr_value(g["lr"]) for g in groups]
    except Exception as error:
        if saved is not None:
            _restore(scheduler, groups, saved)
        failures.report(key, what, error, consequence)
        return None
    return [f"group {i} lr {old!r} -> {new!r}" for i, (old, new) in enumerate(zip(before, after))
            if all_groups or old != new]


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


_Snapshot = tuple[dict[str, Any], list[Any], list[Any]]


def _snapshot(scheduler: Any, groups: list[dict[str, Any]]) -> _Snapshot:
    """The scheduler's attributes, and each group's lr object with a copy of its value (a tensor lr may be
    filled in place by the release's step)."""
    return copy.copy(vars(scheduler)), [g["lr"] for g in groups], _lr_copies(groups)


def _lr_copies(groups: list[dict[str, Any]]) -> list[Any]:
    """Each group's lr as it is now: a tensor lr is cloned, since a release may change it in place."""
    return [g["lr"].clone() if hasattr(g["lr"], "clone") else g["lr"] for g in groups]


def _restore(scheduler: Any, groups: list[dict[str, Any]], saved: _Snapshot) -> None:
    attributes, objects, values = saved
    vars(scheduler).clear()
    vars(scheduler).update(attributes)
    for group, lr, value in zip(groups, objects, values):
        if hasattr(lr, "copy_") and hasattr(value, "shape"):
            lr.copy_(value)
        group["lr"] = lr
