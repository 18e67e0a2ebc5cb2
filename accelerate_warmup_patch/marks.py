"""The record a patched run leaves beside each checkpoint: what the patch did about each scheduler's step 0.

Where the patch already acts (``backport.settle``, step mode's one step, the load_checkpoint net), it notes what
it did about optimizer step 0 of that scheduler (``note``); nothing of this runs on an optimizer step. After
``DeepSpeedEngine.save_checkpoint`` returns, while the patch is armed, global rank 0 writes the note of the
engine's scheduler as plain JSON into the tag folder, ``<save_dir>/<tag>/accelerate_warmup_patch.json`` (record 1,
docs/mark.md), so that ``audit`` can tell a run the patch fixed from one it only warned about.

A file of its own, because each other place changes what a user sees: a key of the model-states file comes back
in the client_state that load_checkpoint returns, and a key in the scheduler's state is loaded into the scheduler.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import failures, releases, schedules, settings, wrapping
from .state import STATE

FILE_NAME = "accelerate_warmup_patch.json"
RECORD = 1

# what this process's patch did about optimizer step 0 of a scheduler (the record's "step0")
FIXED = "fixed"  # changed its build-time behaviour (reset), or stepped it once before the first step (step)
WARNED = "warned"  # warn mode: reset would have changed it, and nothing was changed
AS_RELEASE = "as-release"  # fresh when seen, and the release already starts it as the reference does
EARLIER_PROCESS = "earlier-process"  # had stepped, or was restored, when seen: step 0 ran in an earlier process
LEFT = "left"  # the patch could not decide, or failed, and left it as the release made it (a warning said so)
UNKNOWN = "unknown"  # not one of DeepSpeed's schedulers, or the patch never saw it


@dataclass(frozen=True)
class Step0:
    """What the patch did about one scheduler's optimizer step 0, with each group's lr before and after."""

    what: str
    lrs_before: list[float] | None
    lrs_after: list[float] | None
    why: str


def note(scheduler: object, step0: Step0, first_only: bool = False) -> None:
    """Remember ``step0`` for ``scheduler`` until it dies (``first_only``: unless something is noted already).

    An object without ``__weakref__`` is not remembered: its id could be reused by a newer object."""
    key = id(scheduler)
    notes = STATE.step0
    if key in notes:
        if not first_only:
            notes[key] = step0
        return
    try:
        weakref.finalize(scheduler, notes.pop, key, None)
    except TypeError:
        return
    notes[key] = step0


def noted(scheduler: object) -> Step0 | None:
    """What was noted for ``scheduler``; None when the patch never saw it."""
    found = STATE.step0.get(id(scheduler))
    return found if isinstance(found, Step0) else None


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


def earlier_process(scheduler: Any, how: str) -> Step0:
    """A scheduler past step 0 when the patch saw it (``how``): its step 0 ran in an earlier process."""
    return Step0(EARLIER_PROCESS, None, None, f"{how} at iteration {getattr(scheduler, 'last_batch_iteration', '?')}: "
                 "its optimizer step 0 ran in an earlier process")


# The save ------------------------------------------------------------------------------------------------

def save_checkpoint_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """``DeepSpeedEngine.save_checkpoint``: the original first, its result returned unchanged; then the record."""
    import inspect

    signature = inspect.signature(original)

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        result = wrapped(*args, **kwargs)
        if not settings.record_wanted():  # ACCELERATE_WARMUP_PATCH_RECORD=off: no record (docs/mark.md)
            return result
        mode = STATE.mode
        if mode is not None and instance is not None:
            try:
                if _writer_rank(instance) != 0:
                    return result
                bound = signature.bind(instance, *args, **kwargs)
                bound.apply_defaults()
                tag = bound.arguments["tag"]
                # the tag the original used: with none given, f"global_step{self.global_steps}" (engine.py's
                # save_checkpoint @ v0.9.0, v0.14.4, v0.15.2, v0.19.8; it does not move global_steps)
                folder = os.path.join(bound.arguments["save_dir"],
                                      f"global_step{instance.global_steps}" if tag is None else str(tag))
                write(folder, record(instance, mode))
            except Exception as error:  # the checkpoint is saved: never break the user's save
                failures.report("mark", what="writing the patch's record beside the checkpoint", error=error,
                                consequence="the checkpoint is saved without it; audit judges that run as it judges "
                                "an unpatched one")
        return result

    return wrapper


def _writer_rank(engine: Any) -> int:
    """The rank whose 0 writes the record: the one save_checkpoint itself makes ``save_dir`` with. With
    ``checkpoint.use_node_local_storage`` each node saves into a folder of its own, and DeepSpeed uses the local rank
    (``rank = self.local_rank if self.use_node_local_storage() else self.global_rank``: engine.py's
    save_checkpoint @ v0.9.0, v0.12.6, v0.15.2, v0.19.8), so that every node's tag folder gets its record."""
    node_local = getattr(engine, "use_node_local_storage", None)
    if callable(node_local) and node_local() is True and isinstance(getattr(engine, "local_rank", None), int):
        return int(engine.local_rank)
    return _global_rank(engine)


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


def record(engine: Any, mode: str) -> dict[str, Any]:
    """Record 1: the package, the mode, the releases, the step, and what the patch did about step 0."""
    return {
        "record": RECORD,
        "package": "accelerate-warmup-patch",
        "version": str(getattr(sys.modules.get(__package__ or ""), "__version__", "unknown")),
        "mode": mode,
        "deepspeed": wrapping.deepspeed_version(),
        "reference": releases.BEHAVIOR_REFERENCE,
        "global_steps": int(engine.global_steps),
        "scheduler": _scheduler(getattr(engine, "lr_scheduler", None)),
    }


def _scheduler(scheduler: Any) -> dict[str, Any] | None:
    if scheduler is None:
        return None
    name = schedules.class_name(scheduler)
    kind = type(scheduler)
    step0 = noted(scheduler)
    if step0 is None:
        why = "the patch never saw this scheduler" if name else "not one of DeepSpeed's schedulers: the patch leaves it"
        step0 = Step0(UNKNOWN, None, None, why)
    return {"class": name or f"{kind.__module__}.{kind.__qualname__}", "step0": step0.what,
            "lrs_before": step0.lrs_before, "lrs_after": step0.lrs_after, "why": step0.why}


def write(folder: str, data: dict[str, Any]) -> None:
    """``folder``/accelerate_warmup_patch.json, whole or not at all: a temporary file beside it, then os.replace."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"no checkpoint folder {folder!r} (a checkpoint engine that writes elsewhere?)")
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    temporary = os.path.join(folder, f".{FILE_NAME}.{os.urandom(6).hex()}")
    # the permissions of the checkpoint's own files (0666 less the umask), not mkstemp's 0600: an admin audits it
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, os.path.join(folder, FILE_NAME))
    except BaseException:
        os.unlink(temporary)
        raise
