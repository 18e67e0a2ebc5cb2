"""The public functions behind the package's names: apply(), remove(), status(), arm_from_environment().

Loaded when deepspeed is first imported in a process that imported the package, or when one of these
names is first used; the package's ``_arm`` then applies the patch for whoever imported the package
before. Imports neither torch, deepspeed, accelerate nor wrapt: targets.py wraps what it must the
moment deepspeed is imported, or at once if it already is. It waits for a module through the package's
post-import hooks, which the start-up module hands to state.py (``STATE.hooks``).
"""

import sys

from . import launcher, settings, wrapping
from .settings import Mode
from .state import STATE

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is for the type checker only; nothing here needs it at run time
    from types import ModuleType
    from typing import Any

    from .state import Hooks

_DEEPSPEED_SCHEDULES = "deepspeed.runtime.lr_schedules"  # imported by deepspeed/__init__.py


def _hooks() -> "Hooks":
    """The package's post-import hooks, as the start-up module handed them down."""
    if STATE.hooks is None:
        raise RuntimeError("the package's start-up has not handed its post-import hooks to state.py")
    return STATE.hooks


def _patch(module: "ModuleType") -> None:
    """Patch ``module``, one of the modules the package waits for, right after its import: all or nothing,
    and never out of the import except in strict mode (what was patched before stays). A hook that fires
    after remove() (it was taken from the pending ones just before) patches nothing."""
    from . import failures, targets  # imported before the lock is taken: no import under it

    name = module.__name__
    with STATE.lock:
        if not _wanted(name):
            return
        mark = wrapping.count()
        try:
            targets.PATCHERS[name](module)
        except Exception as error:
            wrapping.unwrap_since(mark)  # no half-patched release
            failures.report(f"hook:{name}", what=f"patching {name}", error=error,
                            consequence=f"{name} is left unpatched; what was patched before stays")


def _wanted(name: str) -> bool:
    """Whether ``name`` is to be patched now: while armed; the launcher also to carry ``off`` to the other nodes."""
    return STATE.mode is not None or (name == launcher.MODULE and settings.env_mode() == Mode.OFF)


def apply(mode: "str | None" = None, *, via: str = "apply()") -> str:
    """Arm the patch in ``mode`` (default: ACCELERATE_WARMUP_PATCH, else ``reset``); returns the mode it runs in.

    ACCELERATE_WARMUP_PATCH=off in the environment (or a value that is not accepted) wins over everything:
    nothing is patched, except that DeepSpeed's multi-node launcher, if this process is one, carries the value
    to the other nodes (the kill switch reaches every rank, as ``reset`` does). A ``mode`` that is not accepted
    changes nothing, with a warning. Applying again changes the mode but never wraps twice. Applied after
    deepspeed was imported, it also settles the engines and schedulers built before it that are still fresh.
    Safe from any number of threads: each call runs as if alone.
    """
    hooks = _hooks()
    with STATE.lock:  # the whole call: a hook it fires applies again (re-entrant)
        resolved = settings.resolve(mode)
        if resolved is None:  # a mode we do not understand: nothing changes (settings has warned)
            return STATE.mode or Mode.OFF
        if resolved == Mode.OFF:
            if STATE.mode is not None:
                remove()
            runner = hooks.when_imported(launcher.MODULE, _patch) if settings.env_mode() == Mode.OFF else None
            if runner is not None:
                _patch(runner)
            return resolved
        if STATE.mode is not None and resolved != STATE.mode:
            from . import log

            log.info("mode changed from %s to %s (%s)", STATE.mode, resolved, via)
        STATE.mode = resolved
        STATE.applied_by.append(via)
        late = _DEEPSPEED_SCHEDULES in sys.modules
        wrapped_before = wrapping.count()
        # again on every apply(): a module already loaded is patched at once, and only what is not wrapped
        # already is wrapped (what a reload of deepspeed put there)
        for name in hooks.waits_for:
            module = hooks.when_imported(name, _patch)
            if module is not None:
                _patch(module)
        hooks.sweep()
        if late and wrapping.count() > wrapped_before:
            _settle_live()
        return resolved


def _settle_live() -> None:
    from . import failures, nets

    try:
        nets.settle_live()
    except Exception as error:
        failures.report("settle-live", what="settling the schedulers built before the patch was applied",
                        error=error, consequence="those schedulers run as unpatched; new ones are fixed")


def remove() -> None:
    """Undo apply() and the import's arming: no hook is pending, and this patch's layer is out of every target,
    wherever it sits among other tools' wrappers (they stay working). Safe from any number of threads."""
    with STATE.lock:
        _hooks().forget_all()  # no hook pending, no importer recorded
        STATE.mode = None  # first: a wrapper that stays (another tool's plain wrapper holds it) passes through
        wrapping.unwrap_all()
        STATE.applied_by.clear()


def status() -> "dict[str, Any]":
    """What is patched, the mode, the versions seen, and the verdict per scheduler class: from what the installed
    build was seen to do (probe.py) once deepspeed is imported and patched, else from the guard table."""
    from . import installed, releases

    deepspeed_version = releases.installed("deepspeed")
    return {
        "mode": STATE.mode or Mode.OFF,
        "applied_by": list(dict.fromkeys(STATE.applied_by)),
        "patched": wrapping.in_place(),
        "lost": wrapping.lost(),  # wrapped by this patch, then taken out by another tool
        "waiting_for": _hooks().waiting_for(_patch),
        "fixes_applied": STATE.fixes,
        "would_fix": STATE.would_fix,  # warn mode: the schedulers reset mode would have changed
        "not_fixed": list(STATE.not_fixed),  # schedulers the patch saw and had to leave
        "strict": settings.strict(),
        "versions": {"deepspeed": deepspeed_version, "accelerate": releases.installed("accelerate")},
        "verdicts": installed.verdicts(deepspeed_version) if deepspeed_version else {},
        "probed": _probed(installed.probed()),
    }


def _probed(answer: "Any") -> "dict[str, Any] | None":
    """What the probe saw the installed build do (installed.Probed), as plain data; None where it has not run."""
    if answer is None:
        return None
    from . import installed

    return {"deepspeed": answer.version, "lacks": sorted(f"{name} {key}" for name, key in answer.lacks),
            "lacks_changes": installed.lacked_changes(answer),
            "step_lr": answer.step_lr, "differs_from_table": installed.disagreements(answer)}


def arm_from_environment(via: str = "environment") -> None:
    """Apply only when ACCELERATE_WARMUP_PATCH is set: what the .pth does, for a sitecustomize."""
    if settings.env_mode() is not None:
        apply(via=via)


def armed() -> bool:
    """True between an apply() that patches and the next remove()."""
    return STATE.mode is not None
