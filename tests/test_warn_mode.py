"""Warn mode: every road runs exactly as unpatched, and each scheduler that reset mode would change is named once.

Real engines, real interpreters: the same specs run unpatched and in warn mode, and their lrs must be equal on every
release; on a release that builds the warmup schedulers wrong each such scheduler gets one WARNING with both lrs,
on one that builds them right the package says nothing at all.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import Spec, installed, run_specs

from accelerate_warmup_patch import releases

DEEPSPEED = installed("deepspeed")
WARNING = "ACCELERATE_WARMUP_PATCH=reset fixes it"
WARN = {"ACCELERATE_WARMUP_PATCH": "warn"}

# each process's specs, in warn mode; the import arms first (patch="before"), or after the framework built them
PROCESSES = {
    "user code and raw DeepSpeed": [
        Spec(path="schedule", scheduler="WarmupLR-linear"),
        Spec(path="schedule", scheduler="WarmupCosineLR", groups=[1e-3, 5e-4]),
        Spec(path="schedule", scheduler="WarmupLR-default-max", groups=[2e-3, 5e-4]),
        Spec(),
        Spec(road="client", groups=[1e-3, 5e-4]),
        Spec(road="pipeline"),
    ],
    "early-bound initialize": [Spec(road="early-bound", patch="after")],
    "accelerate": [Spec(path="accelerate", scheduler="WarmupDecayLR", steps=4)],
    "accelerate, imported after prepare": [Spec(path="accelerate", patch="after", groups=[1e-3, 5e-4])],
    "the Trainer": [Spec(path="trainer", steps=3)],
}


def _unpatched(spec: Spec) -> Spec:
    """The same run without the patch (an early-bound initialize is the one initialize there)."""
    return replace(spec, patch="none", road="config" if spec.road == "early-bound" else spec.road)


_CLASS = {"WarmupLR-linear": "WarmupLR", "WarmupLR-default-max": "WarmupLR"}  # the harness's schedules' classes


@pytest.mark.parametrize("name", list(PROCESSES))
def test_warn_mode_runs_every_road_as_unpatched_and_names_each_affected_scheduler_once(name):
    specs = PROCESSES[name]
    unpatched = run_specs(*(_unpatched(s) for s in specs))
    warned = run_specs(*specs, env=WARN)
    for spec in specs:
        assert warned.lrs[spec.key] == unpatched.lrs[_unpatched(spec).key], spec.key
    lines = [line for line in warned.stderr.splitlines() if WARNING in line]
    # Reset mode changes step 0 of every scheduler whose class this release starts wrong (each spec's start differs
    # from its optimizer's lr), and at most the others it builds wrong (a default peak, where one applies):
    # exactly one line each on 0.15.2, none on 0.19.8.
    classes = [_CLASS.get(s.scheduler, s.scheduler) for s in specs]
    always = sum(releases.lacks("start", c, DEEPSPEED) for c in classes)
    assert always <= len(lines) <= sum(releases.built_wrong(c, DEEPSPEED) for c in classes), lines
    if lines:  # each line says what reset would change: both lrs of step 0, or the default peak
        assert all(("optimizer step 0 will run at lr" in line and f"DeepSpeed {releases.BEHAVIOR_REFERENCE} runs it at"
                    in line) or "peak lr" in line for line in lines), lines
    else:
        assert warned.patch_lines() == [], warned.patch_lines()
    status = warned.data["status"]
    assert status["mode"] == "warn" and status["fixes_applied"] == 0
    assert status["would_fix"] == len(lines)


def test_warn_mode_leaves_a_resumed_optimizer_lr_as_unpatched(tmp_path):
    saved = str(tmp_path / "ckpt")
    run_specs(Spec(steps=2, save_to=saved))
    resumed = Spec(steps=2, resume_from=saved, load_optimizer_states=False)
    unpatched = run_specs(replace(resumed, patch="none"))
    warned = run_specs(resumed, env=WARN)
    assert warned.lrs[resumed.key] == unpatched.lrs[resumed.key]
    assert warned.data["status"]["fixes_applied"] == 0
