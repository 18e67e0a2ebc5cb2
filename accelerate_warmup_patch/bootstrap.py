"""Post-import hooks with the standard library alone.

wrapt's own importer would do, but importing wrapt costs ~50 ms, and these hooks are registered in
every process that imports deepspeed or accelerate with the patch armed, whether it trains or not.
A hook fires at once when its module is already imported, otherwise right after the module's code
has run. A hook must never break the user's import: each one is called inside try/except and only
logs.
"""

import _thread
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and importlib.abc cost milliseconds, and only the type checker needs them
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    Hook = Callable[[ModuleType], None]

_lock = _thread.RLock()
_hooks: "dict[str, list[Hook]]" = {}


def warn(message: str, *args: object) -> None:
    import logging

    logging.getLogger("accelerate_warmup_patch").warning(message, *args, exc_info=True)


def _fire(module: "ModuleType") -> None:
    with _lock:
        hooks = _hooks.pop(module.__name__, [])
    for hook in hooks:
        try:
            hook(module)
        except Exception:  # a hook must not break the user's import of its target
            warn("post-import hook for %s failed; it is left unpatched", module.__name__)


class _Loader:
    """Delegates to the real loader, then fires the hooks of the module it just ran."""

    def __init__(self, loader: "Any") -> None:
        self._loader = loader

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: "ModuleType") -> None:
        module.__loader__ = self._loader  # the real one, for pkgutil, inspect and friends
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _fire(module)

    def __getattr__(self, name: str) -> "Any":
        return getattr(self._loader, name)


class _Finder:
    """Sits first on sys.meta_path and only answers for modules that have pending hooks."""

    _busy = _thread._local()

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname not in _hooks or getattr(self._busy, "active", False):
            return None
        self._busy.active = True
        try:
            spec = find_elsewhere(self, fullname, path, target)
        finally:
            self._busy.active = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


def find_elsewhere(me: object, fullname: str, path: "Sequence[str] | None",
                   target: "ModuleType | None") -> "ModuleSpec | None":
    """The spec that the finders on sys.meta_path other than ``me`` find for ``fullname``."""
    for finder in sys.meta_path:
        if finder is me or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


_finder = _Finder()


def when_imported(name: str, hook: "Hook") -> None:
    """Call ``hook(module)`` now if ``name`` is imported, else right after it is."""
    module = sys.modules.get(name)
    if module is not None and not _importing(module):
        try:
            hook(module)
        except Exception:
            warn("patching %s failed; it is left unpatched", name)
        return
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def _importing(module: "ModuleType") -> bool:
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def cancel(hook: "Hook") -> None:
    """Forget a hook that has not fired yet; drop the finder when none is left."""
    with _lock:
        for name in list(_hooks):
            _hooks[name] = [h for h in _hooks[name] if h is not hook]
            if not _hooks[name]:
                del _hooks[name]
        if not _hooks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)


def pending() -> "tuple[str, ...]":
    with _lock:
        return tuple(_hooks)
