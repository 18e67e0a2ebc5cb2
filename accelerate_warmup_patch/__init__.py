"""Start DeepSpeed's warmup schedulers at the warmup lr on every release.

``import accelerate_warmup_patch`` applies the patch (unless ACCELERATE_WARMUP_PATCH=off). This
module is on the start-up path of every process of an armed image, so it only waits: until
deepspeed or accelerate is imported, or the API (``apply``, ``remove``, ``status``) is used, a
finder first on sys.meta_path is all there is. Then the rest of the package loads and installs the
wrappers when deepspeed or accelerate is imported, or at once if they already are.
"""

import _thread
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

    from .api import apply, remove, status
    from .api import arm_from_environment as arm_from_environment
    from .settings import Mode

__all__ = ["Mode", "__version__", "apply", "remove", "status"]
__version__ = "0.1.0"

_API = ("Mode", "apply", "arm_from_environment", "remove", "status")
# the first import of either is the first moment the patch has something to do
_FRAMEWORKS = ("deepspeed", "accelerate")
_pending: "list[str]" = []  # who imported the package before api.py was loaded
_lock = _thread.RLock()  # a second thread's first import must wait until the hooks are registered


def __getattr__(name: str) -> object:
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    api = _load_the_rest()
    globals().update((n, getattr(api, n)) for n in _API)  # later lookups skip this function
    return globals()[name]


def _load_the_rest() -> "ModuleType":
    """Load api.py and let it arm the patch for whoever imported the package so far."""
    with _lock:
        if _waiter in sys.meta_path:
            sys.meta_path.remove(_waiter)
        from . import api

        api.take_over(_pending)
    return api


class _FirstFrameworkImport:
    """Notices the first import of deepspeed or accelerate, then hands over to the post-import hooks."""

    def find_spec(self, fullname: str, path: "Sequence[str] | None",
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if fullname not in _FRAMEWORKS:
            return None
        from . import bootstrap  # the standard library alone: it loads even where the rest fails

        try:
            _load_the_rest()
        except Exception:  # the user's import of the framework must go on
            from . import settings

            if settings.strict():
                raise
            bootstrap.warn("arming the patch at the import of %s failed; it is left unpatched", fullname)
        # this finder has left sys.meta_path, and importlib would skip the one after it (and the
        # hooks' finder, inserted first): the finders are asked here
        return bootstrap.find_elsewhere(self, fullname, path, target)


_waiter = _FirstFrameworkImport()


def _activated_by() -> str:
    """Who is importing us: a .pth line (site.py), sitecustomize, or a plain import."""
    frame = sys._getframe(1)
    for _ in range(30):
        if frame is None:
            break
        filename = frame.f_code.co_filename
        if filename.endswith(("sitecustomize.py", "usercustomize.py")):
            return "sitecustomize"
        if filename.endswith(("site.py", "<frozen site>")) and frame.f_code.co_name == "addpackage":
            return ".pth"
        frame = frame.f_back  # type: ignore[assignment]
    return "import"


def _on_import() -> None:
    # not a module global: through the waiter on sys.meta_path it would keep os alive past the first
    # collection of interpreter shutdown, which costs every armed process ~0.2 ms at exit
    import os

    _pending.append(_activated_by())
    # strict mode wants a bad value to raise now, not at the first import of a framework; the name
    # is settings.ENV_STRICT, spelled out because settings.py is not loaded yet
    if any(name in sys.modules for name in _FRAMEWORKS) or os.environ.get("ACCELERATE_WARMUP_PATCH_STRICT"):
        _load_the_rest()
    else:
        sys.meta_path.insert(0, _waiter)


_on_import()
