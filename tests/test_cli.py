"""The command line as users and image builds run it: demo (with --plot) and doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, installed

from accelerate_warmup_patch import demo, releases, settings


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", *args], env=full,
                          capture_output=True, text=True, timeout=900)


def test_demo_prints_both_trajectories_a_verdict_and_a_plot(tmp_path):
    png = tmp_path / "lr.png"
    proc = _cli("demo", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fixed = releases.start_fact("WarmupLR", installed("deepspeed")).start is releases.Start.SETS_EVERY_GROUP
    expected = "is fixed upstream; the patch changes nothing" if fixed else "has the bug (step 0 ran at 0.001)"
    assert expected in proc.stdout, proc.stdout
    assert "   0           0.001               0" in proc.stdout or fixed


def test_the_plots_reference_is_the_newest_release_measured():
    measured = [row[0] for row in GOLDEN["runs"]["deepspeed:WarmupLR-linear:g0.001:ga1:z0"]]
    assert demo.newest_release_lrs(len(measured)) == measured


def test_doctor_json_names_versions_verdicts_and_activation():
    proc = _cli("doctor", "--json", env={"ACCELERATE_WARMUP_PATCH": "reset"})
    data = json.loads(proc.stdout)
    assert data["versions"]["deepspeed"] == installed("deepspeed")
    assert set(data["verdicts"]) == set(releases.scheduler_classes())
    assert data["activation"]["active_at_start_up"] is True
    assert "accelerate_warmup_patch.pth" in data["activation"]["through"][0]


def test_doctor_strict_passes_on_a_supported_armed_image():
    assert _cli("doctor", "--strict", env={"ACCELERATE_WARMUP_PATCH": "reset"}).returncode == 0


@pytest.mark.parametrize("env", [{}, {"ACCELERATE_WARMUP_PATCH": "off"}])
def test_doctor_strict_fails_when_the_patch_would_not_be_active(env):
    proc = _cli("doctor", "--strict", env=env)
    assert proc.returncode == 1
    assert "would not be active" in proc.stdout


@pytest.mark.parametrize("value", ["rset", "of"])  # "of" was meant as off: a new process would run patched
def test_doctor_strict_fails_on_a_value_it_does_not_accept(value):
    proc = _cli("doctor", "--strict", env={"ACCELERATE_WARMUP_PATCH": value})
    assert proc.returncode == 1, proc.stdout
    problems = [line for line in proc.stdout.splitlines() if line.strip().startswith("problem:")]
    assert len(problems) == 1, proc.stdout
    assert f"ACCELERATE_WARMUP_PATCH={value!r} is not one of: {settings.ACCEPTED}" in problems[0]
    assert "OK" not in proc.stdout.splitlines()
    assert "WARNING" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr  # doctor reports it


def test_doctor_json_lists_a_value_it_does_not_accept_as_a_problem():
    data = json.loads(_cli("doctor", "--json", env={"ACCELERATE_WARMUP_PATCH": "rset"}).stdout)
    assert any("ACCELERATE_WARMUP_PATCH='rset'" in problem for problem in data["problems"]), data["problems"]
    assert data["activation"]["mode"] == "reset"  # what a new process falls back to


@pytest.mark.parametrize("version, word", [("0.8.3", "unsupported"), ("9.0.0", "untested")])
def test_doctor_strict_fails_on_an_unsupported_or_untested_release(tmp_path, version, word):
    # A fake: no real DeepSpeed older than 0.9 or newer than the table installs beside torch 2.13;
    # a dist-info ahead on the path is what metadata (and so doctor) reads.
    info = tmp_path / f"deepspeed-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    proc = _cli("doctor", "--strict", env={"ACCELERATE_WARMUP_PATCH": "reset", "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert f"DeepSpeed {version} is {word}" in proc.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).parent / "accelerate-warmup-patch"
    proc = subprocess.run([str(script), "doctor", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0 and "WarmupCosineLR" in proc.stdout


def test_help_lists_only_the_public_commands_and_the_exit_codes():
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "{demo,doctor,status}" in proc.stdout and "exit codes:" in proc.stdout
    assert "_demo" not in proc.stdout and "SUPPRESS" not in proc.stdout and "table" not in proc.stdout
    assert "``" not in proc.stdout  # no reST markup


DOCTOR_SCHEMA = {
    "": {"schema", "package", "python", "versions", "verdicts", "activation", "multinode", "problems"},
    "activation": {"env", "mode", "pth", "sitecustomize", "active_at_start_up", "through", "by_import"},
    "multinode": {"carries", "why", "runners"},
}


def test_doctor_json_has_the_documented_schema():
    data = json.loads(_cli("doctor", "--json").stdout)
    assert data["schema"] == 1
    for key, wanted in DOCTOR_SCHEMA.items():
        assert set(data[key] if key else data) == wanted, key
    documented = (Path(__file__).parent.parent / "docs" / "doctor.md").read_text()
    for keys in DOCTOR_SCHEMA.values():
        assert all(f"| `{k}` |" in documented for k in keys)


def test_doctor_says_not_affected_for_classes_that_never_had_the_bug():
    data = json.loads(_cli("doctor", "--json").stdout)
    assert data["verdicts"]["OneCycle"] == data["verdicts"]["LRRangeTest"] == "not affected"
