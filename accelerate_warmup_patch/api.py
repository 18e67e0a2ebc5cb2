"""The public functions behind the package's names: apply(), remove(), status(), arm_from_environment().

Loaded when deepspeed or accelerate is first imported in a process that imported the package, or
when one of these names is first used; ``take_over`` then arms the patch for whoever imported the
package before. Imports neither torch, deepspeed, accelerate nor wrapt: the wrappers are installed
the moment deepspeed or accelerate is imported, or at once if they already are.
"""

import sys

from . import bootstrap, settings
from .settings import Mode

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is for the type checker only; nothing here needs it at run time
    from typing import Any

# module name -> "module_of_this_package.function" that patches it, called right after it is imported
_TARGETS = {
    "deepspeed": "patch.patch_deepspeed",
    "deepspeed.runtime.lr_schedules": "patch.patch_lr_schedules",
    "deepspeed.runtime.engine": "patch.patch_engine",
    "accelerate.utils.deepspeed": "patch.patch_accelerate",
    "deepspeed.launcher.multinode_runner": "launcher.patch_runners",
}
_applied_by: "list[str]" = []
_mode: "str | None" = None


def _hook_for(target: str) -> "bootstrap.Hook":
    module_name, function_name = target.split(".")

    def hook(module: "Any") -> None:
        import importlib

        from . import patch

        patch.state.mode = _mode or settings.DEFAULT
        try:
            getattr(importlib.import_module(f"{__package__}.{module_name}"), function_name)(module)
        except Exception as error:
            if settings.strict():
                raise
            patch.warn_once(f"hook:{module.__name__}", "patching %s failed (%r); it is left unpatched",
                            module.__name__, error)

    hook.__qualname__ = f"accelerate_warmup_patch.{target}"
    return hook


_HOOKS = {name: _hook_for(function) for name, function in _TARGETS.items()}


def apply(mode: "str | None" = None, *, via: str = "apply()") -> str:
    """Arm the patch in ``mode`` (default: ACCELERATE_WARMUP_PATCH, else ``reset``); returns the mode.

    ACCELERATE_WARMUP_PATCH=off in the environment wins over everything: nothing is patched.
    Applying again changes the mode but never wraps twice.
    """
    global _mode
    resolved = settings.resolve(mode)
    if resolved == Mode.OFF:
        if _mode is not None:
            remove()
        return resolved
    if _mode is not None:
        if resolved != _mode:
            import logging

            logging.getLogger("accelerate_warmup_patch").info("mode changed from %s to %s (%s)", _mode, resolved, via)
        _mode = resolved
        _sync_loaded_patch()
        _applied_by.append(via)
        return resolved
    _mode = resolved
    _applied_by.append(via)
    for name, hook in _HOOKS.items():
        bootstrap.when_imported(name, hook)
    return resolved


def _sync_loaded_patch() -> None:
    patch = sys.modules.get("accelerate_warmup_patch.patch")
    if patch is not None and _mode is not None:
        patch.state.mode = _mode


def remove() -> None:
    """Undo apply(): pending hooks are dropped and every wrapped function is the original again."""
    global _mode
    for hook in _HOOKS.values():
        bootstrap.cancel(hook)
    patch = sys.modules.get("accelerate_warmup_patch.patch")
    if patch is not None:
        patch.unpatch_all()
    _mode = None
    _applied_by.clear()


def status() -> "dict[str, Any]":
    """What is patched, the mode, the versions seen, and the table's verdict per scheduler class."""
    from . import releases

    patch = sys.modules.get("accelerate_warmup_patch.patch")
    patched = [p.label for p in patch.state.patched] if patch else []
    deepspeed_version = _version_of("deepspeed")
    return {
        "mode": _mode or Mode.OFF,
        "applied_by": list(dict.fromkeys(_applied_by)),
        "patched": patched,
        "waiting_for": list(bootstrap.pending()),
        "fixes_applied": patch.state.fixes if patch else 0,
        "strict": settings.strict(),
        "versions": {"deepspeed": deepspeed_version, "accelerate": _version_of("accelerate")},
        "verdicts": {name: releases.verdict(name, deepspeed_version) for name in releases.scheduler_classes()}
        if deepspeed_version else {},
    }


def _version_of(distribution: str) -> "str | None":
    module = sys.modules.get(distribution)
    if module is not None and hasattr(module, "__version__"):
        return str(module.__version__)
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def arm_from_environment(via: str = "environment") -> None:
    """Apply only when ACCELERATE_WARMUP_PATCH asks for it: the entry point for .pth and sitecustomize."""
    if settings.env_mode() not in (None, Mode.OFF):
        apply(via=via)


def take_over(pending: "list[str]") -> None:
    """Arm the patch for each importer the package recorded before this module was loaded."""
    while pending:
        via = pending.pop(0)
        if via == ".pth":  # the .pth only saw the variable set: its value is read here, in one place
            arm_from_environment(via)
        else:
            apply(via=via)
