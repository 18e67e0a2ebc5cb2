"""Start DeepSpeed's warmup schedulers at the warmup lr on every release.

``import accelerate_warmup_patch`` applies the patch (unless ACCELERATE_WARMUP_PATCH=off); so do the
installed .pth line, when ACCELERATE_WARMUP_PATCH is set, and a sitecustomize that imports the package.
This module is the whole start-up path of such a process: it records who imported it and waits until
deepspeed is imported (at once if it already is) or the API (``apply``, ``remove``, ``status``) is first
used; then ``api.py`` loads and has targets.py install the wrappers.

It waits through the package's one post-import hook, with the standard library alone, built the way wrapt's
``importer.py`` builds its own. ``_HookFinder``, first on ``sys.meta_path`` only while a hook is pending,
answers for those modules with the other finders' spec, whose loader it puts inside a ``_HookLoader``; that
loader runs the module and then calls its hooks (in the loader, not in ``find_spec``: a probe such as
``importlib.util.find_spec("deepspeed")`` is not an import). ``when_imported`` registers a hook, and
``sweep``, ``waiting_for``, ``stop_waiting`` and ``forget_all`` serve the API. No module imports this one:
the moment state.py is loaded, ``_hand_down`` gives it these functions (``STATE.hooks``), and api.py asks
for them there.

A hook applies the failure policy itself (failures.py); what it raises, strict mode's errors, goes out of
the user's import. Other threads import and use the API meanwhile: every walk over the pending hooks is
over a snapshot, and one lock guards this bookkeeping alone, never held across an import or a hook (a hook
imports, and an import in another thread may wait on one this thread holds).

Why one module: each module on the start-up path costs about 0.4 M instructions before its first line
runs, and importing wrapt (whose importer would do) ~50 ms (docs/benchmarks.md). The annotations that name
a type from typing, types or importlib are strings: those modules are imported for the type checker only.
"""

import sys
from _thread import RLock  # built in and loaded: no import

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and importlib cost milliseconds, and only the type checker needs them
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    from .api import apply, arm_from_environment as arm_from_environment, remove, status
    from .failures import PatchError
    from .settings import Mode, SettingsError

    Hook = Callable[[ModuleType], None]

__all__ = ("Mode", "PatchError", "SettingsError", "__version__", "apply", "remove", "status")
__version__ = "0.7.1"

# The modules the package waits for: deepspeed's first import arms the patch (accelerate and the Trainer reach
# DeepSpeed through it, and it comes before any of its submodules), and api.py patches each module right after
# its import (targets.PATCHERS; a unit test checks that the two name the same modules).
WAITS_FOR = ("deepspeed", "deepspeed.launcher.multinode_runner")


def __getattr__(name: str) -> "object":
    """The public names, each loaded at its first use (which arms the patch)."""
    if name not in ("Mode", "SettingsError", "PatchError", "apply", "arm_from_environment", "remove", "status"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _arm()
    if name in ("Mode", "SettingsError"):
        from . import settings as module
    elif name == "PatchError":
        from . import failures as module  # type: ignore[no-redef]
    else:
        from . import api as module  # type: ignore[no-redef]
    value = getattr(module, name)
    globals()[name] = value  # later lookups skip this function
    return value


def _arm(module: "ModuleType | None" = None) -> None:
    """Load api.py and apply the patch for each importer recorded so far: at once, at the first use of
    the API, or as the hook of a framework's first import (``module``), which a failure never breaks.

    Once armed, the arming hooks stay until their framework is imported (then they find no importer
    left): an import of it already under way in another thread still goes through the hooks' loader."""
    with _lock:
        routes = _importers[:]
        del _importers[:]
    try:
        from . import api, settings

        for via in routes:
            if via != ".pth" or settings.env_mode() is not None:  # the .pth line saw a value, maybe blank
                api.apply(via=via)
        if not api.armed():
            stop_waiting(_arm)
    except Exception as error:
        with _lock:  # not armed: the next framework import or API use tries again (strict mode raises again:
            _importers[:0] = routes  # a framework may swallow what its own import of another one raised)
        from . import failures

        failures.arming_failed(error, routes, module, _initializing("site"))


def _hand_down(state: "ModuleType") -> None:
    """state.py has just been loaded: give it the functions through which api.py waits for modules."""
    state.STATE.hooks = state.Hooks(waits_for=WAITS_FOR, when_imported=when_imported, sweep=sweep,
                                    waiting_for=waiting_for, forget_all=forget_all)


def _on_import() -> None:
    """Record who imported the package: a .pth line or sitecustomize (usercustomize) while site.py starts
    the interpreter, or an import; then arm now, or when a framework is first imported."""
    # not a module global: through the finder on sys.meta_path it would keep os alive past the first
    # collection of interpreter shutdown, which costs every armed process ~0.2 ms at exit
    import os

    if not _initializing("site"):
        via = "import"
    elif _initializing("sitecustomize") or _initializing("usercustomize"):
        via = "sitecustomize"
    else:
        via = ".pth"
    _importers.append(via)
    state = when_imported(f"{__name__}.state", _hand_down)
    if state is not None:  # importlib.reload of the package: state.py is loaded already
        _hand_down(state)
    # Strict mode wants a bad value to stop the start (or raise out of the import) now, not at the first import
    # of a framework. The name and the spellings are settings.ENV_STRICT and settings._TRUE, spelled out here
    # because settings.py is not loaded yet.
    strict = os.environ.get("ACCELERATE_WARMUP_PATCH_STRICT", "").strip().lower()
    if not sys.modules.keys().isdisjoint(WAITS_FOR) or strict in ("1", "true", "on", "yes", "enable", "enabled"):
        _arm()
        return
    if when_imported(WAITS_FOR[0], _arm) is not None:  # imported in another thread meanwhile
        _arm()


def _initializing(name: str) -> bool:
    """True while the code of module ``name`` runs (importlib marks its spec until it is done)."""
    return getattr(getattr(sys.modules.get(name), "__spec__", None), "_initializing", False) is True


# The one post-import hook of the package: its bookkeeping, the finder, the loader.

_pending: "dict[str, list[Hook]]" = {}  # module name -> the hooks waiting for its import
# modules whose code has run through our loader and whose hooks have all been called, until importlib
# marks them initialized: a hook registered for one of them is due at once, as for a loaded module
_ran: "dict[str, ModuleType]" = {}
# who imported the package, until _arm hands each to api.apply: ".pth", "sitecustomize", "import"
_importers: "list[str]" = []
# guards _pending, _ran, _importers and our finder's place on sys.meta_path, and nothing else: it is never
# held across an import or a hook
_lock = RLock()
_looking_up: "set[str]" = set()  # find_spec runs under importlib's lock of the name it looks up: no race on it


def when_imported(name: str, hook: "Hook") -> "ModuleType | None":
    """Have ``hook(module)`` called right after ``name`` is imported; if it already is, nothing is
    registered and the module is returned: the caller acts on it now."""
    with _lock:  # the check and the registration in one step: the loader marks a module ran under it
        module = _ready(name)
        if module is None:
            hooks = _pending.setdefault(name, [])
            if hook not in hooks:
                hooks.append(hook)
            if not any(map(_is_ours, sys.meta_path)):
                # a new list, not an insert: another thread may be iterating over the old one right now
                sys.meta_path = [_HookFinder(), *sys.meta_path]
    return module


def _ready(name: str) -> "ModuleType | None":
    """The module ``name`` if a hook may run on it now: imported, or its code run and its hooks called."""
    module = sys.modules.get(name)
    if module is None or not _initializing(name) or _ran.get(name) is module:
        return module
    return None


def sweep() -> None:
    """Call the hooks of modules that finished loading without our loader: registered while their import
    was already under way (in this thread, or in another one)."""
    with _lock:
        names = list(_pending)  # a snapshot: other threads register and fire while the hooks below run
    for name in names:
        module = _ready(name)
        if module is not None:
            with _lock:  # taken, no longer pending: each hook is called by one thread only
                hooks = _pending.pop(name, [])
            for hook in hooks:
                hook(module)
    with _lock:
        for name, module in list(_ran.items()):  # importlib has finished them, or they left sys.modules
            if sys.modules.get(name) is not module or not _initializing(name):
                del _ran[name]
        _leave_if_idle()


def waiting_for(hook: "Hook") -> "list[str]":
    """The modules for which ``hook`` waits."""
    with _lock:
        return [name for name, hooks in _pending.items() if hook in hooks]


def stop_waiting(hook: "Hook") -> None:
    """``hook`` waits for no module any more."""
    with _lock:
        for name in waiting_for(hook):
            _pending[name].remove(hook)  # registered once per module (when_imported)
            if not _pending[name]:
                del _pending[name]
        _leave_if_idle()


def forget_all() -> None:
    """No hook is pending and no importer is recorded: what remove() asks."""
    with _lock:
        _pending.clear()
        del _importers[:]
        _leave_if_idle()


def _leave_if_idle() -> None:
    if not _pending and any(map(_is_ours, sys.meta_path)):
        sys.meta_path = [f for f in sys.meta_path if not _is_ours(f)]  # a new list, as in when_imported


class _HookFinder:
    """On sys.meta_path while a hook is pending: for those modules, the other finders' spec, with its loader
    inside a ``_HookLoader``. Guarded against re-entry by the name it is looking up (it asks the other finders,
    which may ask it back)."""

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname not in _pending or fullname in _looking_up:
            return None
        _looking_up.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if not _is_ours(finder) and hasattr(finder, "find_spec"):
                    spec = finder.find_spec(fullname, path, target)
                    if spec is not None:
                        break
            else:
                return None
        finally:
            _looking_up.discard(fullname)
        if hasattr(spec.loader, "exec_module"):
            spec.loader = _HookLoader(spec.loader)  # type: ignore[assignment]
        return spec


class _HookLoader:
    """The real loader runs the module; then the module's hooks are called."""

    def __init__(self, loader: "Any") -> None:
        self.loader = loader

    def exec_module(self, module: "ModuleType") -> None:
        module.__loader__ = self.loader  # the real one, for pkgutil, inspect and friends
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        name = module.__name__
        while True:  # also the hooks registered while these run: the arming hook registers some
            with _lock:
                hooks = _pending.pop(name, None)
                if not hooks:
                    _ran[name] = module  # under the lock of when_imported's check: no hook falls between
                    break
            for hook in hooks:
                hook(module)
        sweep()

    def __getattr__(self, name: str) -> "Any":
        # create_module and the rest: the real loader's
        if name == "loader":  # not set yet (a copy being made): no endless lookup
            raise AttributeError(name)
        return getattr(self.loader, name)


def _is_ours(finder: "object") -> bool:
    """Also true for the finder of an earlier copy of this module (importlib.reload): never two."""
    return type(finder).__module__ == __name__ and type(finder).__qualname__ == "_HookFinder"


_on_import()
