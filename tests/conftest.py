"""Shared helpers: run the harness in a fresh interpreter and read its results."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from harness import GOLDEN, Ran, Spec, run_specs  # noqa: E402,F401


def session_ccache() -> dict[str, str]:
    """The nox session's compiler cache settings (noxfile.py's _own_op_folder), where it has them: a rank that
    ssh, MPI or Slurm starts has only the variables its test carries, and without these it compiles
    DeepSpeed's op again (a minute or more)."""
    return {name: os.environ[name] for name in ("CCACHE_DIR", "CCACHE_BASEDIR") if os.environ.get(name)}


@pytest.fixture(scope="session", autouse=True)
def _temp_files_in_pytests_own_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # torch's elastic agent leaves a folder in the temp dir per launch, and so would anything else a
    # child process forgets; pytest keeps only its last three base folders
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
        yield


@pytest.fixture(autouse=True)
def _no_inherited_activation(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_WARMUP_PATCH", "ACCELERATE_WARMUP_PATCH_STRICT"):
        monkeypatch.delenv(name, raising=False)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=600, cwd=HERE)


def installed(distribution: str) -> str:
    """The installed release of a distribution the suite needs (the package's one lookup)."""
    from accelerate_warmup_patch import releases

    version = releases.installed(distribution)
    assert version is not None, f"{distribution} is not installed"
    return version
