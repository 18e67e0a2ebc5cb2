"""Shared helpers: run the harness in a fresh interpreter and read its results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from harness import Spec  # noqa: E402

GOLDEN = json.loads((HERE / "golden.json").read_text())


@pytest.fixture(autouse=True)
def _no_inherited_activation(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_WARMUP_PATCH", "ACCELERATE_WARMUP_PATCH_STRICT"):
        monkeypatch.delenv(name, raising=False)


class Ran:
    """One subprocess: its exit code, its stderr, and its results keyed by scenario."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.returncode = proc.returncode
        self.stderr = proc.stderr
        self.stdout = proc.stdout
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        self.data: dict[str, Any] = json.loads(line[len("RESULT "):]) if line else {}
        self.lrs = {r["key"]: r["lrs"] for r in self.data.get("results", [])}

    def patch_lines(self) -> list[str]:
        return [x for x in self.stderr.splitlines() if x.startswith("[accelerate_warmup_patch]")]


def run_specs(*specs: Spec, env: dict[str, str] | None = None, check: bool = True) -> Ran:
    full_env = {**os.environ, **(env or {})}
    args = [sys.executable, str(HERE / "harness.py"), *(json.dumps(asdict(s)) for s in specs)]
    proc = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=900, cwd=HERE)
    ran = Ran(proc)
    if check and (proc.returncode != 0 or not ran.data):
        raise AssertionError(f"harness failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return ran


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=600, cwd=HERE)


def installed(distribution: str) -> str:
    from importlib import metadata

    return metadata.version(distribution)
