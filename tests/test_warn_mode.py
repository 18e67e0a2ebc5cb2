"""Warn mode: every road runs exactly as unpatched, and each scheduler that reset mode would change is named once.

Real engines, real interpreters: the same specs run unpatched and in warn mode, and their lrs must be equal on every
release; on a release that builds the warmup schedulers wrong each such scheduler gets one WARNING with both lrs,
on one that builds them right the package says nothing at all.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import Ran, Spec, installed, run_specs

from accelerate_warmup_patch import releases, upstream

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
    # every WARNING of the package's is one scheduler's one line (no second line about the same scheduler)
    lines = [line for line in warned.patch_lines() if "WARNING" in line]
    # Reset mode changes step 0 of every scheduler whose class this release starts wrong (each spec's start differs
    # from its optimizer's lr), and at most the others it builds wrong (a default peak, where one applies):
    # exactly one line each on 0.15.2, none on 0.19.8.
    classes = [_CLASS.get(s.scheduler, s.scheduler) for s in specs]
    always = sum(upstream.lacks("start", c, DEEPSPEED) for c in classes)
    assert always <= len(lines) <= sum(upstream.built_wrong(c, DEEPSPEED) for c in classes), lines
    if lines:  # each line says what reset would change: both lrs of step 0, the default peak, or past the warmup
        assert all(WARNING in line and (("optimizer step 0 will run at lr" in line and f"DeepSpeed "
                   f"{releases.BEHAVIOR_REFERENCE} runs it at" in line) or "peak lr" in line or
                   "from iteration" in line) for line in lines), lines
    else:
        assert warned.patch_lines() == [], warned.patch_lines()
    # the dry run calls nothing of DeepSpeed's that logs: its own lines, as many as unpatched
    assert _deepspeed_lines(warned) == _deepspeed_lines(unpatched)
    status = warned.data["status"]
    assert status["mode"] == "warn" and status["fixes_applied"] == 0
    assert status["would_fix"] == len(lines)


# DeepSpeed's own warning when its scheduler's get_lr() or get_lr_ratio() is called before the first step
BEFORE_START = "Attempting to get learning rate from scheduler before it has started"


def _deepspeed_lines(ran: Ran) -> int:
    return (ran.stdout + ran.stderr).count(BEFORE_START)


# built by user code before the patch is applied (road "client", patch "late": apply("warn") after it was built,
# before deepspeed.initialize), one per process: with a peak given, without one (two groups), and OneCycle
BUILT_BEFORE = {
    "WarmupLR, warmup_max_lr given": Spec(road="client", patch="late", mode="warn"),
    "WarmupLR, no warmup_max_lr": Spec(road="client", patch="late", mode="warn", scheduler="WarmupLR-default-max",
                                       groups=[2e-3, 5e-4]),
    "OneCycle": Spec(road="client", patch="late", mode="warn", scheduler="OneCycle"),
}


@pytest.fixture(scope="module")
def built_before() -> tuple[Ran, dict[str, Ran]]:
    """The specs of BUILT_BEFORE unpatched (one process), and each in warn mode (one process each)."""
    unpatched = run_specs(*(replace(spec, patch="none") for spec in BUILT_BEFORE.values()))
    return unpatched, {name: run_specs(spec) for name, spec in BUILT_BEFORE.items()}


@pytest.mark.parametrize("name", list(BUILT_BEFORE))
def test_warn_mode_names_a_scheduler_built_before_the_import_in_one_warning(built_before, name):
    unpatched, warned = built_before[0], built_before[1][name]
    spec = BUILT_BEFORE[name]
    assert warned.lrs[spec.key] == unpatched.lrs[spec.key]
    lines = [line for line in warned.patch_lines() if "WARNING" in line]
    affected = upstream.lacks("start", _CLASS.get(spec.scheduler, spec.scheduler), DEEPSPEED)
    # one line, which says what reset would change (and, without a peak, that the peak is left), or none at all
    assert len(lines) == (1 if affected else 0), lines
    assert all(WARNING in line and "optimizer step 0 will run at lr" in line for line in lines), lines
    assert "whether it was given a warmup_max_lr is unknown" not in warned.stderr or spec.scheduler.endswith("max")
    assert warned.data["status"]["would_fix"] == len(lines)


def test_warn_mode_adds_no_line_of_deepspeeds_to_schedulers_built_before_the_import(built_before):
    unpatched, warned = built_before
    # the unpatched process ran the three specs: its count of DeepSpeed's own lines is the sum of theirs
    assert sum(_deepspeed_lines(ran) for ran in warned.values()) == _deepspeed_lines(unpatched)


def test_warn_mode_leaves_a_resumed_optimizer_lr_as_unpatched(tmp_path):
    saved = str(tmp_path / "ckpt")
    run_specs(Spec(steps=2, save_to=saved))
    resumed = Spec(steps=2, resume_from=saved, load_optimizer_states=False)
    unpatched = run_specs(replace(resumed, patch="none"))
    warned = run_specs(resumed, env=WARN)
    assert warned.lrs[resumed.key] == unpatched.lrs[resumed.key]
    assert warned.data["status"]["fixes_applied"] == 0
