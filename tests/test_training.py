"""Real training runs beyond the first step: resume from a checkpoint in a new process."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GOLDEN, Spec, installed, run_specs

from accelerate_warmup_patch import upstream

FULL = Spec(scheduler="WarmupLR-log")  # 6 steps, 1e-5 -> 1e-3
BUGGY = upstream.lacks("start", "WarmupLR", installed("deepspeed"))
SPLIT = 3


@pytest.mark.parametrize("load_optimizer_states", [True, False], ids=["with-optimizer-states", "without"])
@pytest.mark.parametrize("patched", [True, False], ids=["patched", "unpatched"])
def test_resume_in_a_new_process_continues_the_uninterrupted_trajectory(tmp_path, load_optimizer_states, patched):
    patch = "before" if patched else "none"
    first = run_specs(replace(FULL, steps=SPLIT, save_to=str(tmp_path), patch=patch))
    second = run_specs(replace(FULL, steps=FULL.steps - SPLIT, resume_from=str(tmp_path), patch=patch,
                               load_optimizer_states=load_optimizer_states))
    uninterrupted = GOLDEN["runs"][FULL.key]
    resumed = second.lrs[replace(FULL, steps=FULL.steps - SPLIT).key]
    if patched:
        assert first.lrs[FULL.key] == uninterrupted[:SPLIT]
    if patched and (load_optimizer_states or BUGGY):
        # where the release builds WarmupLR wrong, the fresh optimizer's lr is the bug's: aligned
        assert resumed == uninterrupted[SPLIT:]
    elif patched:  # a fixed release: as the newest release, the first resumed step at the fresh run's lr
        assert resumed[0] == uninterrupted[0] and resumed[1:] == uninterrupted[SPLIT + 1:]
    elif not load_optimizer_states:
        # every release, the newest included, runs the first resumed step at a stale lr
        assert resumed[0] != uninterrupted[SPLIT]
        assert resumed[1:] == uninterrupted[SPLIT + 1:]


def test_upstreams_module_only_load_leaves_the_schedule_to_start_afresh(tmp_path):
    """Upstream's load_module_only restores the module alone (engine.py @ v0.15.2, v0.19.8; ZeRO 1 here: 0.15.2 calls
    refresh_fp32_params, which a torch optimizer lacks): the load net sees no scheduler restored, so nothing is
    aligned and the run's step 0 is this process's own, observed in its record (a fork that restores the scheduler
    there: tests/test_builds.py)."""
    import json

    first = replace(FULL, steps=SPLIT, zero=1, save_to=str(tmp_path / "first"), patch="before")
    again = replace(first, save_to=str(tmp_path / "again"), resume_from=str(tmp_path / "first"),
                    load_module_only=True)
    ran = run_specs(first, again)
    assert [result["lrs"] for result in ran.data["results"]] == [GOLDEN["runs"][FULL.key][:SPLIT]] * 2
    step0 = json.loads((tmp_path / "again" / "ckpt" / "accelerate_warmup_patch.json").read_text())["step0"]
    assert step0["how"] == "observed" and step0["lrs"] == GOLDEN["runs"][FULL.key][0], step0


def test_resume_in_step_mode_stays_aligned(tmp_path):
    first = run_specs(replace(FULL, steps=SPLIT, save_to=str(tmp_path), patch="before", mode="step"))
    second = run_specs(replace(FULL, steps=FULL.steps - SPLIT, resume_from=str(tmp_path), patch="before",
                               mode="step", load_optimizer_states=False))
    shifted = GOLDEN["runs"][FULL.key][1:]  # step k uses lr(k)
    assert first.lrs[FULL.key] + second.lrs[replace(FULL, steps=FULL.steps - SPLIT).key][:-1] == shifted


TRAINER = Spec(path="trainer", scheduler="WarmupLR-linear")


def test_trainer_step_mode_uses_lr_k_at_step_k():
    ran = run_specs(replace(TRAINER, patch="before", mode="step"))
    steps = GOLDEN["runs"][TRAINER.key][:-1]  # the last row holds the logged learning_rate values
    assert ran.lrs[TRAINER.key][:-1][:-1] == steps[1:]


def test_trainer_resume_from_checkpoint_continues_the_newest_trajectory(tmp_path):
    full = run_specs(replace(TRAINER, patch="before", save_to=str(tmp_path)))
    resumed = run_specs(replace(TRAINER, patch="before", resume_from=str(tmp_path)))
    newest = GOLDEN["runs"][TRAINER.key][:-1]
    assert full.lrs[TRAINER.key][:-1] == newest
    assert resumed.lrs[TRAINER.key][:-1] == newest[3:]


def test_resume_with_optimizer_states_but_a_fresh_scheduler_keeps_the_restored_lr(tmp_path):
    # load_lr_scheduler_states=False: the optimizer's lr comes from the checkpoint, as on the newest
    # release; the patch must not overwrite it with the fresh scheduler's start
    run_specs(replace(FULL, steps=SPLIT, save_to=str(tmp_path)))
    spec = replace(FULL, steps=FULL.steps - SPLIT, resume_from=str(tmp_path), load_lr_scheduler_states=False)
    plain = run_specs(spec)
    patched = run_specs(replace(spec, patch="before"))
    key = replace(FULL, steps=FULL.steps - SPLIT).key
    assert patched.lrs[key] == plain.lrs[key]
    assert patched.lrs[key][0] == GOLDEN["runs"][FULL.key][SPLIT]  # the lr the checkpoint's optimizer held
