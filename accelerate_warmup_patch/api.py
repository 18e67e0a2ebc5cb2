"""The public functions behind the package's names: apply(), remove(), status(), arm_from_environment().

Loaded when deepspeed or accelerate is first imported in a process that imported the package, or
when one of these names is first used; the package's ``_arm`` then applies the patch for whoever
imported the package before. Imports neither torch, deepspeed, accelerate nor wrapt: the wrappers are installed
the moment deepspeed or accelerate is imported, or at once if they already are.
"""

import sys

# the package's __init__ holds the one post-import hook (the start-up path: one module); read at each
# call, as importlib.reload of the package makes its bookkeeping anew
import accelerate_warmup_patch as package

from . import settings
from .settings import Mode

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is for the type checker only; nothing here needs it at run time
    from types import ModuleType
    from typing import Any

    from . import Hook

# module name -> "module_of_this_package.function" that patches it, called right after it is imported.
# deepspeed's hook reaches its submodules itself: deepspeed/__init__.py has imported them by then,
# and only then is deepspeed.__version__, which decides what is wrapped, set.
_LAUNCHER = "deepspeed.launcher.multinode_runner"
_DEEPSPEED_SCHEDULES = "deepspeed.runtime.lr_schedules"  # imported by deepspeed/__init__.py
_TARGETS = {
    "deepspeed": "patch.patch_deepspeed",
    "accelerate.utils.deepspeed": "patch.patch_accelerate",
    _LAUNCHER: "launcher.patch_runners",
}
_applied_by: "list[str]" = []
# the one record of the mode: None while nothing is armed; the wrappers read it on every call
active_mode: "str | None" = None


def _patch(module: "ModuleType") -> None:
    """Patch ``module``, one of _TARGETS, right after its import: all or nothing, and never out of the
    import except in strict mode (what was patched before stays)."""
    import importlib

    from . import failures, patch

    name = module.__name__
    mark = len(patch.state.patched)
    try:
        module_name, function_name = _TARGETS[name].split(".")
        getattr(importlib.import_module(f"{__package__}.{module_name}"), function_name)(module)
    except Exception as error:
        patch.unpatch_since(mark)  # no half-patched release
        failures.report(f"hook:{name}", f"patching {name}", error,
                        f"{name} is left unpatched; what was patched before stays")


def apply(mode: "str | None" = None, *, via: str = "apply()") -> str:
    """Arm the patch in ``mode`` (default: ACCELERATE_WARMUP_PATCH, else ``reset``); returns the mode.

    ACCELERATE_WARMUP_PATCH=off in the environment wins over everything: nothing is patched, except
    that DeepSpeed's multi-node launcher, if this process is one, carries ``off`` to the other nodes
    (the kill switch reaches every rank, as ``reset`` does). Applying again changes the mode but never
    wraps twice. Applied after deepspeed was imported, it also settles the engines and schedulers
    built before it that are still fresh.
    """
    global active_mode
    resolved = settings.resolve(mode)
    if resolved == Mode.OFF:
        if active_mode is not None:
            remove()
        launcher = package._when_imported(_LAUNCHER, _patch) if settings.env_mode() == Mode.OFF else None
        if launcher is not None:
            _patch(launcher)
        return resolved
    if active_mode is not None and resolved != active_mode:
        from . import log

        log.info("mode changed from %s to %s (%s)", active_mode, resolved, via)
    active_mode = resolved
    _applied_by.append(via)
    late = _DEEPSPEED_SCHEDULES in sys.modules
    wrapped_before = _wrapped_count()
    # again on every apply(): a module already loaded is patched at once, and only what is not wrapped
    # already is wrapped (what a reload of deepspeed put there)
    for name in _TARGETS:
        module = package._when_imported(name, _patch)
        if module is not None:
            _patch(module)
    package._sweep()
    if late and _wrapped_count() > wrapped_before:
        _settle_live()
    return resolved


def _wrapped_count() -> int:
    patch = sys.modules.get("accelerate_warmup_patch.patch")
    return len(patch.state.patched) if patch is not None else 0


def _settle_live() -> None:
    from . import failures, patch

    try:
        patch.settle_live()
    except Exception as error:
        failures.report("settle-live", "settling the schedulers built before the patch was applied", error,
                        "those schedulers run as unpatched; new ones are fixed")


def remove() -> None:
    """Undo apply() and the import's arming: no hook is pending, every wrapped function is the original."""
    global active_mode
    with package._lock:  # no hook pending, no importer recorded
        package._hooks.clear()
        del package._importers[:]
        package._leave_if_idle()
    patch = sys.modules.get("accelerate_warmup_patch.patch")
    if patch is not None:
        patch.unpatch_all()
    active_mode = None
    _applied_by.clear()


def status() -> "dict[str, Any]":
    """What is patched, the mode, the versions seen, and the table's verdict per scheduler class."""
    from . import releases

    patch = sys.modules.get("accelerate_warmup_patch.patch")
    patched = patch.in_place() if patch else []
    deepspeed_version = releases.installed("deepspeed")
    return {
        "mode": active_mode or Mode.OFF,
        "applied_by": list(dict.fromkeys(_applied_by)),
        "patched": patched,
        "waiting_for": _waiting_for(_patch),
        "fixes_applied": patch.state.fixes if patch else 0,
        "not_fixed": list(patch.state.not_fixed) if patch else [],  # schedulers the patch saw and had to leave
        "strict": settings.strict(),
        "versions": {"deepspeed": deepspeed_version, "accelerate": releases.installed("accelerate")},
        "verdicts": releases.verdicts(deepspeed_version) if deepspeed_version else {},
    }


def cancel(hook: "Hook") -> None:
    """Forget a hook that has not been called yet."""
    with package._lock:
        for name, hooks in list(package._hooks.items()):
            kept = [h for h in hooks if h is not hook]
            if kept:
                package._hooks[name] = kept
            else:
                del package._hooks[name]
        package._leave_if_idle()


def _waiting_for(hook: "Hook") -> "list[str]":
    """The modules for which ``hook`` waits."""
    with package._lock:
        return [name for name, hooks in package._hooks.items() if hook in hooks]


def arm_from_environment(via: str = "environment") -> None:
    """Apply only when ACCELERATE_WARMUP_PATCH is set: what the .pth does, for a sitecustomize."""
    if settings.env_mode() is not None:
        apply(via=via)


def armed() -> bool:
    """True between an apply() that patches and the next remove()."""
    return active_mode is not None
