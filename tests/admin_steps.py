"""An admin's steps as the docs write them, for tests/test_deploy.py and tests/test_image.py: a copy of the checkout
(where the README's lines write their ``dist``), fresh venvs, and a docs line run as written."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import quickstart

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 600


def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``command``, which must succeed (its output's ends in the failure)."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT_S, **kwargs)
    assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def environment(**extra: str) -> dict[str, str]:
    """This environment without the package's switches and Python's variables (each test sets what it means)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_WARMUP_PATCH", "PYTHON"))}
    return {**env, **extra}


def fresh_venv(folder: Path, python: str | None = None) -> Path:
    """A fresh venv with pip (the standard library's venv, on ``python`` or the suite's interpreter): its python."""
    run([python or getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(folder)], env=environment())
    return folder / "bin" / "python"


def docs_line(line: str, python: Path, cwd: Path, **replace: str) -> subprocess.CompletedProcess[str]:
    """A docs line run as written, in ``cwd``, with ``python``'s venv first on PATH (its ``python3``); ``replace``
    maps a path the line names (``/opt/...``) to the test's own."""
    for old, new in replace.items():
        line = line.replace(old, new)
    path = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
    return run(["bash", "-c", line], cwd=cwd, env=environment(PATH=path))


def clone(folder: Path) -> Path:
    """A copy of the checkout's files in ``folder``, where the README's lines write, not the checkout itself."""
    target = folder / "accelerate-warmup-patch"
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(".git", ".nox", "dist", "build", "__pycache__",
                                                                 "*_cache", "*.egg-info", ".venv"))
    return target


def wheel(copy: Path, builder: Path) -> Path:
    """The wheel, built by the README's line in ``copy`` with a fresh venv made in ``builder``: the one its install
    lines name."""
    python = fresh_venv(builder)
    docs_line(quickstart.line("python3 -m pip wheel"), python, copy)
    (built,) = (copy / "dist").glob("accelerate_warmup_patch-*.whl")
    assert f"dist/{built.name}" in quickstart.line("python3 -m pip install dist/"), "the README names this version's"
    return built
