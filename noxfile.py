"""Sessions for CI and developers; the releases they install come from tests/tiers.py and tests/eras.py.

    nox --parallel 2 -s ci      every session CI needs, two at a time (CI_SESSIONS below; .ci/run runs them too)
    nox --parallel 2 -s quick   lint, the unit tier, the core promises on a buggy and a fixed release (about 3 min)
    nox -s unit                 the unit tier: pure logic, neither torch nor DeepSpeed installed (seconds)
    nox -s demo [-- 0.14.4]     `accelerate-warmup-patch demo` in a venv, on a buggy DeepSpeed release by default
    nox -s matrix_era           each DeepSpeed minor on the stack of its month (tests/eras.py)

Every session may run beside another (``nox --parallel``): each has its own venv, its own folder for
DeepSpeed's compiled op and, where it launches ranks or servers, its own block of ports (tests/ports.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from accelerate_warmup_patch import releases

sys.path.insert(0, str(Path(__file__).parent / "tests"))
import eras  # the era stacks: test tooling, not part of the package
import ports  # the block of ports a session's launches listen on
import tiers  # the releases each session installs

# This machine sets PYTHONDONTWRITEBYTECODE: then every fresh interpreter compiles torch, deepspeed
# and transformers from source again (23 s for `import deepspeed` instead of 3 s), and the suite and
# the matrix start hundreds of them. Sessions write .pyc files into their own venvs.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"
# every session has its own venv, op folder and ports (see the docstring): any two may run side by side
nox.options.allow_parallel = True


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


def _install_stack(session: nox.Session, deepspeed: str, accelerate: str = tiers.TEST_ACCELERATE,
                   this: str = "-e .", transformers: bool = True) -> None:
    """torch, DeepSpeed, accelerate, transformers (unless told not to); then this package (``this``: editable, or a
    built wheel)."""
    links = _find_links()
    pins = _accelerate_pins(accelerate) if transformers else [f"accelerate=={accelerate}"]
    # torch first and pinned: DeepSpeed imports it while building, and a floating torch is a CUDA build
    session.install(*links, f"torch=={tiers.TEST_TORCH}", "numpy", "setuptools")
    session.install(*links, "--no-build-isolation-package", "deepspeed", f"torch=={tiers.TEST_TORCH}",
                    f"deepspeed=={deepspeed}", *pins)
    session.install(*this.split())
    _own_op_folder(session)
    _require_deepspeed(session)


def _require_deepspeed(session: nox.Session) -> None:
    """In a session that installs DeepSpeed, a test module that needs it errors instead of skipping
    (tests/conftest.py's ``installed``): a broken install must never pass as a run of skips."""
    session.env["AWP_REQUIRE_DEEPSPEED"] = "1"


def _own_op_folder(session: nox.Session) -> None:
    """The folder DeepSpeed compiles its CPU ops into, inside the session's venv, and ccache's settings, so that
    each op (the comm op ~1 min, FusedAdam ~1.5 min) compiles once per DeepSpeed source and torch on this
    machine, not once per venv or per clone.

    Two venvs never share the folder: ninja's command lines hold the venv's path, so each would rebuild
    the other's. torch 2.13 compiles through ccache where ccache is on PATH (.ci/run installs it). Its
    base_dir, the envdir, makes those paths relative to the folder, the same in every venv and every clone;
    FusedAdam's builder passes -g, and with -g ccache also hashes the build folder unless told not to
    (CCACHE_NOHASHDIR), which made every venv compile it again. The cache is ccache's own (CCACHE_DIR, else
    its default folder) where that can be written, so a new clone's run finds what an earlier run compiled,
    as uv's cache keeps what it downloaded; else a folder of the envdir's. The tests carry these variables to
    the ranks they launch over ssh, MPI and Slurm. Without ccache each venv compiles."""
    venv = Path(session.virtualenv.location).resolve()
    session.env["TORCH_EXTENSIONS_DIR"] = str(venv / "torch_extensions")
    session.env["CCACHE_DIR"] = _ccache_dir(fallback=venv.parent / "_ccache")
    session.env["CCACHE_BASEDIR"] = str(venv.parent)
    session.env["CCACHE_NOHASHDIR"] = "1"


def _ccache_dir(fallback: Path) -> str:
    """ccache's cache folder as ccache itself reports it (CCACHE_DIR or its configured default), when it can be
    written; else ``fallback``."""
    try:
        reported = subprocess.run(["ccache", "--get-config", "cache_dir"], capture_output=True, text=True,
                                  check=False, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        reported = ""
    if reported:
        try:
            Path(reported).mkdir(parents=True, exist_ok=True)
            if os.access(reported, os.W_OK):
                return reported
        except OSError:
            pass
    return str(fallback)


def _install_oracle(session: nox.Session, deepspeed: str) -> None:
    """hypothesis, and the reference release's own code beside the installed release for the differential tier
    (tests/test_differential.py loads its lr_schedules.py by path): ``<venv>/reference-deepspeed``, installed by the
    registry's ordinary client with --target, so that nothing of the reference is copied into the project."""
    session.install("hypothesis")
    if deepspeed != releases.BEHAVIOR_REFERENCE:
        folder = Path(session.virtualenv.location) / "reference-deepspeed"
        session.install(*_find_links(), "--no-deps", "--no-build-isolation", "--target", str(folder),
                        f"deepspeed=={releases.BEHAVIOR_REFERENCE}")


def _other_release(session: nox.Session, deepspeed: str, chosen: str | None = None,
                   third: str | None = None) -> None:
    """The suite's other release's code made runnable beside the installed release, for the run histories' release
    changes (tests/histories.py, AWP_HISTORY_OTHER_DEEPSPEED: that folder first on the path of this venv's Python).
    Beside the buggy release, the reference in _install_oracle's folder, with einops, its one dependency the buggy
    release lacks; beside the reference, the buggy release, installed the same way (--target, no dependencies: the
    reference's venv holds them). A long search may choose another release (``chosen``: 0.15.3, say), installed into
    a folder of its own the same way, and a ``third`` beside it (a run on three releases)."""
    other = chosen or next(release for release in tiers.TEST_DEEPSPEED if release != deepspeed)
    if chosen or third or other == releases.BEHAVIOR_REFERENCE:
        session.install("einops")
    if other == releases.BEHAVIOR_REFERENCE and not chosen:
        folders = [Path(session.virtualenv.location) / "reference-deepspeed"]
    else:
        folders = [_release_beside(session, other, f"deepspeed-{chosen}" if chosen else "other-deepspeed")]
    if third:
        folders.append(_release_beside(session, third, f"deepspeed-{third}"))
    session.env["AWP_HISTORY_OTHER_DEEPSPEED"] = os.pathsep.join(map(str, folders))


def _release_beside(session: nox.Session, release: str, name: str) -> Path:
    """DeepSpeed ``release``'s code installed into the venv's folder ``name`` (--target, no dependencies)."""
    folder = Path(session.virtualenv.location) / name
    session.install(*_find_links(), "--no-deps", "--no-build-isolation", "--target", str(folder),
                    f"deepspeed=={release}")
    return folder


def _own_ports(session: nox.Session, kind: str, index: int = 0) -> None:
    """A block of ports for this session's launches and servers (tests/ports.py), apart from any other
    session's, so that sessions running side by side never take each other's ports."""
    kinds = {"tests": len(tiers.TEST_DEEPSPEED), "quick": len(tiers.TEST_DEEPSPEED),
             "launchers": len(tiers.TEST_DEEPSPEED), "matrix_engine": len(tiers.ENGINE_TIER),
             "accelerate": len(tiers.ACCELERATE_TIER_DEEPSPEED) + 1,  # + ci_accelerate
             "era": len(eras.ERAS), "upstream_suite": 1, "newest": 1, "package": 1, "admin": 1,
             "differential": len(tiers.ENGINE_TIER),
             "histories": len(tiers.TEST_DEEPSPEED)}
    names = list(kinds)
    first = sum(kinds[name] for name in names[:names.index(kind)])
    assert 0 <= index < kinds[kind], (kind, index)
    session.env["AWP_PORT_BASE"] = str(20000 + ports.PORTS * (first + index))  # below the ephemeral ports


def _install_accelerate(session: nox.Session, accelerate: str) -> None:
    """accelerate and the transformers it pairs with into a venv that has the stack (torch pinned: never replaced)."""
    session.install(*_find_links(), f"torch=={tiers.TEST_TORCH}", *_accelerate_pins(accelerate))


def _accelerate_pins(accelerate: str) -> list[str]:
    old = releases.parse(accelerate) < (1, 1)  # transformers 5 requires accelerate>=1.1
    transformers = tiers.TEST_TRANSFORMERS_OLD_ACCELERATE if old else tiers.TEST_TRANSFORMERS
    return [f"accelerate=={accelerate}", f"transformers=={transformers}"]


@nox.session(python="3.11")
def unit(session: nox.Session) -> None:
    """The unit tier (tests/unit): the guard table, the environment's value rules, the launchers' quoting and the
    other pure logic, in one interpreter with neither torch nor DeepSpeed installed (seconds)."""
    session.install("pytest", "fsspec", "-e", ".")  # fsspec: its memory file system stands in for a bucket
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/unit", *session.posargs)


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.TEST_DEEPSPEED))
def tests(session: nox.Session, deepspeed: str) -> None:
    """The suite on real CPU engines with one DeepSpeed release, in two passes: every test that does not need
    transformers without it installed, then transformers and the tests marked `transformers` (tests/tiers.py,
    TRANSFORMERS_TESTS, says why). Files named after `--` run as named, in one pass, transformers installed."""
    _install_stack(session, deepspeed, transformers=bool(session.posargs))
    _own_ports(session, "tests", tiers.TEST_DEEPSPEED.index(deepspeed))
    # fsspec, s3fs and moto's server: tests/test_audit_store.py audits a bucket of a local S3 server
    session.install("pytest", "matplotlib", "fsspec", "s3fs", "moto[server]")
    _install_oracle(session, deepspeed)
    _other_release(session, deepspeed)
    pytest = ["pytest", "-q", "-p", "no:cacheprovider", "--durations=8"]
    if session.posargs:
        session.run(*pytest, *session.posargs, env={"PYTHONUNBUFFERED": "1"})
        return
    # the machinery's modules run on the buggy release alone (tiers.ONE_RELEASE_TESTS says why, per module);
    # the unit tier needs neither torch nor DeepSpeed: `unit` runs it once, not once more per release here
    once = () if deepspeed == tiers.TEST_DEEPSPEED[0] else tuple(tiers.ONE_RELEASE_TESTS)
    ignored = [f"--ignore={path}" for path in ("tests/unit", *once)]
    # a reused venv has transformers from its last second pass (with --no-install, `nox -R`, both passes keep it)
    session.run_install("uv", "pip", "uninstall", "--python", str(Path(session.bin, "python")), "transformers",
                        external=True)
    failed = []
    for marker, what in (("not transformers", "the first pass (no transformers)"),
                         ("transformers", "the second pass (transformers installed)")):
        if marker == "transformers":
            _install_accelerate(session, tiers.TEST_ACCELERATE)
        try:
            session.run(*pytest, *ignored, "-m", marker, env={"PYTHONUNBUFFERED": "1"})
        except nox.command.CommandFailed:
            failed.append(what)  # the other pass runs all the same: one run shows both
    if failed:
        session.error(f"tests on DeepSpeed {deepspeed} failed in {' and '.join(failed)}")


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.TEST_DEEPSPEED))
def histories(session: nox.Session, deepspeed: str) -> None:
    """A long search for run histories that break the audit's rule (tests/test_audit_histories.py; CI runs 2): 200
    histories of 8 steps on real CPU engines, from a seed of the clock unless AWP_HISTORY_SEED is given (about an
    hour and a half on a 2-core machine); AWP_HISTORY_RANKS=4 lets its jobs have 4 ranks (CI's draw 1 to 3); some
    of its runs save as the HF Trainer does (checkpoint-N/global_stepN) and some of its jobs run through the Trainer
    itself (CI's do neither; AWP_HISTORY_TRAINER=0 turns both off); AWP_HISTORY_OTHER_RELEASE=0.15.3 (say) changes
    release to that one instead of the suite's other, and AWP_HISTORY_THIRD_RELEASE=0.15.3 (say) adds it as a third
    (a run may then start on one release and resume on each of the others). A failing history is shrunk and kept in
    tests/histories_found.json."""
    _install_stack(session, deepspeed)
    _own_ports(session, "histories", tiers.TEST_DEEPSPEED.index(deepspeed))
    session.install("pytest")
    _install_oracle(session, deepspeed)
    _other_release(session, deepspeed, os.environ.get("AWP_HISTORY_OTHER_RELEASE"),
                   os.environ.get("AWP_HISTORY_THIRD_RELEASE"))
    seed = os.environ.get("AWP_HISTORY_SEED") or str(int(time.time()))
    session.log(f"AWP_HISTORY_SEED={seed}")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-x", "tests/test_audit_histories.py", *session.posargs,
                env={"PYTHONUNBUFFERED": "1", "AWP_HISTORIES": os.environ.get("AWP_HISTORIES", "200"),
                     "AWP_HISTORY_STEPS": os.environ.get("AWP_HISTORY_STEPS", "8"), "AWP_HISTORY_SEED": seed,
                     "AWP_HISTORY_TRAINER": os.environ.get("AWP_HISTORY_TRAINER", "1")})


@nox.session(python="3.11", requires=["lint", "unit"])
@nox.parametrize("deepspeed", list(tiers.TEST_DEEPSPEED))
def quick(session: nox.Session, deepspeed: str) -> None:
    """The contributor's check, in minutes: lint and the unit tier, then the core promises (tiers.QUICK_TESTS) on
    real CPU engines of one buggy and one fixed release. Left to .ci/run: the rest of the suite (start-up activation,
    launchers, roads, the CLI), the real MPI and Slurm launches, the version matrix and the built wheel."""
    _install_stack(session, deepspeed)
    _own_ports(session, "quick", tiers.TEST_DEEPSPEED.index(deepspeed))
    session.install("pytest")
    session.run("pytest", "-q", "-p", "no:cacheprovider", *tiers.QUICK_TESTS, *session.posargs,
                env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.TEST_DEEPSPEED))
def launchers(session: nox.Session, deepspeed: str) -> None:
    """Real multi-node launches on this machine (minutes; root, Debian's openmpi-bin, mpich, slurm-wlm,
    munge, openssh-server): `deepspeed --launcher openmpi|mpich|slurm`, plain `srun` under a Slurm of
    the test's own and `accelerate launch` across two machine ranks (tests/test_real_launchers.py)."""
    _install_stack(session, deepspeed)
    session.install("pytest", "mpi4py")  # DeepSpeed's ranks under mpirun and srun find their rank through it
    _own_ports(session, "launchers", tiers.TEST_DEEPSPEED.index(deepspeed))
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_real_launchers.py", *session.posargs,
                env={"PYTHONUNBUFFERED": "1", "AWP_REAL_LAUNCHES": "1"})


def _matrix_run(session: nox.Session, tier: str) -> None:
    session.install("pytest")
    results = ["--results", "matrix/results.json"] if "--write" in session.posargs else []
    session.run("python", "tests/matrix.py", tier, *results, env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.ENGINE_TIER))
def matrix_engine(session: nox.Session, deepspeed: str) -> None:
    """Engine tier: real engines, raw and through accelerate, on one DeepSpeed release, and the scheduler
    cases (tests/test_cases.py). On the oldest, also every road a scheduler is built by and each
    multi-node runner's real command line (the suite runs them on TEST_DEEPSPEED); on one release of each
    default-peak range whose start is right, the default peak whatever the import order."""
    _install_stack(session, deepspeed)
    _own_ports(session, "matrix_engine", tiers.ENGINE_TIER.index(deepspeed))
    _matrix_run(session, "engine")
    _install_oracle(session, deepspeed)
    # the scheduler cases of tests/cases.py on every release, against 0.19.8's golden values; the audit of
    # this release's own checkpoints against the step-0 lrs its runs recorded
    # and the differential tier against the reference's own code (seconds: docs/differential.md)
    selected = ["tests/test_cases.py", "tests/test_audit.py", "tests/test_differential.py"]
    if deepspeed == tiers.ENGINE_TIER[0]:
        selected += ["tests/test_roads.py", "tests/test_multinode.py", "-k",
                     "not two_node and not deepspeed_env and not ssh_alone"]
    elif deepspeed in tiers.DEFAULT_PEAK_RANGES:
        selected += ["tests/test_roads.py", "-k", "not test_roads or default_peak"]
    session.run("pytest", "-q", "-p", "no:cacheprovider", *selected, env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.ENGINE_TIER))
def differential(session: nox.Session, deepspeed: str) -> None:
    """The differential tier's long search on one release: tests/test_differential.py with
    AWP_DIFFERENTIAL_EXAMPLES configurations per test (default 5000 here; minutes; not in CI, which runs its budget in
    `tests` and `matrix_engine`: docs/differential.md)."""
    _install_stack(session, deepspeed)
    _own_ports(session, "differential", tiers.ENGINE_TIER.index(deepspeed))
    session.install("pytest")
    _install_oracle(session, deepspeed)
    examples = os.environ.get("AWP_DIFFERENTIAL_EXAMPLES", "5000")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging", "tests/test_differential.py",
                *session.posargs, env={"PYTHONUNBUFFERED": "1", "AWP_DIFFERENTIAL_EXAMPLES": examples})


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.ACCELERATE_TIER_DEEPSPEED))
def matrix_accelerate(session: nox.Session, deepspeed: str) -> None:
    """accelerate tier: every accelerate release (or those named: `-- 0.29.3 1.15.0`) in turn, in one
    venv with one DeepSpeed release, so that DeepSpeed's CPU comm op is compiled once, not per release."""
    _accelerate_tier(session, deepspeed, [arg for arg in session.posargs if arg[:1].isdigit()]
                     or list(tiers.ACCELERATE_TIER), tiers.ACCELERATE_TIER_DEEPSPEED.index(deepspeed))


@nox.session(python="3.11")
def ci_accelerate(session: nox.Session) -> None:
    """The accelerate tier's CI subset: the oldest and newest accelerate on the tier's buggy DeepSpeed."""
    _accelerate_tier(session, tiers.ACCELERATE_TIER_DEEPSPEED[0], list(tiers.CI_ACCELERATE),
                     len(tiers.ACCELERATE_TIER_DEEPSPEED))


def _accelerate_tier(session: nox.Session, deepspeed: str, wanted: list[str], ports_index: int) -> None:
    _own_ports(session, "accelerate", ports_index)
    _install_stack(session, deepspeed, wanted[0])
    failed = []
    for accelerate in wanted:
        _install_accelerate(session, accelerate)
        try:
            _matrix_run(session, "accelerate")
        except nox.command.CommandFailed:
            failed.append(accelerate)
    if failed:
        session.error(f"accelerate tier failed with DeepSpeed {deepspeed} on accelerate {', '.join(failed)}")


@nox.session(python="3.11")
@nox.parametrize("deepspeed", list(tiers.SCHEDULER_TIER))
def matrix_scheduler(session: nox.Session, deepspeed: str) -> None:
    """Scheduler tier: the release's own scheduler classes, no engine, with a torch of its time."""
    extras = tiers.SCHEDULER_TIER_EXTRAS.get(deepspeed, ())  # DeepSpeed's setup.py imports them: first
    session.install(f"torch=={tiers.SCHEDULER_TIER_TORCH}", "numpy<2", "setuptools<81", *extras)
    session.install("--no-build-isolation-package", "deepspeed", f"torch=={tiers.SCHEDULER_TIER_TORCH}",
                    "numpy<2", f"deepspeed=={deepspeed}", *extras)
    session.install("-e", ".")
    _require_deepspeed(session)
    _matrix_run(session, "scheduler")


def _install_era(session: nox.Session, era: eras.Era) -> None:
    """The era's stack, every package as of its DeepSpeed release's date (torch is a CUDA build from the
    registry: it runs on the CPU); pins listed in ``era.newer`` go in after, undated."""
    dated = ["--exclude-newer", era.exclude_newer]
    newer = {pin.split("==")[0] for pin, _ in era.newer}
    stack = [f"torch=={era.torch}", f"deepspeed=={era.deepspeed}", f"accelerate=={era.accelerate}",
             f"transformers=={era.transformers}", f"wrapt=={era.wrapt}"]
    session.install(*dated, f"torch=={era.torch}", "numpy", "setuptools", "wheel", *era.extras)
    session.install(*dated, "--no-build-isolation-package", "deepspeed", "packaging", "pytest",
                    *(pin for pin in stack if pin.split("==")[0] not in newer))
    for pin, _ in era.newer:
        session.install(pin)
    session.install("--no-deps", "-e", ".")  # its dependencies are the era's (above)
    _own_op_folder(session)
    _require_deepspeed(session)


def _interpreter(version: str) -> str:
    """pyenv's interpreter for ``version`` when pyenv has one: its shims only answer for the versions
    `pyenv global` names, and nox and uv stop at the first shim. Elsewhere nox looks it up by version."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"), "versions")
    found = sorted(root.glob(f"{version}.*/bin/python{version}"), key=lambda p: releases.parse(p.parts[-3]))
    return str(found[-1]) if found else version


@nox.session
@nox.parametrize("python,era", [(_interpreter(era.python), era.id) for era in eras.ERAS],
                 ids=[era.id for era in eras.ERAS])
def matrix_era(session: nox.Session, era: str) -> None:
    """Era tier: one DeepSpeed minor on its month's Python, torch, wrapt, accelerate and transformers
    (tests/eras.py): real engines where they run on CPU, accelerate and the HF Trainer where those do,
    and start-up activation (.pth + env var) on that Python."""
    _own_ports(session, "era", [e.id for e in eras.ERAS].index(era))
    _install_era(session, eras.BY_ID[era])
    _matrix_run(session, "era")


@nox.session(python=False, requires=[*(f"matrix_engine(deepspeed='{v}')" for v in tiers.ENGINE_TIER),
                                      *(f"matrix_accelerate(deepspeed='{d}')" for d in tiers.ACCELERATE_TIER_DEEPSPEED),
                                      *(f"matrix_scheduler(deepspeed='{v}')" for v in tiers.SCHEDULER_TIER),
                                      *(f"matrix_era({era.id})" for era in eras.ERAS)])
def matrix(session: nox.Session) -> None:
    """Every release of every tier (hours; `nox --parallel 2` runs two at a time); `-- --write` records each row in
    matrix/results.json (the sessions it requires; nothing of its own)."""


# The version matrix's subset CI runs on top of the suite (tests/tiers.py says why each row).
# Neighbouring releases mostly share the op's sources: apart in the queue, the later one finds the earlier
# one's compile in ccache instead of compiling beside it (_own_op_folder).
CI_MATRIX = ([f"matrix_engine(deepspeed='{v}')" for v in tiers.CI_ENGINE[0::2] + tiers.CI_ENGINE[1::2]]
             + ["ci_accelerate"]
             + [f"matrix_scheduler(deepspeed='{v}')" for v in tiers.CI_SCHEDULER]
             + [f"matrix_era({era})" for era in eras.CI_ERAS])
# Everything .ci/run runs (.ci/sessions.py), longest first, so that two at a time end together
# (each session's time on a new machine: CONTRIBUTING.md). The demo is the README's own command: it runs
# here so that a fresh machine proves it (it compiles no DeepSpeed op: docs/doctor.md, "demo").
CI_SESSIONS = [*(f"tests(deepspeed='{v}')" for v in tiers.TEST_DEEPSPEED),
               *(f"launchers(deepspeed='{v}')" for v in tiers.CI_LAUNCHERS), *CI_MATRIX, "package", "admin", "demo",
               "lint", "unit"]


@nox.session(python=False, requires=CI_MATRIX)
def ci_matrix(session: nox.Session) -> None:
    """The representative subset of the version matrix CI runs on top of `tests` (the sessions it requires)."""


@nox.session(python=False, requires=CI_SESSIONS)
def ci(session: nox.Session) -> None:
    """Every session CI needs: `nox --parallel 2 -s ci` (the sessions it requires; nothing of its own). .ci/run runs
    the same sessions through .ci/sessions.py, which prints their progress as it happens."""


@nox.session(python="3.11")
def new_release(session: nox.Session) -> None:
    """`nox -s new_release -- 0.20.0`: run the matrix scenarios on a release newer than the table
    and print the table rows to add."""
    if not session.posargs:
        session.error("name the release: nox -s new_release -- 0.20.0")
    _install_stack(session, session.posargs[0])
    session.install("pytest")
    session.run("python", "tests/matrix.py", "engine", "--suggest")


# What `nox -s newest` installs the newest of, in this order (each resolved with the ones before it)
NEWEST_OF = ("deepspeed", "accelerate", "transformers")


def _registry_versions(name: str) -> list[str]:
    """The releases of ``name`` the registry offers, newest first (pip's own client: `pip index versions`)."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                         check=False).stdout
    listed = next((line for line in out.splitlines() if line.startswith("Available versions:")), "")
    return [v.strip() for v in listed.partition(":")[2].split(",") if v.strip()]


def _installable(session: nox.Session, pins: list[str]) -> tuple[bool, str]:
    """Whether uv can resolve ``pins`` into the session's venv (a dry run), and uv's reason when it cannot."""
    proc = subprocess.run(["uv", "pip", "install", "--dry-run", "--python", str(Path(session.bin, "python")),
                           *_find_links(), "--no-build-isolation-package", "deepspeed", *pins],
                          capture_output=True, text=True, check=False)
    reason = [line.strip() for line in proc.stderr.splitlines() if "Because" in line or "cause:" in line]
    return proc.returncode == 0, (reason[0] if reason else proc.stderr.strip()[-300:])


@nox.session(python="3.11")
def newest(session: nox.Session) -> None:
    """`nox -s newest`: the newest DeepSpeed, accelerate and transformers the registry offers (for each it cannot
    install, the newest it can, and why), then the engine tier, the accelerate tier and the Trainer's and
    accelerate's roads on them, and DeepSpeed's lr_schedules.py and optimizer-step method against the table's
    newest release (tests/newest.py). Minutes; needs the registry; not in CI: a new release must not fail a
    submission. CONTRIBUTING.md says when to run it."""
    links = _find_links()
    session.install(*links, f"torch=={tiers.TEST_TORCH}", "numpy", "setuptools")
    pins = [f"torch=={tiers.TEST_TORCH}"]
    notes = []
    for name in NEWEST_OF:
        offered = _registry_versions(name)
        if not offered:
            session.error(f"the registry lists no release of {name} (pip index versions {name})")
        for version in offered[:10]:
            ok, reason = _installable(session, [*pins, f"{name}=={version}"])
            if ok:
                break
            notes.append(f"{name} {version} is on the registry but cannot be installed: {reason}")
        else:
            session.error(f"none of the newest 10 releases of {name} can be installed: {notes[-1]}")
        if version != offered[0]:
            notes.append(f"{name}: the newest installable release, {version}, is used instead of {offered[0]}")
        pins.append(f"{name}=={version}")
    session.install(*links, "--no-build-isolation-package", "deepspeed", *pins)
    session.install("-e", ".", "pytest")
    _own_op_folder(session)
    _own_ports(session, "newest")
    reference = Path(session.create_tmp(), "reference")
    session.run(sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"deepspeed=={releases.NEWEST_DEEPSPEED}",
                "-d", str(reference), external=True)
    failed = []
    for what, command in [
            ("engine tier", ["python", "tests/matrix.py", "engine"]),
            ("accelerate tier", ["python", "tests/matrix.py", "accelerate"]),
            ("the Trainer's and accelerate's roads", ["pytest", "-q", "-p", "no:cacheprovider", "tests/test_core.py",
                                                       "tests/test_training.py", "-k", "trainer or accelerate"])]:
        try:
            session.run(*command, env={"PYTHONUNBUFFERED": "1"})
        except nox.command.CommandFailed:
            failed.append(what)
    session.run("python", "tests/newest.py", str(next(reference.glob("deepspeed-*"))))
    session.log("newest: installed " + ", ".join(pins[1:]))
    for note in notes:
        session.log(f"newest: {note}")
    if failed:
        session.error(f"newest: failed on {', '.join(pins[1:])}: {', '.join(failed)}")
    session.log(f"newest: the engine tier, the accelerate tier and the roads pass on {', '.join(pins[1:])}")


@nox.session(python="3.11")
def upstream_suite(session: nox.Session) -> None:
    """`nox -s upstream_suite -- 0.15.2 --mirror DEEPSPEED_GIT_DIR --patched|--unpatched [--junit X.xml]
    [-k EXPR]`: DeepSpeed's own tests/unit/runtime/test_lr_schedulers.py, read from a git mirror at run
    time, against one release (docs/upstream-suite.md; minutes, needs the registry; not in CI)."""
    if not session.posargs or not session.posargs[0][:1].isdigit():
        session.error("name the release first: nox -s upstream_suite -- 0.15.2 --mirror PATH --patched")
    deepspeed, *rest = session.posargs
    _install_stack(session, deepspeed)
    session.install("pytest")
    session.run("python", "tests/upstream/run_upstream_suite.py", "--python", str(Path(session.bin, "python")),
                "--torch-extensions-dir", session.env["TORCH_EXTENSIONS_DIR"], *rest, env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff, mypy, the generated tables (README, docs/how-it-works.md, docs/matrix.md) current with the guard table,
    and the share of test lines inside string literals."""
    # mypy checks the lowest supported Python (pyproject: python_version): mypy 1.19 dropped 3.9, and
    # wrapt 2.x's own stubs declare nothing below 3.10, so wrapt is 1.x here (untyped: Any)
    session.install("ruff", "mypy<1.19", "wrapt<2", "pytest", "-e", ".")  # pytest: the unit tier's types
    session.run("ruff", "check", "accelerate_warmup_patch", "tests", "noxfile.py", "benchmarks", ".ci", "deploy")
    session.run("mypy")
    # the scripts the tests' child interpreters run, the unit tier and the checker below, on the tests' Python
    # (pytest and its dependencies no longer parse as 3.9)
    session.run("mypy", "--python-version", "3.11", "tests/children", "tests/unit", "tests/string_lines.py",
                "deploy/sitecustomize.py")
    session.run("python", "tests/tables.py", "--check")
    session.run("python", "tests/string_lines.py")  # child scripts are files, not strings (under 5 % of lines)


@nox.session(python="3.11")
def benchmarks(session: nox.Session) -> None:
    """Every benchmark, each measured side by side in one run (minutes; not in CI): start-up, the
    wrapped backward per call, the calls per steady step of real engines and, beside them, the steady-state
    steps' time (DeepSpeed DEMO_DEEPSPEED). Arguments go to calls.py: ``nox -s benchmarks -- --check``."""
    _install_stack(session, tiers.DEMO_DEEPSPEED)
    session.install(*_find_links(), "uv")
    session.run("python", "benchmarks/startup.py")
    session.run("python", "benchmarks/per_call.py")
    session.run("python", "benchmarks/probe.py")
    session.run("python", "benchmarks/own_writes.py")
    session.run("python", "benchmarks/record_ops.py", "--store-ranks", "8", "512")
    # calls.py runs steps.py's measurement after its count, in the same process, and prints both
    session.run("python", "benchmarks/calls.py", *session.posargs, env={"PYTHONUNBUFFERED": "1"})


@nox.session(python="3.11")
def demo(session: nox.Session) -> None:
    """Install torch (CPU), a DeepSpeed release and this package; run the demo (which compiles no DeepSpeed op,
    so a plain `accelerate-warmup-patch demo` in this venv afterwards takes as long as this run's demo)."""
    deepspeed = session.posargs[0] if session.posargs else tiers.DEMO_DEEPSPEED
    _install_stack(session, deepspeed)
    session.run("python", "-m", "accelerate_warmup_patch", "demo")


@nox.session(python="3.11")
def admin(session: nox.Session) -> None:
    """An admin's recipes built and run for real, as root (neither torch nor DeepSpeed; Debian's buildah, debootstrap,
    slurmctld, slurmd, slurm-client and munge: .ci/run installs them, and each test skips and says why without them):
    deploy/Dockerfile built by buildah on a Debian base debootstrap makes once per machine (tests/test_image.py), and
    deploy/audit-array.sbatch cancelled by scancel under a Slurm of the tests' own (tests/test_audit_array.py)."""
    _own_ports(session, "admin")
    session.install("pytest", "-e", ".")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "--durations=5", "tests/test_image.py",
                "tests/test_audit_array.py", *session.posargs,
                env={"PYTHONUNBUFFERED": "1", "AWP_ADMIN_RECIPES": "1"})  # the tests session skips them


@nox.session(python="3.11")
def package(session: nox.Session) -> None:
    """Build the sdist and the wheel, check their metadata and contents, install the wheel (not the
    checkout) into a fresh venv with DeepSpeed, and run the start-up activation tests against it."""
    _own_ports(session, "package")
    dist = Path(session.create_tmp(), "dist")
    for old in [*dist.glob("*.whl"), *dist.glob("*.tar.gz")]:
        old.unlink()
    session.install("uv", "twine")
    session.run("uv", "build", "--out-dir", str(dist), external=False)
    session.run("twine", "check", "--strict", *map(str, [*dist.glob("*.whl"), *dist.glob("*.tar.gz")]))
    session.run("python", "tests/check_dist.py", str(dist))
    wheel = next(dist.glob("*.whl"))
    _install_stack(session, tiers.DEMO_DEEPSPEED, this=f"--reinstall-package accelerate-warmup-patch {wheel}")
    session.install("pytest")
    session.run("python", "tests/check_dist.py", "--installed")
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/test_activation.py", env={"PYTHONUNBUFFERED": "1"})
