"""The CLI's one way of asking a child interpreter: it prints ``RESULT`` and a JSON object on one line.

``doctor`` and ``status`` ask children of this environment (``python FLAGS -c CODE``) whether the switch
armed them, ``doctor --config`` and ``demo`` run one of their own modules (``python -m MODULE``) so that the
command's own process imports neither torch nor deepspeed. The child ends with ``emit``, the parent reads
it with ``reply`` (or ``answer``). Standard library only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

RESULT = "AWP-RESULT "


def emit(result: dict[str, Any]) -> None:
    """In the child: print the one RESULT line the parent reads."""
    print(RESULT + json.dumps(result), flush=True)


def label(flags: list[str] | tuple[str, ...]) -> str:
    """How the answers name an interpreter: ``python -S``."""
    return " ".join(["python", *flags])


def start(arguments: list[str] | tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start this interpreter with ``arguments`` (``[*flags, "-c", code]`` or ``["-m", module, ...]``) in ``env``."""
    return subprocess.Popen([sys.executable, *arguments], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@dataclass(frozen=True)
class Reply:
    """What a child left: its JSON object (None when it printed no RESULT line), exit status and stderr."""

    result: dict[str, Any] | None
    returncode: int
    stderr: str

    def failure(self) -> str:
        """``(exit N): the last line of stderr``, for a message that says the child failed."""
        last = (self.stderr.strip().splitlines() or ["no output"])[-1]
        return f"(exit {self.returncode}): {last}"


def reply(proc: subprocess.Popen[str], timeout: float | None = 600) -> Reply:
    """Wait for the child (killed past ``timeout``, and the timeout raised) and read its RESULT line."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    line = next((x for x in out.splitlines() if x.startswith(RESULT)), None)
    return Reply(json.loads(line[len(RESULT):]) if line is not None else None, proc.returncode, err)


def answer(proc: subprocess.Popen[str], timeout: float = 600) -> dict[str, Any]:
    """The child's JSON object, or ``{"error": ...}`` with its exit status and last line of stderr."""
    got = reply(proc, timeout)
    if got.result is None:
        return {"error": f"the process failed {got.failure()}"}
    return got.result
