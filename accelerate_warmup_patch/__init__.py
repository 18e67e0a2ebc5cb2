"""Start DeepSpeed's warmup schedulers at the warmup lr on every release.

``import accelerate_warmup_patch`` applies the patch (unless ACCELERATE_WARMUP_PATCH=off); so do the
installed .pth line, when ACCELERATE_WARMUP_PATCH is set, and a sitecustomize that imports the package.
This module is the whole start-up path of such a process: it records who imported it and waits until
deepspeed is imported (at once if it already is) or the API (``apply``, ``remove``,
``status``) is first used; then ``api.py`` loads and has targets.py install the wrappers.

It waits through the package's one post-import hook, with the standard library alone: a finder, first
on ``sys.meta_path`` only while a hook is pending, answers for those modules with a loader that calls
their hooks right after the module's code has run (in the loader, not in ``find_spec``: a probe such as
``importlib.util.find_spec("deepspeed")`` is not an import). A hook applies the failure policy itself
(failures.py); what it raises, strict mode's errors, goes out of the user's import. Other threads import
and use the API meanwhile: every walk over the pending hooks is over a snapshot, and one lock guards
this bookkeeping alone, never held across an import or a hook (a hook imports, and an import in
another thread may wait on one this thread holds).

Why one module: each module on the start-up path costs about 0.4 M instructions before its first line
runs, and importing wrapt (whose importer would do) ~50 ms (docs/benchmarks.md). Why type comments
instead of annotations, and few functions: every function, annotation and imported name here is an
object CPython's collector counts, and a start-up that tips its count over 700 pays a collection
(+0.29 M instructions) that this module's own code does not cost (docs/benchmarks.md).
"""

import sys
from _thread import RLock  # built in and loaded: no import

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and importlib cost milliseconds, and only the type checker needs them
    import collections.abc  # whole modules: each name imported from one is one more object at start-up
    import importlib.machinery
    import types
    import typing

    from .api import apply, arm_from_environment as arm_from_environment, remove, status
    from .failures import PatchError
    from .settings import Mode, SettingsError

    # the names of this module's type comments (ruff reads no type comments: these are its uses)
    Hook = collections.abc.Callable[[types.ModuleType], None]
    Loaded = typing.Optional[types.ModuleType]  # a module, or None where it is not (yet) loaded
    Paths = typing.Optional[collections.abc.Sequence[str]]
    Spec = typing.Optional[importlib.machinery.ModuleSpec]
    Loader = typing.Any  # whatever loader the other finders' spec has

__all__ = ("Mode", "PatchError", "SettingsError", "__version__", "apply", "remove", "status")
__version__ = "0.4.0"

# its first import is the first moment the patch has something to do (accelerate and the Trainer reach
# DeepSpeed through it)
_FRAMEWORKS = ("deepspeed",)


def __getattr__(name):  # type: (str) -> object
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


def _arm(module=None):  # type: (Loaded) -> None
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
            _waiting(_arm, drop=True)
    except Exception as error:
        with _lock:  # not armed: the next framework import or API use tries again (strict mode raises again:
            _importers[:0] = routes  # a framework may swallow what its own import of another one raised)
        from . import failures

        failures.arming_failed(error, routes, module, _initializing("site"))


def _on_import():  # type: () -> None
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
    # Strict mode wants a bad value to stop the start (or raise out of the import) now, not at the first import
    # of a framework. The name and the spellings are settings.ENV_STRICT and settings._TRUE, spelled out here
    # because settings.py is not loaded yet.
    strict = os.environ.get("ACCELERATE_WARMUP_PATCH_STRICT", "").strip().lower()
    if not sys.modules.keys().isdisjoint(_FRAMEWORKS) or strict in ("1", "true", "on", "yes", "enable", "enabled"):
        _arm()
        return
    for framework in _FRAMEWORKS:
        if _when_imported(framework, _arm) is not None:  # imported in another thread meanwhile
            _arm()


def _initializing(name):  # type: (str) -> bool
    """True while the code of module ``name`` runs (importlib marks its spec until it is done)."""
    return getattr(getattr(sys.modules.get(name), "__spec__", None), "_initializing", False) is True


# The one post-import hook of the package: its bookkeeping, the finder, the loader.

_hooks = {}  # type: dict[str, list[Hook]]
# modules whose code has run through our loader and whose hooks have all been called, until importlib
# marks them initialized: a hook registered for one of them is due at once, as for a loaded module
_ran = {}  # type: dict[str, types.ModuleType]
# who imported the package, until _arm hands each to api.apply: ".pth", "sitecustomize", "import"
_importers = []  # type: list[str]
# guards _hooks, _ran, _importers and our finder's place on sys.meta_path
_lock = RLock()
_looking_up = set()  # type: set[str]  # find_spec runs under importlib's global lock: no race on it


class _Importer:
    """A finder and a loader in one, as importlib's own BuiltinImporter is (one class costs start-up time).

    The one on sys.meta_path (no loader) answers for the modules with pending hooks: the other finders'
    spec, with an _Importer around its loader, which runs the module and then calls its hooks."""

    _loader = None  # type: Loader  # the real loader; the one on sys.meta_path has none

    def find_spec(self, fullname, path, target=None):  # type: (str, Paths, Loaded) -> Spec
        if fullname not in _hooks or fullname in _looking_up:
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
            importer = _Importer()
            importer._loader = spec.loader
            spec.loader = importer  # type: ignore[assignment]
        return spec

    def exec_module(self, module):  # type: (types.ModuleType) -> None
        module.__loader__ = self._loader  # the real one, for pkgutil, inspect and friends
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        name = module.__name__
        while True:  # also the hooks registered while these run: the arming hook registers some
            with _lock:
                hooks = _hooks.pop(name, None)
                if not hooks:
                    _ran[name] = module  # under the lock of _when_imported's check: no hook falls between
                    break
            for hook in hooks:
                hook(module)
        _sweep()

    def __getattr__(self, name):  # type: (str) -> Loader
        # create_module and the rest: the real loader's
        return getattr(self._loader, name)


def _is_ours(finder):  # type: (object) -> bool
    """Also true for the finder of an earlier copy of this module (importlib.reload): never two."""
    return type(finder).__module__ == __name__ and type(finder).__qualname__ == "_Importer"


def _when_imported(name, hook):  # type: (str, Hook) -> Loaded
    """Have ``hook(module)`` called right after ``name`` is imported; if it already is, nothing is
    registered and the module is returned: the caller acts on it now."""
    with _lock:  # the check and the registration in one step: the loader marks a module ran under it
        module = _ready(name)
        if module is None:
            hooks = _hooks.setdefault(name, [])
            if hook not in hooks:
                hooks.append(hook)
            if not any(map(_is_ours, sys.meta_path)):
                # a new list, not an insert: another thread may be iterating over the old one right now
                sys.meta_path = [_Importer(), *sys.meta_path]
    return module


def _ready(name):  # type: (str) -> Loaded
    """The module ``name`` if a hook may run on it now: imported, or its code run and its hooks called."""
    module = sys.modules.get(name)
    if module is None or not _initializing(name) or _ran.get(name) is module:
        return module
    return None


def _sweep():  # type: () -> None
    """Call the hooks of modules that finished loading without our loader: registered while their import
    was already under way (in this thread, or in another one)."""
    with _lock:
        names = list(_hooks)  # a snapshot: other threads register and fire while the hooks below run
    for name in names:
        module = _ready(name)
        if module is not None:
            with _lock:  # taken, no longer pending: each hook is called by one thread only
                hooks = _hooks.pop(name, [])
            for hook in hooks:
                hook(module)
    with _lock:
        for name, module in list(_ran.items()):  # importlib has finished them, or they left sys.modules
            if sys.modules.get(name) is not module or not _initializing(name):
                del _ran[name]
        _leave_if_idle()


def _waiting(hook, drop=False):  # type: (typing.Optional[Hook], bool) -> list[str]
    """The modules for which ``hook`` waits (None: any hook); with ``drop`` it waits there no more, and with
    None no importer is left either. What api.py asks of the hook goes through here, never its bookkeeping."""
    names = []
    with _lock:
        for name in list(_hooks):
            if hook is None or hook in _hooks[name]:
                names.append(name)
                if drop and hook is not None:
                    _hooks[name].remove(hook)  # registered once per module (_when_imported)
                if drop and (hook is None or not _hooks[name]):
                    del _hooks[name]
        if drop:
            if hook is None:
                del _importers[:]
            _leave_if_idle()
    return names


def _leave_if_idle():  # type: () -> None
    if not _hooks and any(map(_is_ours, sys.meta_path)):
        sys.meta_path = [f for f in sys.meta_path if not _is_ours(f)]  # a new list, as in _when_imported


_on_import()
