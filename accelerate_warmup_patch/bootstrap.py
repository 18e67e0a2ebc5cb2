"""Post-import hooks with the standard library alone: one finder, no lock held across an import.

On the start-up path of every armed process, so it stays small: wrapt's own importer would do, but
importing wrapt costs ~50 ms. A hook fires at once when its module is already imported, otherwise
right after the module's code has run (in the loader, not in ``find_spec``: a probe such as
``importlib.util.find_spec("deepspeed")`` is not an import). The finder sits first on
``sys.meta_path`` only while a hook is pending. A hook that fails is reported through
``failures.report``: a warning, or in strict mode an exception out of the user's import.

Imports in other threads fire hooks and the API registers and cancels them while a hook runs: every
walk over the pending hooks is over a snapshot, and one lock guards this module's bookkeeping alone.
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

_hooks: "dict[str, list[Hook]]" = {}
# modules whose code has run through our loader and whose hooks have all been called, until importlib
# marks them initialized: a hook registered for one of them is called at once, as for a loaded module
_ran: "dict[str, ModuleType]" = {}
# Guards _hooks, _ran and our finder's place on sys.meta_path: other threads' imports and API calls
# touch them. Held only around that bookkeeping, never across an import or a hook call (a hook imports,
# and an import in another thread may wait on one this thread holds). _thread is built in and loaded.
_lock = _thread.RLock()
# who imported the package before the rest of it was loaded: ".pth", "sitecustomize", "import"
importers: "list[str]" = []


def _fire(module: "ModuleType") -> None:
    """Run the hooks of ``module`` (also those registered while they run: the arming hook registers some),
    then those of any pending module that finished loading meanwhile."""
    name = module.__name__
    while True:
        with _lock:
            hooks = _hooks.pop(name, None)
            if not hooks:
                _ran[name] = module  # under the same lock as when_imported's check: no hook falls between
                break
        for hook in hooks:
            _call(hook, module)
    sweep()


def sweep() -> None:
    """Fire the hooks of modules that finished loading without this finder's loader: registered while
    their import was already under way (in this thread, or in another one)."""
    with _lock:
        names = list(_hooks)  # a snapshot: other threads register and fire while the hooks below run
    for name in names:
        module = _ready(name)
        if module is not None:
            for hook in _take(name):
                _call(hook, module)
    with _lock:
        _forget_initialized()
        _leave_if_idle()


def _take(name: str) -> "list[Hook]":
    """The pending hooks of ``name``, now no longer pending: each is called by one thread only."""
    with _lock:
        return _hooks.pop(name, [])


def _call(hook: "Hook", module: "ModuleType") -> None:
    try:
        hook(module)
    except Exception as error:  # the hook's own failure policy came first; this is the last net
        from . import failures

        name = module.__name__
        failures.report(f"hooks:{name}", f"patching {name}", error, f"{name} is left unpatched")


def _loaded(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False)


def _ready(name: str) -> "ModuleType | None":
    """The module ``name`` if a hook may run on it now: imported, or its code run and its hooks called."""
    if _loaded(name):
        return sys.modules.get(name)
    module = sys.modules.get(name)
    return module if module is not None and _ran.get(name) is module else None


def _forget_initialized() -> None:
    """Drop the modules importlib has finished (``_loaded`` answers for them) or that left sys.modules."""
    for name, module in list(_ran.items()):
        if sys.modules.get(name) is not module or _loaded(name):
            del _ran[name]


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
    """Answers only for modules with pending hooks: the other finders' spec, with a loader that fires them."""

    def __init__(self) -> None:
        self._looking_up: set[str] = set()  # find_spec runs under the global import lock: no race here

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname not in _hooks or fullname in self._looking_up:
            return None
        self._looking_up.add(fullname)
        try:
            spec = _find_elsewhere(fullname, path, target)
        finally:
            self._looking_up.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader)  # type: ignore[assignment]
        return spec


def _find_elsewhere(fullname: str, path: "Sequence[str] | None", target: "ModuleType | None") -> "ModuleSpec | None":
    for finder in list(sys.meta_path):
        if _is_ours(finder) or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None


def _is_ours(finder: object) -> bool:
    """Also true for the finder of an earlier copy of this module (importlib.reload): never two."""
    return type(finder).__module__ == __name__ and type(finder).__qualname__ == "_Finder"


def when_imported(name: str, hook: "Hook") -> None:
    """Call ``hook(module)`` now if ``name`` is imported, else right after it is."""
    with _lock:  # the check and the registration in one step: _fire marks a module ran under this lock
        module = _ready(name)
        if module is None:
            hooks = _hooks.setdefault(name, [])
            if hook not in hooks:
                hooks.append(hook)
            _enter()
            return
    _call(hook, module)


def cancel(hook: "Hook") -> None:
    """Forget a hook that has not fired yet."""
    with _lock:
        for name, hooks in list(_hooks.items()):
            kept = [h for h in hooks if h is not hook]
            if kept:
                _hooks[name] = kept
            else:
                del _hooks[name]
        _leave_if_idle()


def cancel_all() -> None:
    """Forget every pending hook and every recorded importer: nothing is armed any more."""
    with _lock:
        _hooks.clear()
        importers.clear()
        _leave_if_idle()


def _enter() -> None:
    if not any(_is_ours(f) for f in sys.meta_path):
        # a new list, not an insert: another thread may be iterating over the old one right now
        sys.meta_path = [_Finder(), *sys.meta_path]


def _leave_if_idle() -> None:
    if not _hooks and any(_is_ours(f) for f in sys.meta_path):
        sys.meta_path = [f for f in sys.meta_path if not _is_ours(f)]  # a new list, as above


def pending(among: "Sequence[Hook]") -> "list[str]":
    """The modules that one of ``among`` still waits for."""
    with _lock:
        snapshot = [(name, list(hooks)) for name, hooks in _hooks.items()]
    return [name for name, hooks in snapshot if any(hook in among for hook in hooks)]
