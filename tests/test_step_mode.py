"""Step mode steps each scheduler exactly once, before the first optimizer step, and never one the user
has already stepped.

The old workaround for the first-step bug is to step the engine's scheduler once after
``deepspeed.initialize``. With it, step mode equals the newest release unpatched with that step; without
it, step k uses lr(k). Both on every road: a raw engine (with and without gradient accumulation, where
``engine.step()`` runs at every micro-step), a PipelineEngine, accelerate (with and without gradient
accumulation) and the HF Trainer. Real engines, real interpreters; ``golden.json`` holds the newest
release's trajectories without the user's step, and one step of the scheduler shifts them by one
(checked on the newest release itself).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GOLDEN, Spec, installed, run_specs

DEEPSPEED = installed("deepspeed")
ON_GOLDEN_RELEASE = GOLDEN["deepspeed"] == DEEPSPEED

ROADS = [
    Spec(scheduler="WarmupLR-linear"),
    Spec(scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(scheduler="WarmupDecayLR", steps=9),
    Spec(scheduler="WarmupLR-linear", groups=[1e-3, 5e-4]),
    Spec(road="pipeline", scheduler="WarmupLR-linear"),
    Spec(path="accelerate", scheduler="WarmupLR-linear"),
    Spec(path="accelerate", scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(path="trainer", scheduler="WarmupLR-linear"),
]
STEPPED_ONCE = "stepped once before the first optimizer step"


def _steps(spec: Spec, lrs: list[list[float | None]]) -> list[list[float | None]]:
    """The lr of each optimizer step (the Trainer's last row holds its logged learning_rate values)."""
    return lrs[:-1] if spec.path == "trainer" else lrs


def lr_k_at_step_k(spec: Spec) -> list[list[float | None]]:
    """The newest release's trajectory shifted by one step: step k at lr(k), for the steps the run has."""
    newest = _steps(spec, GOLDEN["runs"][replace(spec, user_steps=0).newest_key])
    return newest[1:]


@pytest.fixture(scope="module")
def step_mode():
    plain = run_specs(*(replace(s, patch="before", mode="step") for s in ROADS))
    user = run_specs(*(replace(s, patch="before", mode="step", user_steps=1) for s in ROADS))
    return plain, user


@pytest.mark.parametrize("spec", ROADS, ids=lambda s: s.key)
def test_step_mode_uses_lr_k_at_step_k_on_every_road(step_mode, spec):
    plain, _ = step_mode
    assert _steps(spec, plain.lrs[spec.key])[:-1] == lr_k_at_step_k(spec)


def test_step_mode_steps_each_scheduler_once_and_says_so(step_mode):
    plain, _ = step_mode
    lines = [x for x in plain.patch_lines() if STEPPED_ONCE in x]
    assert len(lines) == len(ROADS), plain.stderr[-3000:]


@pytest.mark.parametrize("spec", ROADS, ids=lambda s: s.key)
def test_step_mode_never_steps_a_scheduler_the_user_has_stepped(step_mode, spec):
    _, user = step_mode
    stepped = replace(spec, user_steps=1)
    assert _steps(spec, user.lrs[stepped.key])[:-1] == lr_k_at_step_k(spec)


def test_step_mode_says_it_left_a_scheduler_the_user_has_stepped(step_mode):
    _, user = step_mode
    assert [x for x in user.patch_lines() if STEPPED_ONCE in x] == [], user.stderr[-3000:]
    left = [x for x in user.patch_lines() if "not stepped before the first optimizer step" in x]
    assert len(left) == len(ROADS) and all("last_batch_iteration 0" in x for x in left), user.stderr[-3000:]
    assert [x for x in user.patch_lines() if "WARNING" in x] == [], user.stderr[-3000:]


@pytest.mark.skipif(not ON_GOLDEN_RELEASE, reason=f"golden.json is from DeepSpeed {GOLDEN['deepspeed']}")
def test_the_users_own_step_shifts_the_newest_release_by_one_step_unpatched():
    """What the two tests above compare with: the newest release unpatched, with the user's own step."""
    ran = run_specs(*(replace(s, user_steps=1) for s in ROADS))
    for spec in ROADS:
        assert _steps(spec, ran.lrs[replace(spec, user_steps=1).key])[:-1] == lr_k_at_step_k(spec), spec.key
