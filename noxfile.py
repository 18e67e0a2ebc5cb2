"""Sessions for CI and developers; the releases they install come from the guard table.

    nox -s lint tests        what .ci/run runs
    nox -s demo [-- 0.14.4]  the README's main job, on a buggy DeepSpeed release by default
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from accelerate_warmup_patch import releases

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"


def _find_links() -> list[str]:
    """pip's find-links folder, where this machine keeps the CPU torch wheel (uv ignores pip's config)."""
    folder = os.environ.get("AWP_FIND_LINKS")
    if not folder:
        try:
            folder = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                                    capture_output=True, text=True, check=False).stdout.strip()
        except OSError:
            folder = ""
    return ["--find-links", folder] if folder and Path(folder).is_dir() else []


def _install_stack(session: nox.Session, deepspeed: str) -> None:
    links = _find_links()
    # torch first and pinned: DeepSpeed imports it while building, and a floating torch is a CUDA build
    session.install(*links, f"torch=={releases.TEST_TORCH}", "numpy", "setuptools")
    session.install(*links, "--no-build-isolation-package", "deepspeed", f"torch=={releases.TEST_TORCH}",
                    f"deepspeed=={deepspeed}", f"accelerate=={releases.TEST_ACCELERATE}",
                    f"transformers=={releases.TEST_TRANSFORMERS}")
    session.install("-e", ".")
    # the op DeepSpeed compiles on CPU is cached per release, so releases never share a build
    session.env["TORCH_EXTENSIONS_DIR"] = str(Path(session.virtualenv.location) / "torch_extensions")


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(releases.TEST_DEEPSPEED))
def tests(session: nox.Session, deepspeed: str) -> None:
    """The suite on real CPU engines with one DeepSpeed release."""
    _install_stack(session, deepspeed)
    session.install("pytest", "matplotlib")
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs, env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, mypy, and the README's support table regenerated from the guard table."""
    session.install("ruff", "mypy", "wrapt", "packaging", "-e", ".")
    session.run("ruff", "check", "accelerate_warmup_patch", "tests", "noxfile.py", "benchmarks")
    session.run("mypy")
    session.run("python", "-m", "accelerate_warmup_patch", "table", "--check", "README.md")


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """Install torch (CPU), a DeepSpeed release and this package; run the demo."""
    deepspeed = session.posargs[0] if session.posargs else releases.DEMO_DEEPSPEED
    _install_stack(session, deepspeed)
    session.run("python", "-m", "accelerate_warmup_patch", "demo")
