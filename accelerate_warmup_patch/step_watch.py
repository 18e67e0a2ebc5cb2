"""The first-step watch, for the record (record_writer.py): the lr this process's first optimizer step really ran
at (after a load: its first step after it).

Where the patch already sees an engine (the initialize net, and after each load_checkpoint) it registers a torch
optimizer step pre-hook (``Optimizer.register_step_pre_hook``, torch 2.0+) on the engine's torch optimizer. At the
first optimizer step it reads each group's lr, the scheduler's ``last_batch_iteration`` and ``engine.global_steps``.
torch iterates the pre-hooks while it calls them, and a hook that removes itself there breaks the hook after it
(``OrderedDict mutated during iteration``), so a post-hook it registers removes it at the end of that same step,
and then itself: nothing is left on a steady step. What the record says is what the step ran at, never what the
patch meant it to run at: a restore after the patch set the lr shows.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from . import record_data, schedules
from .state import STATE


@dataclass
class Watch:
    """One engine's watch of the next optimizer step in this process (its first, or its first after a load)."""

    handle: Any = None  # the torch pre-hook's handle while registered
    cleanup: Any = None  # the post-hook that removes it after the first step, while registered
    groups: list[Any] = field(default_factory=list)  # the groups when registered (ZeRO 1/2 step one at a time)
    seen: dict[str, Any] | None = None  # what the step ran at: lrs, global_steps, last_batch_iteration
    why_not: str | None = None  # why it cannot be seen (no torch hook, no optimizer, a failure)


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
            weakref.finalize(engine, STATE.loaded.pop, key, None)
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
            "global_steps": count(getattr(engine, "global_steps", None)),
            "skipped_steps": count(getattr(engine, "skipped_steps", None)),
            "last_batch_iteration": count(iteration)}


def count(value: Any) -> int | None:
    """A count as the record holds it: an int (not a bool), else None."""
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
