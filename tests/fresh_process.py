"""A fresh process for a harness run: forked from a server that has imported torch, torch._dynamo and
transformers (those of them the venv has) and nothing else, or a new interpreter where what the run's
environment does at interpreter start matters.

Most of a harness run is the import of the stack: `import deepspeed` takes 6.6 s on 0.15.2 (torch 2.1 s;
torch._dynamo and transformers, which that release imports at its top, most of the rest) against 3.2 s on
0.19.8, and the suite makes dozens of such runs per release. torch, torch._dynamo and transformers are the
same in every run, and nothing a test looks at happens while they import: the server imports neither
deepspeed, accelerate nor this package, and starts without the package's settings, so its .pth line
imports nothing. With torch._dynamo too, a forked run's `import deepspeed` on 0.15.2 takes 0.85 s instead
of 2.1 s (measured on a quiet machine). A run forked from it starts with those loaded and imports the rest
itself, in the order its test chose, then runs its script as ``__main__`` and exits as an interpreter does
(atexit, then the script's exit code).

A new interpreter instead (``python SCRIPT ARGS``) where the run's environment differs from the server's
in what is read at interpreter start: the package's settings (its .pth line reads them, its import reads
the strict switch) and the ``PYTHON*`` variables; and for every run with AWP_FRESH_INTERPRETERS=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

# what the server imports once; each forked run finds them loaded
PRELOAD = ("torch", "torch._dynamo", "transformers")
# variables read while an interpreter starts (site.py, the package's .pth line, the package's import)
READ_AT_START = ("ACCELERATE_WARMUP_PATCH", "PYTHON")

_server: dict[str, Any] = {}  # the server process, and the start-up variables it started with
_lock = threading.Lock()


def run(argv: Sequence[str], env: Mapping[str, str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in ``cwd`` with exactly ``env``, as ``subprocess.run(..., capture_output=True,
    text=True)`` returns it."""
    command = [sys.executable, *argv]
    server = _server_for(env)
    if server is None or server.poll() is not None:  # no server for this run, or it ended
        return _new_interpreter(command, env, cwd, timeout)
    with _lock, tempfile.TemporaryDirectory() as folder:  # one run at a time per server
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        try:
            _send(server.stdin, {"argv": list(argv), "env": dict(env), "cwd": cwd, "out": out, "err": err})
            answer = server.stdout.readline()
        except BrokenPipeError:
            answer = ""
        if not answer:  # the server ended (its error went to this process's stderr)
            return _new_interpreter(command, env, cwd, timeout)
        pid = int(answer)
        timed_out = threading.Event()
        killer = threading.Timer(timeout, _kill, (pid, timed_out))
        killer.start()
        returncode = int(server.stdout.readline())
        killer.cancel()
        if timed_out.is_set():
            raise subprocess.TimeoutExpired(command, timeout)
        with open(out) as stdout, open(err) as stderr:
            return subprocess.CompletedProcess(command, returncode, stdout.read(), stderr.read())


def _new_interpreter(command: list[str], env: Mapping[str, str], cwd: str,
                     timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _kill(pid: int, timed_out: threading.Event) -> None:
    timed_out.set()
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, signal.SIGKILL)


def _server_for(env: Mapping[str, str]) -> subprocess.Popen[str] | None:
    """The server a run with ``env`` may fork from (started at the first such run), or None."""
    if os.environ.get("AWP_FRESH_INTERPRETERS") == "1" or not hasattr(os, "fork"):
        return None
    if not _server:
        started_with = _read_at_start(os.environ)
        if any(name.startswith("ACCELERATE_WARMUP_PATCH") for name in started_with):
            return None  # the server's own .pth line would arm the patch in every run
        process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
        _server.update(process=process, started_with=started_with)
    return _server["process"] if _read_at_start(env) == _server["started_with"] else None


def _read_at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith(READ_AT_START)}


def _send(pipe: IO[str] | None, message: object) -> None:
    assert pipe is not None
    pipe.write(json.dumps(message) + "\n")
    pipe.flush()


def _serve() -> None:
    """The server: import PRELOAD, then fork one run per request line; answer its pid, then its exit code."""
    import warnings

    # Python 3.12+ warns on every fork of a process with threads; torch's import starts one, which a
    # forked run does not need (DataLoader workers fork after the same import)
    warnings.filterwarnings("ignore", message=".*multi-threaded.*fork", category=DeprecationWarning)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # not in every venv (the scheduler tier has no transformers)
            __import__(name)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_forked(**request)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


def _run_forked(argv: list[str], env: dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked process: the run's environment, folder, output files and argv; the script as
    ``__main__``; then the exit an interpreter makes (atexit functions, then the exit code)."""
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        tempfile.tempdir = None  # tempfile caches the server's TMPDIR
        for fd, path in ((0, os.devnull), (1, out), (2, err)):
            target = os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python SCRIPT` sets it
        try:
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = _exit_code(exit)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def _exit_code(exit: SystemExit) -> int:
    if exit.code is None or isinstance(exit.code, int):
        return exit.code or 0
    print(exit.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    _serve()
