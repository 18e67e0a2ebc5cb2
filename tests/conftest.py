"""Shared helpers: run the harness in a fresh interpreter and read its results.

The harness (real engines) is imported on first use of one of its names here, not when pytest loads this file:
``pytest tests/unit`` loads it too, in a venv with neither torch nor DeepSpeed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ports
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
CHILDREN = HERE / "children"
ports.one_rank_port_by_default()

_FROM_HARNESS = ("GOLDEN", "Ran", "Spec", "run_specs")
# Set by the nox sessions that install DeepSpeed (noxfile.py): there a missing release is an error, not a skip.
REQUIRE = "AWP_REQUIRE_DEEPSPEED"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of a module tiers.TRANSFORMERS_TESTS names needs transformers: it gets the marker the tests that need
    it elsewhere carry one by one (`nox -s tests` runs them in its second pass)."""
    import tiers

    for item in items:
        if f"tests/{item.path.name}" in tiers.TRANSFORMERS_TESTS:
            item.add_marker(pytest.mark.transformers)


def __getattr__(name: str) -> Any:
    """``from conftest import Spec``: the harness's names, imported when a real-engine module asks for them."""
    if name in _FROM_HARNESS:
        import harness

        return getattr(harness, name)
    raise AttributeError(f"module 'conftest' has no attribute {name!r}")


# what the audit says of a run with no record whose release ran step 0 as 0.19.8 does, where an older release would
# not have: a job that resumed such a save from another release leaves the same files (docs/audit.md, "Which
# release ran step 0")
UNSEEN_START = "resumed a save of another release unpatched leaves these same files"


def cleared_or_unseen(report: dict[str, Any]) -> bool:
    """Whether ``report`` clears a run that ran as 0.19.8 runs it, or is ``unknown`` only because no record says
    which release ran its step 0 (a run with no record on a release that needs no fix)."""
    return report["verdict"] == "not affected" or (report["verdict"] == "unknown" and UNSEEN_START in report["why"])


def step0_lr_said(report: dict[str, Any], lr: float) -> bool:
    """Whether ``report`` says step 0 ran at ``lr``, or says no lr because no record says which release ran it."""
    unseen = report["verdict"] == "unknown" and UNSEEN_START in report["why"] and report["step0_lr"] is None
    return unseen or report["step0_lr"] == pytest.approx(lr)


def bare_audit(folder: Path) -> Any:
    """``audit`` as an admin's machine without torch runs it: ``python -S -m accelerate_warmup_patch audit ARGS``
    with a copy of the package alone on its path (in ``folder``), and no PYTHON* or ACCELERATE_WARMUP_PATCH*
    variable. Returns a function of the arguments that returns the finished process."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("accelerate_warmup_patch")  # found, not imported: importing arms the patch
    assert spec is not None and spec.origin
    shutil.copytree(Path(spec.origin).parent, folder / "accelerate_warmup_patch",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "ACCELERATE_WARMUP_PATCH"))}
    env["PYTHONPATH"] = str(folder)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-S", *args], env=env, cwd=folder, capture_output=True, text=True,
                              timeout=300)

    return run


def session_ccache() -> dict[str, str]:
    """The nox session's compiler cache settings (noxfile.py's _own_op_folder), where it has them: a rank that
    ssh, MPI or Slurm starts has only the variables its test carries, and without these it compiles
    DeepSpeed's op again (a minute or more)."""
    names = ("CCACHE_DIR", "CCACHE_BASEDIR", "CCACHE_NOHASHDIR")
    return {name: os.environ[name] for name in names if os.environ.get(name)}


@pytest.fixture(scope="session", autouse=True)
def _temp_files_in_pytests_own_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # torch's elastic agent leaves a folder in the temp dir per launch, and so would anything else a
    # child process forgets; pytest keeps only its last three base folders
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
        # doctor's and status's kept answers (cli/probe_cache.py): one cache for the session, so that the many tests
        # that run either command probe each build once, and none reads or writes the user's ~/.cache
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(autouse=True)
def _no_inherited_activation(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACCELERATE_WARMUP_PATCH", "ACCELERATE_WARMUP_PATCH_STRICT"):
        monkeypatch.delenv(name, raising=False)


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=600, cwd=HERE)


def run_child(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``tests/children/<script>`` with ``args`` in a new interpreter (the scripts a test's child runs are
    files, read by ruff and mypy like any other)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, str(CHILDREN / script), *args], env=full_env, capture_output=True,
                          text=True, timeout=600, cwd=HERE)


def installed(distribution: str) -> str:
    """The installed release of a distribution the suite needs (the package's one lookup). Without it the
    module (or test) that asks skips, and says why; in a session that installs DeepSpeed it fails instead."""
    from accelerate_warmup_patch import releases

    version = releases.installed(distribution)
    if version is None:
        if os.environ.get(REQUIRE, "").strip() not in ("", "0"):
            pytest.fail(f"{distribution} is not installed, and {REQUIRE} is set (a nox session that installs it)",
                        pytrace=False)
        pytest.skip(f"needs {distribution}, which is not installed (the unit tier, tests/unit, runs without it)",
                    allow_module_level=True)
    return version


@pytest.fixture(scope="session")
def deepspeed() -> str:
    """DeepSpeed's installed release, for a test (or a module's fixture) that needs it in a module that mostly does
    not: without it the test skips (or fails, under AWP_REQUIRE_DEEPSPEED)."""
    return installed("deepspeed")
