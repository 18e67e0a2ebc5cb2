"""Builds that are not releases (issue #46): a release's code labelled as the next one, a release with a fix
cherry-picked, a vendor's fork. Each is made from the installed release's own code (tests/builds.py); patched,
every optimizer step runs at 0.19.8's lr (the lr each step really used, from the optimizer), each group's lr
keeps the type the build keeps, and the patch says what the build does, not what its number says."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import builds
import harness
import pytest
from conftest import bare_audit, installed
from harness import GOLDEN, Spec

from accelerate_warmup_patch.record_writer import FILE_NAME as RECORD

DEEPSPEED = installed("deepspeed")
pytestmark = pytest.mark.skipif(DEEPSPEED != "0.15.2", reason="the builds are made from DeepSpeed 0.15.2's code")

TWO = [1e-3, 5e-4]
LINEAR = Spec("WarmupLR-linear", groups=TWO)
COSINE = Spec("WarmupCosineLR", groups=TWO)
PEAK = Spec("WarmupLR-default-max", groups=TWO)


def run_build(folder: Path, *specs: Spec) -> tuple[harness.Ran, list[list[list[float]]]]:
    """The specs, in this order, in one new interpreter that runs the build in ``folder``; with each run's lrs."""
    ran = harness.run_specs(*specs, env=builds.env(folder))
    return ran, [result["lrs"] for result in ran.data["results"]]


def newest(spec: Spec) -> list[list[float]]:
    return GOLDEN["runs"][replace(spec, patch="none", tensor_lr=False).key]  # type: ignore[no-any-return]


def patched(spec: Spec) -> Spec:
    return replace(spec, patch="before")


def run_command(build: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m accelerate_warmup_patch ARGS`` in an environment whose installed DeepSpeed is the build."""
    return subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", *args], capture_output=True,
                          text=True, timeout=600, cwd=folder, env={**os.environ, **builds.env(build)})


def command(build: Path, folder: Path, *args: str) -> str:
    proc = run_command(build, folder, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def doctor(build: Path, folder: Path) -> dict[str, Any]:
    return json.loads(command(build, folder, "doctor", "--json"))  # type: ignore[no-any-return]


def audit(tmp_path: Path, *folders: Path) -> list[dict[str, Any]]:
    proc = bare_audit(tmp_path / "bare")("-m", "accelerate_warmup_patch", "audit", "--json", *map(str, folders))
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def test_a_build_between_releases_before_their_fix_is_fixed_and_said_to_differ(tmp_path: Path) -> None:
    """0.15.2's code labelled 0.15.3+<hash>: pip install from git before PR #6597 merged. Its record and audit
    are truthful: the patched run not affected from the observed step 0 against 0.19.8's formula, the unpatched
    one unknown (its number says 0.15.3, which starts right; its code does not)."""
    build = builds.make(tmp_path / "build", "0.15.3+g7f8e2a1")
    saves = {name: tmp_path / name for name in ("unpatched", "patched")}
    ran, (unpatched, linear, cosine) = run_build(build, replace(LINEAR, save_to=str(saves["unpatched"])),
                                                 replace(patched(LINEAR), save_to=str(saves["patched"])),
                                                 patched(COSINE))
    assert unpatched[0] == TWO  # the bug the number says is fixed
    assert linear == newest(LINEAR)
    assert cosine == newest(COSINE)
    assert ran.data["status"]["verdicts"]["WarmupLR"] == "affected"
    assert ran.data["status"]["versions"]["deepspeed"] == "0.15.3+g7f8e2a1"
    said = " ".join(ran.patch_lines())
    assert "do not do what the guard table says" in said and "WarmupLR start (#6597): the build lacks it" in said
    record = json.loads((saves["patched"] / "ckpt" / RECORD).read_text())
    assert record["step0"]["expected"] == newest(LINEAR)[0] == record["step0"]["lrs"]
    assert record["step0"]["patch_did"] == "fixed"
    before, after = audit(tmp_path, saves["unpatched"], saves["patched"])
    assert before["verdict"] == "unknown" and "is a build, not the release 0.15.3" in before["why"], before
    assert after["verdict"] == "not affected" and after["step0_lrs"] == newest(LINEAR)[0], after
    found = doctor(build, tmp_path)
    assert found["versions"]["deepspeed"] == "0.15.3+g7f8e2a1" and found["state"] == "affected-not-active", found
    assert "WarmupLR start" in found["probed"]["lacks"] and found["verdicts"]["WarmupLR"] == "affected"
    assert any("is a build, not the release 0.15.3" in note for note in found["notes"]), found["notes"]
    assert "DeepSpeed 0.15.3+g7f8e2a1 is a build, not the release 0.15.3" in command(build, tmp_path, "status")


PROBING = "probing DeepSpeed {}'s scheduler classes"


def test_a_tree_numbered_plainly_as_a_fixed_release_is_probed_by_doctor_and_status(tmp_path: Path) -> None:
    """0.15.2's code numbered plainly 0.16.0 (a tree whose version file was bumped before the fix merged): a number
    with no local part hides the code as well. doctor and status ask the classes, so WarmupLR is affected and
    --strict fails (they called it "fixed upstream" from the number, and --strict passed). The answer is kept for
    that very lr_schedules.py: the next doctor and status answer from it, and say so, with no child."""
    build = builds.make(tmp_path / "build", "0.16.0")
    first = run_command(build, tmp_path, "doctor", "--json")
    found = json.loads(first.stdout)
    assert found["versions"]["deepspeed"] == "0.16.0" and found["state"] == "affected-not-active", found
    assert found["verdicts"]["WarmupLR"] == "affected" and found["strict_fails"], found
    assert "WarmupLR start" in found["probed"]["lacks"], found["probed"]
    assert any("WarmupLR start (#6597): the build lacks it" in note for note in found["notes"]), found["notes"]
    answered = found["probed"]["answered"]
    assert answered["how"] == "probed" and answered["cache"] and PROBING.format("0.16.0") in first.stderr, answered
    assert answered["file"] == str(build.joinpath(*builds.SCHEDULES).resolve()), answered
    strict = run_command(build, tmp_path, "doctor", "--strict")
    assert strict.returncode == 1 and "--strict: exit 1 (state affected-not-active)" in strict.stdout, strict.stdout
    assert "WarmupLR        affected" in strict.stdout and PROBING.format("0.16.0") not in strict.stderr
    assert f"answered from the cache: probed at {answered['probed_at']} for this very file (lr_schedules.py sha256 " \
           f"{answered['sha256'][:12]}" in strict.stdout, strict.stdout
    status = run_command(build, tmp_path, "status", "--json")
    said = json.loads(status.stdout)
    assert said["verdicts"]["WarmupLR"] == "affected" and said["probed"]["answered"]["how"] == "kept", said
    assert PROBING.format("0.16.0") not in status.stderr


def test_an_edited_lr_schedules_is_probed_again(tmp_path: Path) -> None:
    """A kept answer is for those bytes alone: the same tree with WarmupLR's start fix written into its
    lr_schedules.py (same number, same path) is probed again, and its new answer kept for its new bytes."""
    build = builds.make(tmp_path / "build", "0.16.0")
    before = doctor(build, tmp_path)["probed"]
    assert "WarmupLR start" in before["lacks"] and before["answered"]["how"] == "probed", before
    schedules = build.joinpath(*builds.SCHEDULES)
    schedules.write_text(builds.warmup_start_fix(schedules.read_text()))
    after = doctor(build, tmp_path)
    assert "WarmupLR start" not in after["probed"]["lacks"] and after["verdicts"]["WarmupLR"] != "affected", after
    assert after["probed"]["answered"]["how"] == "probed", after["probed"]
    assert after["probed"]["answered"]["sha256"] != before["answered"]["sha256"]
    again = doctor(build, tmp_path)["probed"]
    assert again["answered"]["how"] == "kept" and again["answered"]["sha256"] == after["probed"]["answered"]["sha256"]
    assert again["lacks"] == after["probed"]["lacks"]


def test_a_cherry_picked_fix_is_not_applied_twice_and_the_rest_is_backported(tmp_path: Path) -> None:
    """0.15.2 with WarmupLR's start fix of 0.15.3 applied, labelled 0.15.2+local."""
    build = builds.make(tmp_path / "build", "0.15.2+local", builds.warmup_start_fix)
    ran, (unpatched, linear, peak) = run_build(build, LINEAR, patched(LINEAR), patched(PEAK))
    assert unpatched == newest(LINEAR)  # the build's own fix
    assert linear == newest(LINEAR)
    assert peak == newest(PEAK)  # the default peak it still lacks
    status = ran.data["status"]
    assert status["verdicts"]["WarmupLR"].startswith("fixed upstream; the patch backports default peak")
    assert "deepspeed.runtime.lr_schedules.WarmupLR.get_lr" not in status["patched"]
    assert "deepspeed.runtime.lr_schedules.WarmupLR.__init__" in status["patched"]
    assert "WarmupLR start (#6597): the build has it" in " ".join(ran.patch_lines())
    found = doctor(build, tmp_path)
    assert "AFFECTED (WarmupCosineLR)" in found["verdict"], found  # the cherry-pick fixed WarmupLR alone
    assert found["verdicts"]["WarmupLR"] == status["verdicts"]["WarmupLR"]


def test_a_vendor_build_whose_step_keeps_tensor_lrs_keeps_them_patched(tmp_path: Path) -> None:
    """0.15.2's code with WarmupLR.step writing a tensor lr where the group holds one, labelled as Intel Gaudi's
    fork of 0.14.4: patched, every step at 0.19.8's lr and every group's lr still a float32 tensor."""
    build = builds.make(tmp_path / "build", "0.14.4+hpu.synapse.v1.19.0", builds.tensor_step)
    tensors = replace(LINEAR, tensor_lr=True)
    ran, _ = run_build(build, tensors, patched(tensors))
    unpatched, fixed = ran.data["results"]
    assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(unpatched["lrs"][0], TWO))  # the bug, in tensors
    for types in (unpatched["lr_types"], fixed["lr_types"]):
        assert types == [["tensor torch.float32"] * 2] * len(newest(LINEAR)), types
    for row, expected in zip(fixed["lrs"], newest(LINEAR), strict=True):
        assert all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(row, expected)), (row, expected)



SPLIT = 3  # optimizer steps before the save; the resumed run makes the rest


def test_a_fork_whose_module_only_load_restores_the_scheduler_is_aligned_as_it_restored(tmp_path: Path) -> None:
    """EleutherAI's DeeperSpeed restores the scheduler under load_module_only, and neither the optimizer nor
    global_steps (builds.module_only_restores_the_scheduler). Patched, the load net sees what the load restored:
    the optimizer's lr is aligned with the restored scheduler, as after upstream's load of the scheduler without
    the optimizer, so every step after the load runs at 0.19.8's lr for its position; and the record carries the
    run's step 0 from the save (it ran in the first process), never this process's first step."""
    build = builds.make(tmp_path / "build", "0.16.5+4a3b2c1", engine=[builds.module_only_restores_the_scheduler])
    saves = {name: tmp_path / name for name in ("plain", "fixed", "plain-resumed", "fixed-resumed")}
    first = replace(COSINE, zero=1, steps=SPLIT)
    run_build(build, replace(first, save_to=str(saves["plain"])), replace(patched(first), save_to=str(saves["fixed"])))
    resumed = replace(patched(first), steps=COSINE.steps - SPLIT, load_module_only=True)
    _, (unpatched, *fixed) = run_build(
        build, replace(resumed, patch="none", resume_from=str(saves["plain"])),
        *(replace(resumed, resume_from=str(saves[name]), save_to=str(saves[f"{name}-resumed"]))
          for name in ("plain", "fixed")))
    assert unpatched[0] == TWO and unpatched[1:] == newest(COSINE)[SPLIT + 1:]  # the fork: scheduler restored
    assert fixed == [newest(COSINE)[SPLIT:]] * 2
    for name, step0 in (("plain", "unrecorded"), ("fixed", "observed")):
        record = json.loads((saves[f"{name}-resumed"] / "ckpt" / RECORD).read_text())
        assert record["step0"]["how"] == step0, record["step0"]
    plain, fixed_run = audit(tmp_path, saves["plain-resumed"], saves["fixed-resumed"])
    # its step 0 ran unpatched, at the optimizer's lr, on a build that is no release nor a vendor build it knows
    assert plain["verdict"] == "unknown" and "is a build, not the release 0.16.5" in plain["why"], plain
    assert fixed_run["verdict"] == "not affected" and fixed_run["step0_lrs"] == newest(COSINE)[0], fixed_run
