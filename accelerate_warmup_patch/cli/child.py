"""The CLI's one way of asking a child interpreter: it prints ``RESULT`` and a JSON object on one line.

``doctor`` and ``status`` ask children of this environment (``python FLAGS -c CODE``, ``start``) whether the
switch armed them, ``doctor --config`` and ``demo`` run one of the package's own modules (``start_module``)
so that the command's own process imports neither torch nor deepspeed. The child ends with ``emit``, the
parent reads it with ``reply`` (or ``answer``). Standard library only.

Every child starts in an empty folder of its own, never the command's working directory: ``python -c`` and
``python -m`` put their working directory first on ``sys.path``, so a ``json.py`` or an older checkout of
the package there would run instead of the standard library's or the installed code. The probes keep the
environment, which is what they ask about, with relative ``PYTHONPATH`` entries read from the command's
working directory, as the job's own interpreter started there would read them. ``-I`` would also drop
``PYTHONPATH`` and the user's site folder, and ``-P`` needs Python 3.11.

A child that imports torch and DeepSpeed takes 3 to 15 s, and the demo's two runs longer. Given ``doing``,
``reply`` says on stderr what it waits for while it waits (``progress``), so that no command sits silent
for more than about ten seconds; stdout, which ``--json`` keeps for its one object, is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from .progress import say

RESULT = "AWP-RESULT "
# A terminal's counter moves every second; a log gets a "still" line at most this many seconds apart.
TICK_S = 1.0
QUIET_S = 10.0

# The folder the command's own package was loaded from; start_module's child loads the package from it.
HOME = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# start_module's child: the package from HOME (taken off the path again at once, so that deepspeed and the
# rest are found as the environment finds them), then the module run as `python -m` would run it. A copy that
# the interpreter's start-up had already imported from elsewhere (a sitecustomize) is refused, not used.
_RUN_MODULE = """
import os, runpy, sys
home, module = sys.argv[1], sys.argv[2]
sys.path.insert(0, home)
try:
    import accelerate_warmup_patch
finally:
    sys.path.remove(home)
loaded = os.path.dirname(os.path.dirname(os.path.abspath(accelerate_warmup_patch.__file__)))
if os.path.realpath(loaded) != os.path.realpath(home):
    sys.exit("accelerate_warmup_patch was imported at start-up from " + loaded + ", not from " + home
             + ", whose command this is: run the command of the installation the environment imports")
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

_workdir: tempfile.TemporaryDirectory[str] | None = None


def emit(result: dict[str, Any]) -> None:
    """In the child: print the one RESULT line the parent reads."""
    print(RESULT + json.dumps(result), flush=True)


def label(flags: list[str] | tuple[str, ...]) -> str:
    """How the answers name an interpreter: ``python -S``."""
    return " ".join(["python", *flags])


def _empty_folder() -> str:
    """The children's working directory: an empty folder of this process's own, removed when it exits."""
    global _workdir
    if _workdir is None:
        _workdir = tempfile.TemporaryDirectory(prefix="accelerate-warmup-patch-")
    return _workdir.name


def _spawn(arguments: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    # stdin: a flag such as -i must not wait on the user's terminal
    return subprocess.Popen([sys.executable, *arguments], env=env, cwd=_empty_folder(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start(arguments: list[str] | tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start this interpreter with ``arguments`` (``[*flags, "-c", code]``) in ``env``, as a job of that
    environment started from this working directory, with none of this directory's files on its path."""
    path = env.get("PYTHONPATH")
    if path:  # the job reads its relative entries (and an empty one, its working directory) from here
        env = {**env, "PYTHONPATH": os.pathsep.join(os.path.abspath(entry) for entry in path.split(os.pathsep))}
    return _spawn(list(arguments), env)


def start_module(module: str, arguments: list[str] | tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[str]:
    """Run the package's own ``module`` (``python -m module ARGUMENTS``) in ``env``, from the folder this
    command's package was loaded from, whatever the working directory or ``PYTHONPATH`` holds."""
    return _spawn(["-c", _RUN_MODULE, HOME, module, *arguments], env)


@dataclass(frozen=True)
class Reply:
    """What a child left: its JSON object (None when it printed no RESULT line), exit status and stderr."""

    result: dict[str, Any] | None
    returncode: int
    stderr: str
    stdout: str = ""  # all of it, the RESULT line included (demo --verbose shows DeepSpeed's own output)

    def failure(self) -> str:
        """``(exit N): the last line of stderr``, for a message that says the child failed."""
        last = (self.stderr.strip().splitlines() or ["no output"])[-1]
        return f"(exit {self.returncode}): {last}"


def reply(proc: subprocess.Popen[str], timeout: float | None = 600, doing: str | None = None) -> Reply:
    """Wait for the child (killed past ``timeout``, and the timeout raised) and read its RESULT line;
    ``doing`` names the wait on stderr (``progress``)."""
    try:
        out, err = proc.communicate(timeout=timeout) if doing is None else progress(proc, timeout, doing)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    line = next((x for x in out.splitlines() if x.startswith(RESULT)), None)
    return Reply(json.loads(line[len(RESULT):]) if line is not None else None, proc.returncode, err, out)


def answer(proc: subprocess.Popen[str], timeout: float = 600, doing: str | None = None) -> dict[str, Any]:
    """The child's JSON object, or ``{"error": ...}`` with its exit status and last line of stderr."""
    got = reply(proc, timeout, doing)
    if got.result is None:
        return {"error": f"the process failed {got.failure()}"}
    return got.result


def progress(proc: subprocess.Popen[str], timeout: float | None, doing: str) -> tuple[str, str]:
    """``proc.communicate(timeout)``, saying on stderr what it waits for: one line when it starts, then on a
    terminal a counter of the seconds so far (the line ends with the total), elsewhere a "still" line every
    ``QUIET_S`` seconds. Retrying ``communicate`` after its timeout loses no output (subprocess's docs)."""
    stream = sys.stderr
    terminal = stream is not None and stream.isatty()
    started = time.monotonic()
    say(f"{doing} ...", terminal, end=not terminal)
    while True:
        elapsed = time.monotonic() - started
        wait = TICK_S if terminal else QUIET_S
        if timeout is not None:
            wait = max(min(wait, timeout - elapsed), 0.001)
        try:
            out, err = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            if timeout is not None and elapsed >= timeout:
                say(f"{doing}: stopped after {elapsed:.0f} s", terminal, end=True)
                raise subprocess.TimeoutExpired(proc.args, timeout) from None
            say(f"{doing} ... {elapsed:.0f} s" if terminal else f"  still {doing}: {elapsed:.0f} s so far",
                   terminal, end=not terminal)
            continue
        if terminal:
            say(f"{doing}: {time.monotonic() - started:.0f} s", terminal, end=True)
        return out, err
