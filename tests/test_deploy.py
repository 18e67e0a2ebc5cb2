"""The README's install lines and the deployment files (deploy/, docs/deploy.md), run as an admin runs them.

- The README's lines that build the wheel, install it, install an extra and remove it, as written, in a copy of the
  checkout (their ``dist``) and fresh venvs.
- The image recipe (deploy/Dockerfile): its instructions, in its order, in a fresh venv (no container runtime here):
  the wheel built as the README builds it, installed, the ``ENV`` line, the image check. The image's DeepSpeed is a
  fake's metadata (doctor reads metadata, imports nothing).
- The README's prefix install (deploy/install-prefix.sh, into a folder of the test's instead of /opt/...) and its
  module lines, the Lmod modulefile in a real login shell (``bash -l``, where
  Lmod's profile script defines ``module``): ``module load`` arms a real DeepSpeed job started from a Python that
  does not have the package (a fresh venv that sees the suite's torch and DeepSpeed), ``module unload`` disarms the
  next; a user's own sitecustomize still runs. The Tcl modulefile, for Environment Modules, is loaded by Lmod too.

Lmod comes from Debian's package, which .ci/run installs as root; elsewhere the Lmod tests skip and say so.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import ports
import pytest
import quickstart
from conftest import HERE, installed
from ports import port

import accelerate_warmup_patch
from accelerate_warmup_patch import upstream

ROOT = HERE.parent
DEPLOY = ROOT / "deploy"
LMOD_PROFILE = Path("/etc/profile.d/lmod.sh")
LIMIT_S = 600


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT_S, **kwargs)
    assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def _environment(**extra: str) -> dict[str, str]:
    """This environment without the package's switches (each test sets what it means)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_WARMUP_PATCH", "PYTHON"))}
    return {**env, **extra}


def _fresh_venv(folder: Path) -> Path:
    """A fresh venv with pip (the standard library's venv, on the suite's interpreter): its python."""
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(folder)], env=_environment())
    return folder / "bin" / "python"


def _readme_line(line: str, python: Path, cwd: Path, **replace: str) -> subprocess.CompletedProcess[str]:
    """A README line run as written, in ``cwd``, with ``python``'s venv first on PATH (its ``python3``); ``replace``
    maps a path the README names (``/opt/...``) to the test's own."""
    for old, new in replace.items():
        line = line.replace(old, new)
    path = f"{python.parent}{os.pathsep}{os.environ['PATH']}"
    return _run(["bash", "-c", line], cwd=cwd, env=_environment(PATH=path))


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's files, where the README's lines write (its ``dist``), not the checkout itself."""
    folder = tmp_path_factory.mktemp("clone") / "accelerate-warmup-patch"
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(".git", ".nox", "dist", "build", "__pycache__",
                                                                 "*_cache", "*.egg-info", ".venv"))
    return folder


@pytest.fixture(scope="module")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built by the README's line in the clone: the one its install lines name."""
    python = _fresh_venv(tmp_path_factory.mktemp("builder") / "venv")
    _readme_line(quickstart.line("python3 -m pip wheel"), python, clone)
    (built,) = (clone / "dist").glob("accelerate_warmup_patch-*.whl")
    assert f"dist/{built.name}" in quickstart.line("python3 -m pip install dist/"), "the README names this version's"
    return built


def test_the_readmes_install_lines_install_the_wheel_and_an_extra_and_remove_it(clone: Path, wheel: Path,
                                                                                  tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    _readme_line(quickstart.line("python3 -m pip install dist/"), python, clone)
    command = python.parent / "accelerate-warmup-patch"
    version = _run([str(command), "--version"], cwd=tmp_path, env=_environment()).stdout
    assert version == f"accelerate-warmup-patch {accelerate_warmup_patch.__version__}\n", version
    # the extra: resolved (--dry-run: the bucket's packages are not installed for nothing)
    extra = _readme_line(quickstart.line('python3 -m pip install "dist/') + " --dry-run", python, clone)
    assert "s3fs" in extra.stdout and "fsspec" in extra.stdout, extra.stdout
    _readme_line(quickstart.line("python3 -m pip uninstall"), python, clone)
    probe = "import importlib.util; print(importlib.util.find_spec('accelerate_warmup_patch'))"
    left = _run([str(python), "-c", probe], cwd=tmp_path, env=_environment())
    assert left.stdout == "None\n" and not command.exists(), left
    assert not list(python.parents[1].glob("lib/python*/site-packages/accelerate_warmup_patch*"))


# The image recipe ------------------------------------------------------------------------------------------------

def _instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, in order: (INSTRUCTION, its argument); comments and blank lines dropped."""
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, argument = line.strip().partition(" ")
            found.append((name, argument.strip()))
    return found


def _build(instructions: list[tuple[str, str]], context: Path, root: Path, python: Path,
           image_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Each instruction as docker runs it, in order; ``/tmp/`` is ``root``; the last RUN's result (the others
    must pass). ``python3`` and the installed commands are the venv's."""
    args: dict[str, str] = {}
    env = {**image_env, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    last = None
    for name, argument in instructions:
        if name == "ARG":
            key, _, default = argument.partition("=")
            args[key] = default
        elif name == "ENV":
            key, _, value = argument.partition("=")
            env[key] = value
        elif name == "COPY":
            for key, value in args.items():
                argument = argument.replace(f"${{{key}}}", value)
            source, target = argument.split()
            (root / Path(target).relative_to("/tmp")).mkdir(parents=True, exist_ok=True)
            (root / Path(target).relative_to("/tmp") / source).write_bytes((context / source).read_bytes())
        elif name == "RUN":
            last = subprocess.run(["bash", "-c", argument.replace("/tmp/", f"{root}/")], env={**env, **args},
                                  capture_output=True, text=True, timeout=LIMIT_S)
            if (name, argument) != instructions[-1]:
                assert last.returncode == 0, (argument, last.stdout, last.stderr)
        else:
            raise AssertionError(f"deploy/Dockerfile: {name} is not an instruction this test runs")
    assert last is not None
    return last


def _fake_deepspeed(folder: Path, version: str) -> dict[str, str]:
    info = folder / f"deepspeed-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    return {"PYTHONPATH": str(folder)}


def test_the_image_recipe_installs_the_wheel_arms_warn_and_its_check_passes(tmp_path: Path, wheel: Path) -> None:
    venv_python = _fresh_venv(tmp_path / "venv")
    recipe = _instructions((DEPLOY / "Dockerfile").read_text())
    arg = next(argument for name, argument in recipe if name == "ARG")
    assert arg == f"AWP_WHEEL={wheel.name}", "the recipe's wheel is this version's"
    context, root = tmp_path / "context", tmp_path / "root"
    context.mkdir()
    root.mkdir()
    (context / wheel.name).write_bytes(wheel.read_bytes())
    image = _environment(**_fake_deepspeed(tmp_path / "image-site", "0.15.2"))
    check = _build(recipe, context, root, venv_python, image)
    assert check.returncode == 0 and "AFFECTED" in check.stdout and "warn mode" in check.stdout, check.stdout
    assert not list(root.glob("*.whl"))  # the RUN line removed it
    assert recipe[-2:] == [("ENV", "ACCELERATE_WARMUP_PATCH=warn"), ("RUN", "accelerate-warmup-patch doctor --strict")]
    # the check must come after the ENV line: before it, nothing arms the image and the check fails
    early = _build([recipe[-1]], context, root, venv_python, image)
    assert early.returncode == 1 and "patch NOT active" in early.stdout, early.stdout
    # reset, the roll-out's second step, passes the same check
    later = _build([("ENV", "ACCELERATE_WARMUP_PATCH=reset"), recipe[-1]], context, root, venv_python, image)
    assert later.returncode == 0 and "reset mode" in later.stdout, later.stdout


# The environment module -----------------------------------------------------------------------------------------

needs_lmod = pytest.mark.skipif(not LMOD_PROFILE.is_file(), reason="Lmod is not installed (.ci/run installs "
                                "Debian's lmod as root: apt-get install lmod)")


README_PREFIX = "/opt/accelerate-warmup-patch"  # the prefix the README's module lines name: the test's own instead


@pytest.fixture(scope="module")
def prefix(clone: Path, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The README's prefix install (deploy/install-prefix.sh), with the job's Python: a fresh venv without the
    package, which sees the suite's torch and DeepSpeed through a path line (so none of the suite's .pth files is
    read)."""
    base = tmp_path_factory.mktemp("module")
    python = _fresh_venv(base / "job-venv")
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "suite-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _readme_line(quickstart.line("deploy/install-prefix.sh"), python, clone, **{README_PREFIX: str(base / "prefix")})
    return base / "prefix", python


def _login_shell(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a login shell, where Lmod's profile script defines ``module``."""
    return _run(["bash", "-l", "-c", f"set -e\n{script}"], env=env, cwd=cwd)


# a user's own sitecustomize on their PYTHONPATH, which the module's hides: it leaves a file in a job's folder
USER_SITECUSTOMIZE = ("import os\nif 'AWP_LAUNCH_OUT' in os.environ:\n"
                      "    open(os.path.join(os.environ['AWP_LAUNCH_OUT'], 'user-sitecustomize'), 'w').close()\n")


@needs_lmod
def test_module_load_arms_a_real_deepspeed_job_and_unload_disarms_the_next(tmp_path: Path,
                                                                           prefix: tuple[Path, Path]) -> None:
    version = installed("deepspeed")
    if not upstream.lacks("start", "WarmupLR", version):
        pytest.skip(f"DeepSpeed {version} starts WarmupLR at the warmup lr itself: the module's effect shows on an "
                    "affected release (the tests session of 0.15.2)")
    root, python = prefix
    loaded, unloaded = tmp_path / "loaded", tmp_path / "unloaded"
    loaded.mkdir()
    unloaded.mkdir()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    job = f"{shlex.quote(str(python))} {shlex.quote(str(HERE / 'launched.py'))}"
    env = _environment(PYTHONPATH=str(tmp_path / "user"), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port(ports.MODULE_JOB)))
    proc = _login_shell(f"""
{quickstart.line("module use").replace(README_PREFIX, shlex.quote(str(root)))}
{quickstart.line("module load")}
accelerate-warmup-patch doctor --strict > {shlex.quote(str(tmp_path / 'doctor.txt'))}
{shlex.quote(str(python))} -c 'import wrapt; print("wrapt:", wrapt.__file__)'
AWP_LAUNCH_OUT={shlex.quote(str(loaded))} {job}
{quickstart.line("module unload")}
echo "after unload: [${{ACCELERATE_WARMUP_PATCH:-}}] [$PYTHONPATH]"
AWP_LAUNCH_OUT={shlex.quote(str(unloaded))} {job}
""", env, tmp_path)
    assert f"after unload: [] [{tmp_path / 'user'}]" in proc.stdout, proc.stdout
    # the job's own wrapt (the suite's, through its path line), not the prefix's: the module shadows no package
    wrapt_file = next(line for line in proc.stdout.splitlines() if line.startswith("wrapt: ")).split(" ", 1)[1]
    assert Path(wrapt_file).is_relative_to(sysconfig.get_paths()["purelib"]), wrapt_file
    doctor = (tmp_path / "doctor.txt").read_text()
    assert doctor.startswith(f"DeepSpeed {version}: AFFECTED") and "through sitecustomize" in doctor, doctor
    armed = json.loads((loaded / "env-rank0.json").read_text())["armed"]
    assert armed == {"mode": "reset", "applied_by": ["sitecustomize"]}, armed
    assert json.loads((loaded / "rank0.json").read_text())[0] == [0.0]  # step 0 at warmup_min_lr
    assert json.loads((unloaded / "env-rank0.json").read_text())["armed"] is None
    assert json.loads((unloaded / "rank0.json").read_text())[0] == [1e-3]  # the release's own: the optimizer's lr
    assert (loaded / "user-sitecustomize").is_file() and (unloaded / "user-sitecustomize").is_file()


_PROBE = "import sys; p = sys.modules.get('accelerate_warmup_patch'); print('armed:', p and p.status()['applied_by'])"


@needs_lmod
def test_the_tcl_modulefile_arms_and_disarms_as_the_lua_one(tmp_path: Path, prefix: tuple[Path, Path]) -> None:
    root, python = prefix
    probe = f"{shlex.quote(str(python))} -c {shlex.quote(_PROBE)}"
    # a job's Python with no wrapt of its own: the prefix's (PREFIX/deps) is the one it finds
    bare = _fresh_venv(tmp_path / "bare-venv")
    bare_probe = f"{shlex.quote(str(bare))} -c {shlex.quote(_PROBE + '; import wrapt; print(wrapt.__file__)')}"
    proc = _login_shell(f"""
module use {shlex.quote(str(root / 'modulefiles-tcl'))}
module load accelerate-warmup-patch
echo "loaded: $ACCELERATE_WARMUP_PATCH"
{probe}
{probe.replace(' -c ', ' -S -c ', 1)}
{bare_probe}
module unload accelerate-warmup-patch
{probe}
""", _environment(), tmp_path)
    assert proc.stdout.splitlines() == ["loaded: reset", "armed: ['sitecustomize']", "armed: None",
                                        "armed: ['sitecustomize']", str(root / "deps" / "wrapt" / "__init__.py"),
                                        "armed: None"], proc.stdout
