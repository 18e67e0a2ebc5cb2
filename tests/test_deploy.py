"""The README's install lines and the environment modules (deploy/, docs/deploy.md), run as an admin runs them.

- The README's lines that build the wheel, install it, install an extra and remove it, as written, in a copy of the
  checkout (their ``dist``) and fresh venvs.
- The checks answer for the jobs' Python: the ``accelerate-warmup-patch`` script of one venv, with another venv's
  ``python3`` first on PATH, answers for that one and names it; a Python on PATH too old for the package is an error.
- The README's prefix install (deploy/install-prefix.sh, into a folder of the test's instead of /opt/...), made with an
  admin's Python that has no DeepSpeed, and its module lines under both module systems, each its own ``module use``
  line: Lmod (Debian's, in a real login shell, ``bash -l``, where its profile script defines ``module``) and
  Environment Modules (Debian's package unpacked into a folder of its own: the two conflict as packages, and
  installing one removes the other). With a job's venv active (a fresh venv without the package that sees the
  suite's torch and DeepSpeed), ``doctor --strict`` answers for the job's Python; ``module load`` arms a real
  DeepSpeed job, ``module unload`` disarms the next; a user's own sitecustomize still runs; a value of
  ``ACCELERATE_WARMUP_PATCH`` set before the load (the kill switch ``off``) wins and stays after the unload, as does
  an ``off`` exported after the load; the warn module, then a switch to reset; a Python 2.7 and a 3.8 started under
  the module say nothing and arm nothing.

The image recipe is built for real by tests/test_image.py (``nox -s admin``). Lmod comes from Debian's package, which
.ci/run installs as root, and Environment Modules from ``apt-get download``; where either is missing its tests skip
and say so.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sysconfig
from pathlib import Path

import admin_steps
import ports
import pytest
import quickstart
from admin_steps import environment, fresh_venv, run
from conftest import HERE, installed
from ports import port

import accelerate_warmup_patch
from accelerate_warmup_patch import upstream

LMOD_PROFILE = Path("/etc/profile.d/lmod.sh")
# Environment Modules, unpacked from Debian's package into a folder of its own (the package would remove Lmod)
ENVIRONMENT_MODULES = Path(os.environ.get("AWP_ENVIRONMENT_MODULES",
                                          Path.home() / ".cache" / "accelerate-warmup-patch" / "environment-modules"))
README_PREFIX = "/opt/accelerate-warmup-patch"  # the prefix the README's module lines name: the test's own instead
LMOD_USE = f"module use {README_PREFIX}/modulefiles"
TCL_USE = f"module use {README_PREFIX}/modulefiles-tcl"
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return admin_steps.clone(tmp_path_factory.mktemp("clone"))


@pytest.fixture(scope="module")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built by the README's line in the clone: the one its install lines name."""
    return admin_steps.wheel(clone, tmp_path_factory.mktemp("builder") / "venv")


def test_the_readmes_install_lines_install_the_wheel_and_an_extra_and_remove_it(clone: Path, wheel: Path,
                                                                                  tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv")
    admin_steps.docs_line(quickstart.line("python3 -m pip install dist/"), python, clone)
    command = python.parent / "accelerate-warmup-patch"
    version = run([str(command), "--version"], cwd=tmp_path, env=environment()).stdout
    assert version == f"accelerate-warmup-patch {accelerate_warmup_patch.__version__}\n", version
    # the extra: resolved (--dry-run: the bucket's packages are not installed for nothing)
    extra = admin_steps.docs_line(quickstart.line('python3 -m pip install "dist/') + " --dry-run", python, clone)
    assert "s3fs" in extra.stdout and "fsspec" in extra.stdout, extra.stdout
    admin_steps.docs_line(quickstart.line("python3 -m pip uninstall"), python, clone)
    probe = "import importlib.util; print(importlib.util.find_spec('accelerate_warmup_patch'))"
    left = run([str(python), "-c", probe], cwd=tmp_path, env=environment())
    assert left.stdout == "None\n" and not command.exists(), left
    assert not list(python.parents[1].glob("lib/python*/site-packages/accelerate_warmup_patch*"))


# The checks answer for the jobs' Python ----------------------------------------------------------------------------

def _fake_deepspeed(python: Path, version: str) -> None:
    """DeepSpeed ``version``'s metadata in ``python``'s site-packages: doctor reads metadata, imports nothing."""
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    info = Path(site, f"deepspeed-{version}.dist-info")
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")


@pytest.fixture(scope="module")
def installed_tool(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The command of a venv that has the package and no DeepSpeed: a tool installed apart from the jobs' Python."""
    python = fresh_venv(tmp_path_factory.mktemp("tool") / "venv")
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], env=environment())
    return python.parent / "accelerate-warmup-patch"


def test_doctor_answers_for_the_python3_on_path_which_jobs_start_and_names_it(installed_tool: Path,
                                                                               tmp_path: Path) -> None:
    job = fresh_venv(tmp_path / "job")  # DeepSpeed 0.15.2 and not the package: what the jobs run is not patched
    _fake_deepspeed(job, "0.15.2")
    env = environment(PATH=f"{job.parent}{os.pathsep}{os.environ['PATH']}", ACCELERATE_WARMUP_PATCH="reset")
    doctor = subprocess.run([str(installed_tool), "doctor", "--strict"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=admin_steps.LIMIT_S)
    assert doctor.returncode == 1, doctor  # the tool's own Python has no DeepSpeed: it would have passed
    lines = doctor.stdout.splitlines()
    assert lines[0].startswith("DeepSpeed 0.15.2: AFFECTED") and "patch NOT active" in lines[0], doctor.stdout
    assert lines[2] == f"Python: {job.parent / 'python3'} (Python 3.11.{lines[2].split('3.11.')[1]}", doctor.stdout
    assert lines[2].endswith(": the python3 on PATH, which jobs start"), lines[2]
    status = json.loads(run([str(installed_tool), "status", "--json"], env=env, cwd=tmp_path).stdout)
    assert status["interpreter"]["executable"] == str(job.parent / "python3") and not status["armed"], status
    # `python -m` answers for the interpreter that runs it, and says that jobs start another
    own = run([str(installed_tool.parent / "python"), "-m", "accelerate_warmup_patch", "doctor"], env=env,
              cwd=tmp_path).stdout.splitlines()
    assert own[0].startswith("DeepSpeed is not installed") and ", NOT the python3 on PATH (" in own[2], own


def test_a_python_on_path_too_old_for_the_package_is_an_error_not_an_answer(installed_tool: Path,
                                                                            tmp_path: Path) -> None:
    old = sorted(PYENV.glob("3.8.*/bin/python3"))
    if not old:
        pytest.skip(f"no Python 3.8 in {PYENV} (pyenv's)")
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "python3").symlink_to(old[-1])
    env = environment(PATH=f"{bin_folder}{os.pathsep}{os.environ['PATH']}")
    doctor = subprocess.run([str(installed_tool), "doctor", "--strict"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=admin_steps.LIMIT_S)
    assert doctor.returncode == 2 and doctor.stdout == "", doctor
    assert doctor.stderr.startswith(f"accelerate-warmup-patch doctor: error: the python3 on PATH, which jobs start, "
                                    f"is {bin_folder / 'python3'}, Python 3.8."), doctor.stderr


# The environment modules -------------------------------------------------------------------------------------------

def _lmod_missing() -> str | None:
    if not LMOD_PROFILE.is_file():
        return "Lmod is not installed (.ci/run installs Debian's lmod as root: apt-get install lmod)"
    return None


def _environment_modules() -> Path:
    """modulecmd.tcl of Environment Modules, unpacked once from Debian's package into ENVIRONMENT_MODULES (never
    installed: it would remove Lmod); skips where apt cannot fetch it."""
    found = sorted(ENVIRONMENT_MODULES.glob("usr/lib/*/modulecmd.tcl"))
    if found:
        return found[0]
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None or shutil.which("tclsh") is None:
        pytest.skip("Environment Modules: needs apt-get, dpkg-deb and tclsh (Debian's tcl, which lmod brings)")
    download = ENVIRONMENT_MODULES.with_name("environment-modules-download")
    shutil.rmtree(download, ignore_errors=True)
    download.mkdir(parents=True)
    fetched = subprocess.run(["apt-get", "download", "environment-modules"], cwd=download, capture_output=True,
                             text=True, timeout=admin_steps.LIMIT_S)
    debs = list(download.glob("environment-modules_*.deb"))
    if fetched.returncode != 0 or len(debs) != 1:
        pytest.skip(f"Environment Modules: apt-get download environment-modules failed: {fetched.stderr[-500:]}")
    unpacking = ENVIRONMENT_MODULES.with_name("environment-modules-unpacking")
    shutil.rmtree(unpacking, ignore_errors=True)
    run(["dpkg-deb", "-x", str(debs[0]), str(unpacking)])
    unpacking.rename(ENVIRONMENT_MODULES)  # whole or not at all: another run may look at the same time
    shutil.rmtree(download, ignore_errors=True)
    return sorted(ENVIRONMENT_MODULES.glob("usr/lib/*/modulecmd.tcl"))[0]


def _module_shell(system: str, script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a shell where ``module`` is ``system``'s: Lmod's login shell, or a plain bash that Environment
    Modules' own ``autoinit`` gives its ``module`` (Lmod's variables and function kept out of it)."""
    if system == "lmod":
        return run(["bash", "-l", "-c", f"set -e\n{script}"], env=env, cwd=cwd)
    modulecmd = _environment_modules()
    plain = {k: v for k, v in env.items() if not k.startswith(("LMOD", "MODULE", "BASH_FUNC_", "__LMOD", "_LM"))
             and k not in ("LOADEDMODULES", "_LMFILES_")}
    init = f'eval "$(tclsh {shlex.quote(str(modulecmd))} bash autoinit)"'
    return run(["bash", "--noprofile", "--norc", "-c", f"set -e\n{init}\n{script}"], env=plain, cwd=cwd)


SYSTEMS = [pytest.param("lmod", marks=pytest.mark.skipif(_lmod_missing() is not None, reason=str(_lmod_missing()))),
           "environment-modules"]
USE_LINE = {"lmod": LMOD_USE, "environment-modules": TCL_USE}


@pytest.fixture(scope="module")
def prefix(clone: Path, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's prefix install (deploy/install-prefix.sh), with an admin's Python: a fresh venv that has neither
    the package nor DeepSpeed (the jobs' Python is another)."""
    admin = fresh_venv(tmp_path_factory.mktemp("admin") / "venv")
    target = tmp_path_factory.mktemp("module") / "prefix"
    admin_steps.docs_line(quickstart.line("deploy/install-prefix.sh"), admin, clone, **{README_PREFIX: str(target)})
    return target


@pytest.fixture(scope="module")
def job_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job's venv: without the package, it sees the suite's torch and DeepSpeed through a path line (so none of
    the suite's .pth files is read)."""
    python = fresh_venv(tmp_path_factory.mktemp("job") / "venv")
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(site, "suite-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python.parent.parent


def _use(system: str, root: Path) -> str:
    """The README's ``module use`` line of ``system``, with the test's prefix."""
    return quickstart.line(USE_LINE[system]).replace(README_PREFIX, shlex.quote(str(root)))


# a user's own sitecustomize on their PYTHONPATH, which the module's hides: it leaves a file in a job's folder
USER_SITECUSTOMIZE = ("import os\nif 'AWP_LAUNCH_OUT' in os.environ:\n"
                      "    open(os.path.join(os.environ['AWP_LAUNCH_OUT'], 'user-sitecustomize'), 'w').close()\n")


@pytest.mark.skipif(_lmod_missing() is not None, reason=str(_lmod_missing()))
def test_module_load_arms_a_real_deepspeed_job_its_check_answers_for_the_jobs_venv_and_unload_disarms_the_next(
        tmp_path: Path, prefix: Path, job_venv: Path) -> None:
    # the job itself is the module system's only through the environment it leaves: one system runs it (the other's
    # environment is the next test's)
    system = "lmod"
    version = installed("deepspeed")
    if not upstream.lacks("start", "WarmupLR", version):
        pytest.skip(f"DeepSpeed {version} starts WarmupLR at the warmup lr itself: the module's effect shows on an "
                    "affected release (the tests session of 0.15.2)")
    loaded, unloaded = tmp_path / "loaded", tmp_path / "unloaded"
    loaded.mkdir()
    unloaded.mkdir()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
    job = f"python {shlex.quote(str(HERE / 'launched.py'))}"  # the job's venv is active: its python
    env = environment(PYTHONPATH=str(tmp_path / "user"), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port(ports.MODULE_JOB)))
    proc = _module_shell(system, f"""
{_use(system, prefix)}
{quickstart.line("module load accelerate-warmup-patch")}
. {shlex.quote(str(job_venv / 'bin' / 'activate'))}
accelerate-warmup-patch doctor --strict > {shlex.quote(str(tmp_path / 'doctor.txt'))}
python -c 'import wrapt; print("wrapt:", wrapt.__file__)'
AWP_LAUNCH_OUT={shlex.quote(str(loaded))} {job}
{quickstart.line("module unload")}
echo "after unload: [${{ACCELERATE_WARMUP_PATCH:-}}] [$PYTHONPATH]"
AWP_LAUNCH_OUT={shlex.quote(str(unloaded))} {job}
""", env, tmp_path)
    assert f"after unload: [] [{tmp_path / 'user'}]" in proc.stdout, proc.stdout
    # the job's own wrapt (the suite's, through its path line), not the prefix's: the module shadows no package
    wrapt_file = next(line for line in proc.stdout.splitlines() if line.startswith("wrapt: ")).split(" ", 1)[1]
    assert Path(wrapt_file).is_relative_to(sysconfig.get_paths()["purelib"]), wrapt_file
    # the check, run by the prefix's command (an admin's Python without DeepSpeed), answered for the job's venv
    doctor = (tmp_path / "doctor.txt").read_text().splitlines()
    assert doctor[0].startswith(f"DeepSpeed {version}: AFFECTED") and "through sitecustomize" in doctor[0], doctor
    assert doctor[2].startswith(f"Python: {job_venv / 'bin' / 'python3'} (Python ") and \
        doctor[2].endswith("the python3 on PATH, which jobs start"), doctor
    armed = json.loads((loaded / "env-rank0.json").read_text())["armed"]
    assert armed == {"mode": "reset", "applied_by": ["sitecustomize"]}, armed
    assert json.loads((loaded / "rank0.json").read_text())[0] == [0.0]  # step 0 at warmup_min_lr
    assert json.loads((unloaded / "env-rank0.json").read_text())["armed"] is None
    assert json.loads((unloaded / "rank0.json").read_text())[0] == [1e-3]  # the release's own: the optimizer's lr
    assert (loaded / "user-sitecustomize").is_file() and (unloaded / "user-sitecustomize").is_file()


_PROBE = "import sys; p = sys.modules.get('accelerate_warmup_patch'); print('armed:', p and p.status()['mode'])"


def _state(label: str) -> str:
    return f'echo "{label}: [${{ACCELERATE_WARMUP_PATCH-unset}}]"'


@pytest.mark.parametrize("system", SYSTEMS)
def test_each_module_system_keeps_the_users_value_switches_warn_to_reset_and_checks_the_jobs_venv(
        system: str, tmp_path: Path, prefix: Path, job_venv: Path) -> None:
    probe = f"{shlex.quote(str(job_venv / 'bin' / 'python'))} -c {shlex.quote(_PROBE)}"
    doctor = tmp_path / "doctor.txt"
    # a job's Python with no wrapt of its own: the prefix's (PREFIX/deps) is the one it finds
    bare = fresh_venv(tmp_path / "bare-venv")
    bare_probe = f"{shlex.quote(str(bare))} -c {shlex.quote(_PROBE + '; import wrapt; print(wrapt.__file__)')}"
    proc = _module_shell(system, f"""
{_use(system, prefix)}
export ACCELERATE_WARMUP_PATCH=off
{quickstart.line("module load accelerate-warmup-patch")}
{_state("off, then load")}
{probe}
{quickstart.line("module unload")}
{_state("unloaded")}
unset ACCELERATE_WARMUP_PATCH
{quickstart.line("module load accelerate-warmup-patch-warn")}
{_state("warn module")}
{probe}
{quickstart.line("module switch")}
{_state("switched")}
{probe}
{probe.replace(' -c ', ' -S -c ', 1)}
{bare_probe}
(. {shlex.quote(str(job_venv / 'bin' / 'activate'))} && accelerate-warmup-patch doctor --strict \
  > {shlex.quote(str(doctor))})
{quickstart.line("module unload")}
{_state("unloaded")}
{probe}
{quickstart.line("module load accelerate-warmup-patch")}
export ACCELERATE_WARMUP_PATCH=off
{quickstart.line("module unload")}
{_state("off exported after the load, unloaded")}
""", environment(), tmp_path)
    assert proc.stdout.splitlines() == [
        "off, then load: [off]", "armed: off", "unloaded: [off]",
        "warn module: [warn]", "armed: warn",
        "switched: [reset]", "armed: reset", "armed: None", "armed: reset",
        str(prefix / "deps" / "wrapt" / "__init__.py"),
        "unloaded: [unset]", "armed: None", "off exported after the load, unloaded: [off]"], proc.stdout
    # the check, run by the prefix's command (an admin's Python without DeepSpeed), answered for the job's venv
    lines = doctor.read_text().splitlines()
    assert lines[0].startswith(f"DeepSpeed {installed('deepspeed')}: "), lines
    assert lines[-1].startswith("--strict: passes"), lines
    assert lines[2].startswith(f"Python: {job_venv / 'bin' / 'python3'} (Python ") and \
        lines[2].endswith("the python3 on PATH, which jobs start"), lines
    assert "armed at start-up in reset mode, through sitecustomize" in doctor.read_text(), lines


@pytest.mark.parametrize("version", ["2.7", "3.8"])
def test_a_python_the_package_does_not_support_runs_under_the_module_silently_and_unarmed(
        version: str, tmp_path: Path, prefix: Path) -> None:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not found:
        pytest.skip(f"no Python {version} in {PYENV} (pyenv's)")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "sitecustomize.py").write_text("import sys\nsys.stdout.write('user sitecustomize\\n')\n")
    probe = "import sys; sys.stdout.write('armed: %s\\n' % ('accelerate_warmup_patch' in sys.modules))"
    script = f"{shlex.quote(str(found[-1]))} -c {shlex.quote(probe)}"
    system = "lmod" if _lmod_missing() is None else "environment-modules"
    proc = _module_shell(system, f"""
{_use(system, prefix)}
{quickstart.line("module load accelerate-warmup-patch")}
{script} 2> {shlex.quote(str(tmp_path / 'stderr.txt'))}
""", environment(PYTHONPATH=str(tmp_path / "user")), tmp_path)
    assert proc.stdout.splitlines() == ["user sitecustomize", "armed: False"], proc.stdout
    assert (tmp_path / "stderr.txt").read_text() == ""  # Python 2.7 printed "'import sitecustomize' failed"
