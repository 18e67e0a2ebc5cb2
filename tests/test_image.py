"""The image recipe (deploy/Dockerfile) built for real, as an admin builds it, by ``buildah bud --isolation chroot``.

No image registry is reachable, so the training image is made here: a Debian base that debootstrap makes (from the
mirror this machine's apt uses) once per machine and buildah keeps in its storage (about 75 s; later runs reuse it),
then a venv first on its PATH holding DeepSpeed 0.15.2's metadata (doctor reads the metadata, and its probe of the
scheduler classes finds no deepspeed to import, says so, and leaves the verdicts to the table's for the number: a real
DeepSpeed would add gigabytes and minutes to nothing the recipe does). The recipe's wheel folder is made by the docs'
own line; the build runs with no network at all (``unshare -n``), so an install that needed an index would fail.

``nox -s admin`` runs this module (root, Debian's buildah and debootstrap: .ci/run installs them); without them each
test skips and says why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import admin_steps
import pytest
import quickstart

ROOT = admin_steps.ROOT
RECIPE = ROOT / "deploy" / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
# the base, by what it holds: a change of what debootstrap includes makes a new one
BASE = "localhost/accelerate-warmup-patch-test-base:minbase-python3-venv-pip"
TRAINING = "localhost/accelerate-warmup-patch-test-training:deepspeed-0.15.2"
IMAGE = "localhost/accelerate-warmup-patch-test-image"
LIMIT_S = 900
VENV = "/opt/venv"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "root: buildah's chroot isolation and debootstrap run as root here"
    absent = [name for name in ("buildah", "debootstrap", "unshare") if shutil.which(name) is None]
    if absent:
        return f"Debian's buildah and debootstrap (.ci/run installs them as root); missing: {', '.join(absent)}"
    return None


pytestmark = [pytest.mark.skipif(not os.environ.get("AWP_ADMIN_RECIPES"),
                                 reason="the admin's recipes, built for real, are `nox -s admin`'s"),
              pytest.mark.skipif(_missing() is not None, reason=str(_missing()))]


def _buildah(*args: str, check: bool = True, offline: bool = False) -> subprocess.CompletedProcess[str]:
    command = ["unshare", "-n", "buildah", *args] if offline else ["buildah", *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT_S)
    if check:
        assert proc.returncode == 0, (command, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def _apt_mirror_and_suite() -> tuple[str, str]:
    """The Debian mirror this machine's apt reads, and this release's suite (os-release's codename)."""
    suite = re.search(r"^VERSION_CODENAME=(\S+)", Path("/etc/os-release").read_text(), re.M)
    assert suite is not None, "/etc/os-release names no VERSION_CODENAME"
    sources = [*Path("/etc/apt").glob("sources.list.d/*.sources"), Path("/etc/apt/sources.list"),
               *Path("/etc/apt").glob("sources.list.d/*.list")]
    for source in sources:
        text = source.read_text() if source.is_file() else ""
        for uris, suites in re.findall(r"^URIs:\s*(\S+).*?^Suites:\s*([^\n]+)", text, re.M | re.S):
            if suite.group(1) in suites.split():
                return uris, suite.group(1)
        for uri in re.findall(rf"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+{suite.group(1)}\s", text, re.M):
            return uri, suite.group(1)
    raise AssertionError(f"no apt source of {suite.group(1)} in {', '.join(map(str, sources))}")


def _base(work: Path) -> None:
    """The Debian base with Python and venv, made by debootstrap and committed, unless buildah already has it."""
    if _buildah("images", "--quiet", BASE, check=False).stdout.strip():
        return
    mirror, suite = _apt_mirror_and_suite()
    root = work / "rootfs"
    admin_steps.run(["debootstrap", "--variant=minbase", "--include=python3-venv,python3-pip", suite, str(root),
                     mirror])
    container = _buildah("from", "scratch").stdout.strip()
    try:
        mounted = Path(_buildah("mount", container).stdout.strip())
        admin_steps.run(["cp", "-a", f"{root}/.", str(mounted)])
        _buildah("umount", container)
        _buildah("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", container)
        _buildah("commit", "--quiet", container, BASE)
    finally:
        _buildah("rm", container, check=False)


TAGS = ("warn", "unarmed", "reset", "system")  # the images the tests build from the recipe


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A training image as the recipe expects one: DeepSpeed (its metadata) in a venv that is first on PATH; it and
    the images built from it are removed afterwards (the base stays, for the next run on this machine)."""
    work = tmp_path_factory.mktemp("training")
    _base(work)
    site = f"{VENV}/lib/python3.11/site-packages/deepspeed-0.15.2.dist-info"
    (work / "Containerfile").write_text(f"""FROM {BASE}
RUN python3 -m venv {VENV} && mkdir -p {site} \\
    && printf 'Metadata-Version: 2.1\\nName: deepspeed\\nVersion: 0.15.2\\n' > {site}/METADATA
ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
""")
    _buildah("bud", "--quiet", "--isolation", "chroot", "-t", TRAINING, str(work))
    yield TRAINING
    for tag in TAGS:
        _buildah("rmi", f"{IMAGE}:{tag}", check=False)
    _buildah("rmi", TRAINING, check=False)


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build's folder: ``wheels/`` made by the docs' own line (the package's wheel and wrapt's) in a clone, from
    the README's wheel."""
    work = tmp_path_factory.mktemp("context")
    copy = admin_steps.clone(work)
    built = admin_steps.wheel(copy, work / "builder")
    python = admin_steps.fresh_venv(work / "downloader")
    admin_steps.docs_line(quickstart.line("python3 -m pip download", DEPLOY_DOC), python, copy)
    names = sorted(path.name for path in (copy / "wheels").iterdir())
    assert built.name in names and any(name.startswith("wrapt-") for name in names), names
    return copy


def _build(context: Path, base: str, recipe: str, tag: str) -> subprocess.CompletedProcess[str]:
    """``buildah bud`` of ``recipe`` (the Dockerfile's text) as the recipe's comment writes it, with no network."""
    (context / "Dockerfile.under-test").write_text(recipe)
    return _buildah("bud", "--isolation", "chroot", "--build-arg", f"BASE={base}", "-f",
                    str(context / "Dockerfile.under-test"), "-t", tag, str(context), check=False, offline=True)


def _in_image(image: str, *command: str) -> subprocess.CompletedProcess[str]:
    container = _buildah("from", "--quiet", image).stdout.strip()
    try:
        return _buildah("run", "--isolation", "chroot", container, "--", *command)
    finally:
        _buildah("rm", container, check=False)


def test_the_recipe_builds_offline_on_a_training_image_and_its_jobs_run_in_warn_mode(training: str,
                                                                                    context: Path) -> None:
    build = _build(context, training, RECIPE.read_text(), f"{IMAGE}:warn")
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    # the check ran in the build, after the ENV line, and answered for the venv's python3 that jobs start
    assert "DeepSpeed 0.15.2: AFFECTED" in build.stdout and "patch in warn mode" in build.stdout, build.stdout
    assert f"Python: {VENV}/bin/python3 (Python 3." in build.stdout, build.stdout
    assert "--strict: passes (state affected-warn)" in build.stdout, build.stdout
    status = json.loads(_in_image(f"{IMAGE}:warn", "accelerate-warmup-patch",
                                  "status", "--json").stdout)
    assert status["armed"] and status["mode"] == "warn", status
    assert status["interpreter"]["is_path_python"] and status["interpreter"]["executable"] == f"{VENV}/bin/python3"
    left = _in_image(f"{IMAGE}:warn", "ls", "/tmp").stdout.split()
    assert "awp-wheels" not in left, left


def test_the_check_fails_the_build_without_the_env_line_and_passes_with_reset(training: str, context: Path) -> None:
    recipe = RECIPE.read_text()
    assert recipe.count("ENV ACCELERATE_WARMUP_PATCH=warn\n") == 1, "the recipe arms warn once"
    unarmed = _build(context, training, recipe.replace("ENV ACCELERATE_WARMUP_PATCH=warn\n", ""),
                     f"{IMAGE}:unarmed")
    assert unarmed.returncode != 0 and "patch NOT active" in unarmed.stdout, unarmed.stdout[-3000:]
    assert "--strict: exit 1 (state affected-not-active)" in unarmed.stdout, unarmed.stdout[-3000:]
    reset = _build(context, training, recipe.replace("=warn\n", "=reset\n"),
                   f"{IMAGE}:reset")
    assert reset.returncode == 0 and "patch active in new processes (reset mode" in reset.stdout, reset.stdout


def test_on_a_distributions_own_python_the_recipe_stops_at_pip_and_forces_nothing(training: str,
                                                                                  context: Path) -> None:
    # the base's python3 is Debian's own (PEP 668): pip refuses, and the recipe does not override it
    build = _build(context, BASE, RECIPE.read_text(), f"{IMAGE}:system")
    assert build.returncode != 0 and "externally-managed-environment" in build.stdout + build.stderr, build
