"""Start DeepSpeed's warmup schedulers at the warmup lr on every release.

``import accelerate_warmup_patch`` applies the patch (unless ACCELERATE_WARMUP_PATCH=off). This
module is on the start-up path of every process of an armed image, so it only waits: until
deepspeed or accelerate is imported, or the API (``apply``, ``remove``, ``status``) is used, two
post-import hooks in ``bootstrap`` are all there is. Then the rest of the package loads and installs
the wrappers (at once if deepspeed or accelerate is already imported).
"""

import sys

from . import bootstrap

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from .api import apply, remove, status
    from .api import arm_from_environment as arm_from_environment
    from .failures import PatchError
    from .settings import Mode, SettingsError

__all__ = ["Mode", "PatchError", "SettingsError", "__version__", "apply", "remove", "status"]
__version__ = "0.3.0"

_API = {"Mode": "settings", "SettingsError": "settings", "PatchError": "failures", "apply": "api",
        "arm_from_environment": "api", "remove": "api", "status": "api"}
# the first import of either is the first moment the patch has something to do
_FRAMEWORKS = ("deepspeed", "accelerate")


def __getattr__(name: str) -> object:
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load_the_rest()
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def _load_the_rest() -> None:
    """Load api.py and let it arm the patch for whoever imported the package so far.

    Once armed, the arming hooks stay until their framework is imported (then they find nothing left
    to do): an import of it already under way in another thread still goes through the hooks' loader."""
    from . import api

    api.take_over()
    if not api.armed():
        bootstrap.cancel(_arm)


def _arm(module: "ModuleType") -> None:
    """The first import of a framework: arm the patch; a failure never breaks that import."""
    try:
        _load_the_rest()
    except Exception as error:
        from . import failures

        failures.report("arm", f"arming the patch at the import of {module.__name__}", error,
                        "this process runs unpatched")


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
    # not a module global: through the finder on sys.meta_path it would keep os alive past the first
    # collection of interpreter shutdown, which costs every armed process ~0.2 ms at exit
    import os

    importer = _activated_by()
    bootstrap.importers.append(importer)
    # strict mode wants a bad value to stop the start (or raise out of the import) now, not at the first
    # import of a framework; the name is settings.ENV_STRICT, spelled out because settings.py is not loaded yet
    if any(name in sys.modules for name in _FRAMEWORKS) or os.environ.get("ACCELERATE_WARMUP_PATCH_STRICT"):
        try:
            _load_the_rest()
        except Exception as error:
            from . import failures  # only a failure pays for loading it

            failures.arming_failed(error, importer)
    else:
        for framework in _FRAMEWORKS:
            bootstrap.when_imported(framework, _arm)


_on_import()
