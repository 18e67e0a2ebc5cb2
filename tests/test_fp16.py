"""fp16 with dynamic loss scaling: the first optimizer steps overflow, and every step that updates uses the
lr the newest release uses.

On the V100-era clusters that pin old releases, fp16 with dynamic loss scaling is the common setting, and the
first steps usually overflow: DeepSpeed's fp16 optimizer finds inf in the scaled gradients, lowers the loss
scale and skips the optimizer step, and ``_take_model_step`` then does not step the scheduler (0.15.2 and
0.19.8 alike). A skipped step uses no lr, so the promise is about the steps that update: the k-th of them
uses the newest release's lr for its k-th step (reset mode), or lr(k) (step mode, which steps the scheduler
once at the engine's first optimizer step even when that step is then skipped, as the old workaround's
step after ``initialize`` does: the run equals the newest release with that step).

Real engines and DeepSpeed's own fp16 optimizers and loss scalers (``FP16_UnfusedOptimizer`` over torch's
Adam and ``FP16_Optimizer`` over DeepSpeed's FusedAdam at ZeRO 0, the ZeRO optimizers' own scalers at ZeRO 2 and 3),
with real overflows (a spike in the batch) at optimizer steps 0 and 1. The one seam: DeepSpeed's CPU
accelerator refuses fp16, so ``tests/fp16_run.py`` installs a subclass of it that reports fp16 support.
The harness checks each run is the case it names: exactly the first ``overflow_steps`` steps skipped, the
loss scale lowered, the others updating. ``golden.json`` holds the newest release's fp32 trajectories; that
the newest release's updating fp16 steps follow them is checked on the newest release itself.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GOLDEN, Spec, installed, run_specs

from accelerate_warmup_patch import releases

DEEPSPEED = installed("deepspeed")
ON_GOLDEN_RELEASE = GOLDEN["deepspeed"] == DEEPSPEED
BUGGY = releases.start_fact("WarmupLR", DEEPSPEED).value is releases.Start.LEAVES_OPTIMIZER_LR

CASES = [
    Spec(fp16=True, overflow_steps=2),  # ZeRO 0: FP16_UnfusedOptimizer
    Spec(fp16=True, overflow_steps=2, fused_adam=True),  # ZeRO 0: FP16_Optimizer (DeepSpeed's FusedAdam)
    Spec(fp16=True, overflow_steps=2, scheduler="WarmupCosineLR", steps=9),
    Spec(fp16=True, overflow_steps=2, zero=2),  # the ZeRO optimizer's own loss scaler
    Spec(fp16=True, overflow_steps=2, zero=2, scheduler="WarmupDecayLR", groups=[1e-3, 5e-4], grad_accum=3,
         steps=4),
    Spec(fp16=True, overflow_steps=1, zero=2),
    Spec(fp16=True, overflow_steps=2, zero=3, scheduler="WarmupCosineLR", groups=[1e-3, 5e-4]),  # ZeRO 3's scaler
]
STEPPED_ONCE = "stepped once before the first optimizer step"


def newest(spec: Spec) -> list[list[float | None]]:
    """The newest release's lrs for this schedule, one row per optimizer step (fp32: nothing skipped)."""
    return GOLDEN["runs"][replace(spec, fp16=False, overflow_steps=0, fused_adam=False, user_steps=0).key]


def updating(spec: Spec, shift: int = 0) -> list[list[float | None]]:
    """The lrs of the steps that update: the newest release's first ones, one step later per scheduler step
    taken before training (the old workaround, or step mode's)."""
    return newest(spec)[shift:shift + spec.steps - spec.overflow_steps]


@pytest.fixture(scope="module")
def unpatched():
    extra = [replace(s, user_steps=1) for s in CASES] if ON_GOLDEN_RELEASE else []
    return run_specs(*CASES, *extra)


@pytest.fixture(scope="module")
def reset():
    return run_specs(*(replace(s, patch="before") for s in CASES))


@pytest.fixture(scope="module")
def step():
    specs = [replace(s, patch="before", mode="step", user_steps=n) for n in (0, 1) for s in CASES]
    return run_specs(*specs)


@pytest.mark.skipif(not ON_GOLDEN_RELEASE, reason=f"golden.json is from DeepSpeed {GOLDEN['deepspeed']}")
@pytest.mark.parametrize("spec", CASES, ids=lambda s: s.key)
def test_the_newest_release_steps_no_scheduler_on_an_overflow_unpatched(unpatched, spec):
    """What the tests below compare with: on the newest release the steps that update follow the fp32
    schedule, and a user's step after initialize shifts them by one."""
    assert unpatched.lrs[spec.key] == updating(spec)
    assert unpatched.lrs[replace(spec, user_steps=1).key] == updating(spec, shift=1)


@pytest.mark.parametrize("spec", CASES, ids=lambda s: s.key)
def test_fp16_steps_that_update_use_the_newest_releases_lrs_after_overflows(reset, unpatched, spec):
    assert reset.lrs[spec.key] == updating(spec)
    if BUGGY:  # the test can fail: unpatched, this release's first updating step runs at the optimizer's lr
        assert unpatched.lrs[spec.key][0] == spec.groups
        assert unpatched.lrs[spec.key] != updating(spec)


@pytest.mark.parametrize("spec", CASES, ids=lambda s: s.key)
def test_step_mode_with_fp16_overflows_uses_lr_k_at_the_kth_step_that_updates(step, spec):
    assert step.lrs[spec.key] == updating(spec, shift=1)


@pytest.mark.parametrize("spec", CASES, ids=lambda s: s.key)
def test_step_mode_with_fp16_overflows_never_steps_a_scheduler_the_user_has_stepped(step, spec):
    assert step.lrs[replace(spec, user_steps=1).key] == updating(spec, shift=1)


def test_step_mode_steps_once_though_the_first_optimizer_step_overflows_and_says_so(step):
    lines = step.patch_lines()
    assert len([x for x in lines if STEPPED_ONCE in x]) == len(CASES), step.stderr[-3000:]
    assert len([x for x in lines if "not stepped before the first optimizer step" in x]) == len(CASES)
    assert [x for x in lines if "WARNING" in x] == [], step.stderr[-3000:]


def test_a_patched_fp16_run_warns_of_nothing(reset):
    assert [x for x in reset.patch_lines() if "WARNING" in x] == [], reset.stderr[-3000:]
