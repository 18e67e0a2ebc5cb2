"""Which Python the environment's answers are for: the ``python3`` on ``PATH`` (else ``python``), the one a job's
``python3 train.py`` starts.

The ``accelerate-warmup-patch`` command runs on the interpreter pip wrote into its script, which need not be the jobs':
a module's prefix installed with the site's Python and a job's venv activated after ``module load``, or a tool
installed apart from the training environment. There ``doctor`` answered for the command's own Python ("DeepSpeed is
not installed") and ``--strict`` passed. So ``doctor``, ``status`` and ``demo``, which answer for an environment, are
handed to the jobs' interpreter (``hand_over``), which says which one it is (``describe``). ``python -m
accelerate_warmup_patch ...`` answers for the interpreter that runs it, as asked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from ..failures import COMMAND_CHILD

NAMES = ("python3", "python")  # what a job's command line names, in the order looked up on PATH
LOWEST = (3, 9)  # pyproject's requires-python: an older interpreter cannot run the package
LIMIT_S = 60

# Asked of the interpreter on PATH before anything of the package runs there: written so that any Python parses it
# (a Python 2.7 on PATH gets its answer too).
_SELF = ("import json, os, sys; sys.stdout.write(json.dumps({'executable': os.path.realpath(sys.executable), "
          "'prefix': os.path.realpath(sys.prefix), 'version': list(sys.version_info[:3])}) + '\\n')")

# The jobs' interpreter runs the command: its own installation of the package where it has one (a module's PREFIX/lib
# on PYTHONPATH, the venv's), else this command's, imported from HOME and taken off the path again, so that everything
# else is found as the jobs find it. `-c` puts the working directory first on sys.path: a json.py there, or a copy of
# the package, must not answer, so it goes first (the working directory itself stays: --config reads from it).
_RUN = """
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import importlib.util
home = sys.argv[1]
if "accelerate_warmup_patch" not in sys.modules and importlib.util.find_spec("accelerate_warmup_patch") is None:
    sys.path.insert(0, home)
    try:
        import accelerate_warmup_patch
    finally:
        sys.path.remove(home)
import runpy
sys.argv = ["accelerate-warmup-patch", *sys.argv[2:]]
runpy.run_module("accelerate_warmup_patch", run_name="__main__", alter_sys=True)
"""

# The folder this command's package was loaded from (the one `import accelerate_warmup_patch` finds there).
HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Unusable(Exception):
    """The jobs' interpreter cannot run the package, in words: a message for the user, exit status 2."""


def on_path() -> tuple[str, str] | None:
    """The name and path of the first of ``NAMES`` on PATH, or None."""
    for name in NAMES:
        found = shutil.which(name)
        if found:
            return name, os.path.abspath(found)
    return None


def describe_python(path: str) -> dict[str, Any]:
    """What ``path`` says of itself (its real executable, prefix and version), asked in an empty folder with this
    environment; Unusable with the reason where it does not answer."""
    with tempfile.TemporaryDirectory(prefix="accelerate-warmup-patch-") as folder:
        try:
            proc = subprocess.run([path, "-c", _SELF], cwd=folder, stdin=subprocess.DEVNULL, capture_output=True,
                                  text=True, timeout=LIMIT_S, env=_as_this_command())
        except (OSError, subprocess.SubprocessError) as error:
            raise Unusable(f"it cannot be run: {error}") from None
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
        return {"executable": str(answer["executable"]), "prefix": str(answer["prefix"]),
                "version": tuple(int(part) for part in answer["version"])}
    except (IndexError, KeyError, TypeError, ValueError):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unusable(f"it did not say what it is (exit {proc.returncode}): {last}") from None


def _this() -> dict[str, Any]:
    return {"executable": os.path.realpath(sys.executable), "prefix": os.path.realpath(sys.prefix),
            "version": tuple(sys.version_info[:3])}


def _same(theirs: dict[str, Any]) -> bool:
    # a venv's python is a link to its base's executable: the prefix tells them apart
    mine = _this()
    return (theirs["executable"], theirs["prefix"]) == (mine["executable"], mine["prefix"])


def is_this(path: str) -> bool:
    """Whether ``path`` starts this very interpreter, asked of it where its path alone does not tell."""
    return os.path.abspath(path) == os.path.abspath(sys.executable) or _same(describe_python(path))


def hand_over(arguments: list[str]) -> None:
    """Run the command ``arguments`` on the jobs' interpreter, in place of this process, unless it is this one (or
    there is none on PATH: then this one answers, and says so). Unusable where it cannot run the package."""
    found = on_path()
    if found is None or os.path.abspath(found[1]) == os.path.abspath(sys.executable):
        return
    name, path = found
    theirs = describe_python(path)
    if _same(theirs):
        return
    if theirs["version"] < LOWEST:
        version = ".".join(map(str, theirs["version"]))
        raise Unusable(f"the {name} on PATH, which jobs start, is {path}, Python {version}: the package runs on "
                       f"Python {'.'.join(map(str, LOWEST))} or newer, so a job it starts runs "
                       "unpatched; put the jobs' Python first on PATH, or run the check as `PYTHON -m "
                       "accelerate_warmup_patch ...` with it")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(path, [path, "-c", _RUN, HOME, *arguments], _as_this_command())


def _as_this_command() -> dict[str, str]:
    """This environment, marked so that the jobs' interpreter's start-up knows it runs this command: under
    ACCELERATE_WARMUP_PATCH_STRICT a bad value stops every other program there, and doctor must run to name it."""
    return {**os.environ, COMMAND_CHILD: "1"}


def describe() -> dict[str, Any]:
    """This interpreter, and whether it is the one jobs start (the first of ``NAMES`` on PATH)."""
    found = on_path()
    same = False
    if found is not None:
        try:
            same = is_this(found[1])
        except Unusable:
            same = False
    return {"executable": sys.executable, "version": ".".join(map(str, sys.version_info[:3])),
            "on_path": found[0] if found else None, "path_python": found[1] if found else None,
            "is_path_python": same}


def line(interpreter: dict[str, Any]) -> str:
    """One line for the answers: which Python they are for, and whether jobs start it."""
    head = f"{interpreter['executable']} (Python {interpreter['version']})"
    if interpreter["is_path_python"]:
        return f"{head}: the {interpreter['on_path']} on PATH, which jobs start"
    if interpreter["on_path"] is None:
        return f"{head}: there is no {' or '.join(NAMES)} on PATH; a job names its interpreter itself"
    return (f"{head}, NOT the {interpreter['on_path']} on PATH ({interpreter['path_python']}), which jobs start: "
            f"`accelerate-warmup-patch` answers for that one")
