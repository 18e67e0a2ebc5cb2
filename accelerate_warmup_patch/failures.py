"""The one failure policy: every failure inside the patch goes through ``report``.

By default the patch fails open: one warning that says what failed and what still applies, and the
user's import or call goes on. With ACCELERATE_WARMUP_PATCH_STRICT set it raises instead, out of
the user's import or call, so that CI and image builds fail loudly.
"""

from __future__ import annotations

import os
import sys

from . import log, settings

# Set by the command for the jobs' interpreter it asks and hands itself over to (cli/job_python.py): that interpreter
# runs `python3 -c ...`, whose command line does not say it is this command, and doctor must still run there.
COMMAND_CHILD = "ACCELERATE_WARMUP_PATCH_COMMAND_CHILD"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType


class PatchError(RuntimeError):
    """Something inside the patch failed, and ACCELERATE_WARMUP_PATCH_STRICT asks for an error."""


def report(key: str, *, what: str, error: BaseException, consequence: str) -> None:
    """Raise in strict mode; otherwise warn once per ``key``: "<what> failed (<error>); <consequence>"."""
    if settings.strict():
        if isinstance(error, (PatchError, settings.SettingsError)):
            raise error
        raise PatchError(f"accelerate_warmup_patch: {what} failed: {error!r}; {consequence}") from error
    log.warn_once(key, "%s failed (%r); %s", what, error, consequence)


def arming_failed(error: Exception, routes: list[str], module: ModuleType | None, starting: bool) -> None:
    """Strict: stop the interpreter before the program starts (armed by the .pth or sitecustomize) or
    raise. Otherwise warn once and let the process run unpatched (``module``: whose import armed it).

    ``starting``: site.py still runs, so the interpreter is starting (a program that calls site.addsitedir
    later is running, and stopping it from inside a call is not ours to do)."""
    at = f" at the import of {module.__name__}" if module is not None else ""
    if settings.strict() and starting and _running_this_command():
        # the command that names what is wrong must run: doctor says it, and exits 1 under --strict
        log.warn_once("arm", "arming the patch%s failed (%s); this command runs unpatched", at, error)
        return
    if settings.strict() and starting and any(via != "import" for via in routes):
        _stop_before_the_program(error)
    report("arm", what=f"arming the patch{at}", error=error, consequence="this process runs unpatched")


def _running_this_command() -> bool:
    """True in the interpreter of ``accelerate-warmup-patch`` or ``python -m accelerate_warmup_patch``, read from
    its command line while site.py starts it (sys.orig_argv: Python 3.10+; 3.9 knows only the console script), and
    in the jobs' interpreter that the command asks or hands itself over to (``COMMAND_CHILD``)."""
    if sys.argv and os.path.basename(sys.argv[0]) == "accelerate-warmup-patch":
        return True
    if os.environ.get(COMMAND_CHILD) == "1":
        return True
    options = iter(getattr(sys, "orig_argv", [])[1:])
    for option in options:  # the interpreter's options, up to the script or -m's module
        if option == "-m":
            return next(options, "").split(".")[0] == __package__
        if not option.startswith("-"):
            return False
        if option in ("-X", "-W"):
            next(options, None)  # its value
    return False


def _stop_before_the_program(error: Exception) -> None:
    """One line on stderr and exit status 2, before any of the program's code runs.

    Nothing gentler stops a starting interpreter: site.py prints the traceback of an exception from a
    .pth line and goes on (twice in a venv, whose .pth lines it runs twice), prints one from
    sitecustomize in a line and goes on, and turns SystemExit from either into "Fatal Python error:
    init_import_site" with a traceback and exit status 1 (Python 3.9 to 3.13, measured). No program
    code has run yet, so there is nothing to clean up that os._exit skips.
    """
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
