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
__version__ = "0.2.0"

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
            _arming_failed(error, importer)
    else:
        for framework in _FRAMEWORKS:
            bootstrap.when_imported(framework, _arm)


def _arming_failed(error: Exception, importer: str) -> None:
    """Strict: stop the interpreter before the program starts (.pth, sitecustomize) or raise (an import).
    Otherwise warn once and let the process run unpatched."""
    from . import failures, settings

    if settings.strict() and importer != "import" and _site_is_starting():
        _stop_before_the_program(error)
    failures.report("arm", "arming the patch", error, "this process runs unpatched")


def _site_is_starting() -> bool:
    """True while site.py runs the .pth lines and sitecustomize of a starting interpreter (not when a
    program calls site.addsitedir later: stopping a running program from inside a call is not ours to do)."""
    site = sys.modules.get("site")
    return bool(getattr(getattr(site, "__spec__", None), "_initializing", False))


def _stop_before_the_program(error: Exception) -> None:
    """One line on stderr and exit status 2, before any of the program's code runs.

    Nothing gentler stops a starting interpreter: site.py prints the traceback of an exception from a
    .pth line and goes on (twice in a venv, whose .pth lines it runs twice), prints one from
    sitecustomize in a line and goes on, and turns SystemExit from either into "Fatal Python error:
    init_import_site" with a traceback and exit status 1 (Python 3.9 to 3.13, measured). No program
    code has run yet, so there is nothing to clean up that os._exit skips.
    """
    import os

    from .failures import PatchError
    from .settings import ENV_STRICT, SettingsError

    if isinstance(error, (SettingsError, PatchError)):  # their message says what failed and how to fix it
        kind, detail = type(error).__name__, str(error).replace("accelerate_warmup_patch: ", "", 1)
    else:
        kind, detail = "PatchError", f"arming the patch failed: {error!r}"
    if kind == "PatchError":
        detail += f"; without {ENV_STRICT} this is a warning and the job runs on"
    line = f"accelerate_warmup_patch.{kind}: {detail} (stopped at start-up: {ENV_STRICT} is set)\n"
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        if sys.stderr is not None:
            sys.stderr.write(line)
            sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken stream: the exit status still says it
        pass
    os._exit(2)


_on_import()
