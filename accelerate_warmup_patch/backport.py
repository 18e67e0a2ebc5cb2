"""THE FIX: what the newest DeepSpeed release does where older ones differ, done where upstream did it.

Each function below backports one row (or two) of ``releases.UPSTREAM_CHANGES``, the guard table, which
says which release first carries it; whether the installed build lacks it is what the build was seen to do
(``installed.lacks``: probe.py, the table where the probe cannot run). targets.py wraps, on a build that lacks
a change, the scheduler method that carries it upstream (``WRAPPERS``):

- ``__init__`` (``settle`` after the original has run, at the same depth as upstream's fix):
  the start lr (PR #6597 WarmupLR, #7969 WarmupCosineLR), the default peak (#7360, #8171), an unknown
  warmup_type (#8151);
- ``get_lr`` before the first step (#6597, #7969): ``reference.lr_before_start``;
- ``get_lr_ratio`` of WarmupCosineLR: 0.0 before the first step (#7969), past the warmup 0.19.3's
  formula (#8142): ``reference.cosine_ratio``.

nets.py calls ``settle`` too, for a scheduler built before the patch was applied. Every lr is written
the way the running release writes it (``schedules.write``), every change goes through
``schedules.change``, and every failure through ``failures.report``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from . import failures, installed, log, record_writer, reference, releases, schedules, wrapping
from .settings import ENV_MODE, Mode
from .state import STATE


@dataclass(frozen=True)
class Construction:
    """What a WarmupLR saw when it was built: its groups' lrs (None: unknown) and whether a peak was given."""

    group_lrs: tuple[Any, ...] | None
    max_lr_given: bool


def newest_max_lrs(scheduler: Any, construction: Construction) -> list[Any] | None:
    """WarmupLR's peak lrs when none was given: each group's own lr (PR #8171; #7360 took group 0's).

    None when nothing is to change: a peak was given, or the release already picked the same.
    Raises LookupError when no peak was given but the groups' lrs at construction are unknown.
    """
    if construction.max_lr_given:
        return None
    if construction.group_lrs is None:
        raise LookupError("the groups' lrs at construction are unknown")
    own = list(construction.group_lrs)
    if [schedules.lr_value(v) for v in scheduler.max_lrs] == [schedules.lr_value(v) for v in own]:
        return None
    return own


# The newest constructor's behaviour, after this release's ----------------------------------------

def settle(scheduler: Any, construction: Construction | None, when: str, peak_known: bool = True,
           at_construction: bool = False) -> None:
    """A fresh scheduler that this release builds otherwise than the newest: build-time behaviour of the
    newest, once. Anything else is left exactly as the release made it (one built before the patch and
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
    if not installed.built_wrong(name):  # nothing to change: the record says how the patch found it
        record_writer.note(scheduler, _as_release(scheduler, name, version), first_only=True)
        return
    STATE.settled.add(scheduler)  # decided: a later net says nothing more about it
    if not schedules.is_fresh(scheduler):
        record_writer.note(scheduler, record_writer.earlier_process(
            scheduler, "it had stepped or was restored when the patch saw it"))
        if not at_construction:  # built at a later iteration, the newest release too leaves its lr
            _name_unsettled(scheduler, name, version)
        return
    warn = STATE.mode == Mode.WARN  # the same decisions and the same change, undone (schedules.change)
    changed = schedules.change(
        scheduler, key="start", what=f"starting {name} where DeepSpeed {releases.BEHAVIOR_REFERENCE} starts it",
        action=lambda: _build_as_newest(scheduler, name, construction, version, peak_known),
        consequence="that scheduler runs exactly as unpatched (this warning is not repeated)", all_groups=True)
    if changed is None:  # it failed, was undone and reported
        record_writer.note(scheduler, record_writer.Action(
            record_writer.LEFT, record_writer.group_lrs(scheduler), None, "the patch failed to start "
            f"it as DeepSpeed {releases.BEHAVIOR_REFERENCE} does and left it as DeepSpeed {version} made it"))
        return
    changes = changed.moved
    moved = [(i, old, new) for i, old, new in changes if old != new]
    new_peak = changed.result if isinstance(changed.result, tuple) else None
    peak_unknown = changed.result if isinstance(changed.result, str) else None  # why it is left as the release set it
    before, after = [old for _, old, _ in changes], [new for *_, new in changes]
    if warn and (moved or new_peak):
        STATE.would_fix += 1
        _warn_instead(scheduler, name, version, changes, new_peak, peak_unknown)
        record_writer.note(scheduler, record_writer.Action(
            record_writer.WARNED, before, after, f"warn mode: reset would have set {_what(moved, new_peak)} as "
            f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does ({_why(name, version)}); nothing was changed"))
        return
    if peak_unknown is not None:
        _peak_left(scheduler, name, peak_unknown)
    if moved:
        log.info("%s: %s %s (%s)", name, schedules.said(moved), when, _why(name, version))
    if moved or new_peak:
        STATE.fixes += 1
        record_writer.note(scheduler, record_writer.Action(
            record_writer.FIXED, before, after, f"the patch set {_what(moved, new_peak)} as "
            f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does ({_why(name, version)})"))
    elif peak_unknown is not None:
        record_writer.note(scheduler, record_writer.Action(
            record_writer.LEFT, after, None, f"its default peak lr is left as DeepSpeed {version} set it "
            f"({peak_unknown})"))
    else:
        record_writer.note(scheduler, record_writer.Action(
            record_writer.AS_RELEASE, after, after, f"its start already agreed with DeepSpeed "
            f"{releases.BEHAVIOR_REFERENCE}'s: nothing to change"))


def _what(moved: list[schedules.Moved], peak: Peak | None) -> str:
    """What reset mode changes of a scheduler, for the record: its start lr, its default peak lr, or both."""
    return " and ".join(part for part, done in (("its start lr", moved), ("its default peak lr", peak)) if done)


def _as_release(scheduler: Any, name: str, version: str) -> record_writer.Action:
    """A scheduler of a class this release builds as the newest does, as the patch first found it."""
    if not schedules.is_fresh(scheduler):
        return record_writer.earlier_process(scheduler, "it had stepped or was restored when the patch saw it")
    now = record_writer.group_lrs(scheduler)
    return record_writer.Action(record_writer.AS_RELEASE, now, now, f"DeepSpeed {version} starts {name} as "
                                f"DeepSpeed {releases.BEHAVIOR_REFERENCE} does: nothing to change")


def _warn_instead(scheduler: Any, name: str, version: str, changes: list[schedules.Moved], peak: Peak | None,
                  peak_unknown: str | None) -> None:
    """Warn mode: one line per scheduler, on rank 0, with what reset mode would change and nothing changed."""
    parts = []
    if any(old != new for _, old, new in changes):
        parts.append(f"optimizer step 0 will run at lr {_lrs([old for _, old, _ in changes])} ({_why(name, version)}), "
                     f"DeepSpeed {releases.BEHAVIOR_REFERENCE} runs it at {_lrs([new for *_, new in changes])}")
    if peak is not None:
        parts.append(f"with no warmup_max_lr its peak lr is {schedules.fmt(peak[0])} (DeepSpeed {version}: "
                     f"{installed.max_lr_default().value}), DeepSpeed {releases.BEHAVIOR_REFERENCE}'s "
                     f"is {schedules.fmt(peak[1])} (each group's own lr)")
    if peak_unknown is not None:  # said here, in the scheduler's one line, not in a second one
        parts.append(f"its peak lr {schedules.fmt(list(scheduler.max_lrs))} stays ({peak_unknown}; DeepSpeed "
                     f"{releases.BEHAVIOR_REFERENCE} would use each group's own lr if none was given)")
    log.warn_job_once(f"warn:{id(scheduler)}", "%s: %s; %s=reset fixes it", name, "; ".join(parts), ENV_MODE)


def _lrs(values: list[float]) -> str:
    """One group's lr as a number, several as a list."""
    return repr(values[0]) if len(values) == 1 else schedules.fmt(values)


# a WarmupLR's peak lrs before and after the newest default (PR #8171)
Peak = tuple[list[Any], list[Any]]


def _build_as_newest(scheduler: Any, name: str, construction: Construction | None, version: str,
                     peak_known: bool) -> Peak | str | None:
    """What the newest constructor does after this release's: returns the peak's change, if it changed, or why the
    default peak could not be decided (it is left as the release set it)."""
    if installed.lacks("unknown_warmup_type", name) and scheduler.warmup_type not in ("log", "linear"):
        if not getattr(STATE.dry, "on", False):  # warn mode's dry run adds no line of DeepSpeed's
            from deepspeed.utils import logger  # DeepSpeed's own words, as 0.19.4+ logs them (PR #8151)

            logger.warning(f"Using unknown warmup_type: {scheduler.warmup_type}. The increasing function "
                           f"is set to default (log)")
        scheduler.warmup_type = "log"
    peak = _backport_default_peak(scheduler, name, construction, version) \
        if peak_known and installed.lacks("default_peak", name) else None
    if installed.lacks("start", name):  # the newest constructor's last line, asking the instance
        scheduler._last_lr = schedules.write(scheduler.optimizer.param_groups, scheduler.get_lr())
    return peak


def _backport_default_peak(scheduler: Any, name: str, construction: Construction | None,
                           version: str) -> Peak | str | None:
    """WarmupLR without a warmup_max_lr peaks at each group's own lr on the newest release (PR #8171). Returns the
    change, or why it could not be decided (the caller says it once)."""
    try:
        if construction is None or (construction.group_lrs is None and not construction.max_lr_given):
            new_max = _newest_max_lrs_unseen(scheduler, name, version, construction)
        else:
            new_max = newest_max_lrs(scheduler, construction)
    except LookupError as unknown:
        return str(unknown)
    if new_max is None:
        return None
    old_max = list(scheduler.max_lrs)
    scheduler.max_lrs = new_max
    scheduler.delta_lrs = [big - small for big, small in zip(new_max, scheduler.min_lrs)]
    if STATE.mode != Mode.WARN:  # warn mode says it in its one line per scheduler (_warn_instead)
        log.warn_once(f"peak:{id(scheduler)}", "%s: no warmup_max_lr was given: peak lr %s -> %s (each group's own "
                      "lr, the default of DeepSpeed %s; DeepSpeed %s's default is %s)", name, schedules.fmt(old_max),
                      schedules.fmt(new_max), releases.BEHAVIOR_REFERENCE, version,
                      installed.max_lr_default().value)
    return old_max, new_max


def _newest_max_lrs_unseen(scheduler: Any, name: str, version: str,
                           construction: Construction | None) -> list[Any] | None:
    """``newest_max_lrs`` for a WarmupLR whose construction the patch did not see, from what the instance shows.

    Its peak lrs tell where this release's default could not have made them; a fresh scheduler of a release that
    leaves the optimizer's lr still has its construction lrs in the groups (lr_schedules.py @ v0.9.0..v0.19.3).
    Raises LookupError where the newest release might peak elsewhere and the instance cannot tell."""
    peaks = [schedules.lr_value(v) for v in scheduler.max_lrs]
    default = installed.max_lr_default()
    if default is releases.MaxLrDefault.CONSTANT and any(v != releases.DEFAULT_PEAK for v in peaks):
        return None  # the default is 0.001 for every group (warmup_max_lr: float = 0.001): a peak was given
    if default is releases.MaxLrDefault.GROUP_0 and (len(peaks) == 1 or len(set(peaks)) > 1):
        # one group: the default, group 0's lr, is the newest's (each group's own); unequal peaks were given
        return None
    if installed.start(name) is releases.Start.LEAVES_OPTIMIZER_LR and schedules.is_fresh(scheduler):
        # the groups hold the lrs it was built with: given or not, the newest may peak where this one does
        groups = tuple(schedules.lr_copies(scheduler.optimizer.param_groups))
        if newest_max_lrs(scheduler, Construction(groups, max_lr_given=False)) is None:
            return None
    raise LookupError("whether it was given a warmup_max_lr is unknown" if construction is None else
                      "the groups' lrs at construction are unknown")


def _peak_left(scheduler: Any, name: str, unknown: str) -> None:
    log.warn_once(f"peak-unknown:{id(scheduler)}", "%s was built before the patch was applied (%s): its "
                  "peak lr is left at %s; DeepSpeed %s would use each group's own lr if none was given",
                  name, unknown, schedules.fmt(list(scheduler.max_lrs)), releases.BEHAVIOR_REFERENCE)


def _name_unsettled(scheduler: Any, name: str, version: str) -> None:
    """A scheduler built before the patch and set to a later iteration without a step, on a release that
    starts it wrong: the newest release writes the start lr for one built fresh and then resumed, and leaves
    the lr of one built at that iteration. Both look the same now, so its lr is left and the user is told."""
    optimizer = scheduler.optimizer
    if not installed.lacks("start", name) or getattr(scheduler, "_last_lr", None) is not None or \
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


# The wrappers of the scheduler methods that carry a change upstream --------------------------------

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


def _get_lr(original: Callable[..., Any], version: str) -> Callable[..., Any]:
    return _get_lr_wrapper


def _get_lr_wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
    mode = STATE.mode  # passes through unarmed, and in warn mode outside its dry run (STATE.dry)
    if mode is None or (mode == Mode.WARN and not getattr(STATE.dry, "on", False)) or instance is None:
        return wrapped(*args, **kwargs)
    # Before the first step the release's get_lr logs a warning, as the newest's does: reset and step mode let it
    # say it where the newest does. Warn mode's dry run is no call of the user's: it adds no line of DeepSpeed's.
    result = wrapped(*args, **kwargs) if mode != Mode.WARN else None
    try:
        if instance.last_batch_iteration < 0:
            return reference.lr_before_start(instance, schedules.class_name(instance) or "")
    except Exception as error:
        failures.report("get_lr", what=f"get_lr() of {type(instance).__name__} before its first step", error=error,
                        consequence="get_lr() returns what this DeepSpeed returns")
    return wrapped(*args, **kwargs) if mode == Mode.WARN else result


def _get_lr_ratio(original: Callable[..., Any], version: str) -> Callable[..., Any]:
    """WarmupCosineLR.get_lr_ratio, called on every step: what this release lacks is decided once, here."""
    before_start = installed.lacks("ratio_before_start", "WarmupCosineLR")
    past_warmup = installed.lacks("ratio_past_warmup", "WarmupCosineLR")

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        mode = STATE.mode  # passes through unarmed, and in warn mode outside its dry run (STATE.dry)
        if mode is None or (mode == Mode.WARN and not getattr(STATE.dry, "on", False)) or instance is None or \
                args or kwargs:
            return wrapped(*args, **kwargs)  # it takes no arguments: given some, the original says so itself
        try:
            before = before_start and instance.last_batch_iteration < 0
            past = not before and past_warmup and instance.last_batch_iteration >= instance.warmup_num_steps
            ratio = reference.cosine_ratio(instance) if past else None
        except Exception as error:
            failures.report("get_lr_ratio", what=f"get_lr_ratio() of {type(instance).__name__}", error=error,
                            consequence="get_lr_ratio() returns what this DeepSpeed returns")
            return wrapped()
        if before:
            if mode != Mode.WARN:  # the release's warning, as the newest logs it; warn mode's dry run adds none
                wrapped()
            return 0.0
        return wrapped() if ratio is None else ratio

    return wrapper


# method -> its wrapper's maker, given the original and the running release (targets.py wraps with it)
WRAPPERS: Mapping[str, Callable[[Callable[..., Any], str], Callable[..., Any]]] = MappingProxyType({
    "__init__": _constructor, "get_lr": _get_lr, "get_lr_ratio": _get_lr_ratio,
})
