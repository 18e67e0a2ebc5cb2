"""Every road a scheduler can be built by starts where the newest release starts it.

The fix lives in the scheduler's constructor, as upstream's does (PR #6597): a scheduler that user
code builds and steps itself, one passed to ``deepspeed.initialize`` as an object, one built
through a reference to ``initialize`` taken before the patch, and a PipelineEngine's all run the
newest release's trajectory. Real engines, real interpreters; ``golden.json`` holds the newest
release's trajectories (the road an engine was built by changes no lr).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GOLDEN, Spec, installed, run_python, run_specs

from accelerate_warmup_patch import releases, upstream

DEEPSPEED = installed("deepspeed")
BUGGY = releases.start_fact("WarmupLR", DEEPSPEED).value is releases.Start.LEAVES_OPTIMIZER_LR

USER_BUILT = [
    Spec(path="schedule", scheduler="WarmupLR-linear"),
    Spec(path="schedule", scheduler="WarmupDecayLR", steps=9),
    Spec(path="schedule", scheduler="WarmupCosineLR", groups=[1e-3, 5e-4]),
    Spec(path="schedule", scheduler="WarmupLR-default-max", groups=[2e-3, 5e-4]),
]
ENGINE_ROADS = [
    Spec(road="client", patch="before", groups=[1e-3, 5e-4]),
    Spec(road="client", patch="late"),
    Spec(road="early-bound", patch="after"),
    Spec(road="pipeline", patch="before"),
    Spec(road="pipeline", patch="before", scheduler="WarmupCosineLR", groups=[1e-3, 5e-4]),
]


@pytest.fixture(scope="module")
def user_built():
    return run_specs(*USER_BUILT), run_specs(*(replace(s, patch="before") for s in USER_BUILT))


@pytest.mark.parametrize("spec", USER_BUILT, ids=lambda s: s.key)
def test_a_scheduler_that_user_code_builds_and_steps_runs_the_newest_trajectory(user_built, spec):
    unpatched, patched = user_built
    assert patched.lrs[spec.key] == GOLDEN["runs"][spec.newest_key]
    if BUGGY:  # the test can fail: unpatched, this release starts elsewhere
        assert unpatched.lrs[spec.key][0] != GOLDEN["runs"][spec.newest_key][0]


@pytest.fixture(scope="module")
def engine_roads():
    return run_specs(*(s for s in ENGINE_ROADS if s.patch != "after")), run_specs(
        *(s for s in ENGINE_ROADS if s.patch == "after"))


@pytest.mark.parametrize("spec", ENGINE_ROADS, ids=lambda s: f"{s.key}:{s.patch}")
def test_every_engine_road_runs_the_newest_trajectory(engine_roads, spec):
    ran = engine_roads[1] if spec.patch == "after" else engine_roads[0]
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.newest_key]


def test_an_early_bound_initialize_is_fixed_and_status_says_what_is_in_place(engine_roads):
    status = engine_roads[1].data["status"]
    assert status["fixes_applied"] == (1 if BUGGY else 0)
    assert "deepspeed.initialize" in status["patched"]


DEFAULT_PEAK = Spec(path="accelerate", scheduler="WarmupLR-default-max", groups=[1e-3, 5e-4])


@pytest.mark.transformers  # accelerate's DeepSpeed road reads transformers' version (tests/tiers.py)
def test_the_default_peak_is_the_newest_whatever_the_import_order_where_it_can_be_known():
    """Built after the import, the peak is the newest release's on every release. Built before it, up to
    0.15.2 the groups still hold their lrs and the patch backports the peak; from 0.15.3 the constructor
    has overwritten them, so the peak stays the release's, with a WARNING that says so."""
    before = run_specs(replace(DEFAULT_PEAK, patch="before"))
    after = run_specs(replace(DEFAULT_PEAK, patch="after"))  # after accelerator.prepare built the scheduler
    newest = GOLDEN["runs"][replace(DEFAULT_PEAK, path="deepspeed").key]
    changed = upstream.lacks("default_peak", "WarmupLR", DEEPSPEED)
    knowable = upstream.lacks("start", "WarmupLR", DEEPSPEED) or not changed
    assert before.lrs[DEFAULT_PEAK.key] == newest
    assert (after.lrs[DEFAULT_PEAK.key] == newest) == knowable, after.lrs
    for ran, known in ((before, True), (after, knowable)):
        peak = [x for x in ran.patch_lines() if "WARNING" in x and "peak lr" in x]
        assert len(peak) == (1 if changed else 0), ran.stderr[-3000:]
        if changed and known:
            assert "peak lr [0.001, 0.001] -> [0.001, 0.0005]" in peak[0]
        elif changed:
            assert "built before the patch was applied" in peak[0] and "is left at" in peak[0]
    if not knowable:  # never worse than the bug: what the release does unpatched
        unpatched = run_specs(DEFAULT_PEAK)
        assert after.lrs[DEFAULT_PEAK.key] == unpatched.lrs[DEFAULT_PEAK.key]


@pytest.mark.transformers  # accelerate's DeepSpeed road reads transformers' version (tests/tiers.py)
def test_a_warmup_decay_lr_keeps_its_own_default_peak_whatever_the_import_order():
    """WarmupDecayLR passes its own warmup_max_lr, 0.001 by default on every release (0.19.8 too): WarmupLR's
    default peak (#7360, #8171) never reaches it, built before the patch or after, and nothing warns of a peak."""
    spec = Spec(path="accelerate", scheduler="WarmupDecayLR-default-max", groups=[1e-2])
    before = run_specs(replace(spec, patch="before"))
    after = run_specs(replace(spec, patch="after"))  # after accelerator.prepare built the scheduler: the late scan
    assert after.lrs[spec.key] == before.lrs[spec.key]
    assert max(lr for step in before.lrs[spec.key] for lr in step) == pytest.approx(1e-3)  # not the group's 0.01
    for ran in (before, after):
        assert [x for x in ran.patch_lines() if "WARNING" in x and "peak lr" in x] == [], ran.stderr[-3000:]


def test_an_engine_without_a_scheduler_is_left_alone():
    spec = Spec(scheduler="none", steps=3)
    plain, ran = run_specs(spec), run_specs(replace(spec, patch="before"))
    assert ran.lrs == plain.lrs
    assert ran.data["status"]["fixes_applied"] == 0
    assert [x for x in ran.patch_lines() if "WARNING" in x] == []


SCHEDULER_OBJECTS = """
import logging, torch
import accelerate_warmup_patch as awp
awp.apply()
from deepspeed.runtime.lr_schedules import WarmupLR
records = []
logging.getLogger("accelerate_warmup_patch").addHandler(logging.Handler())
logging.getLogger("accelerate_warmup_patch").handlers[-1].emit = records.append

# a tensor lr is written as this release writes it: in place from 0.19.4 (PR #8202), before that the
# group gets a new object and the tensor the user handed in keeps its value (WarmupCosineLR reads it)
from accelerate_warmup_patch import releases
import deepspeed
optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=torch.tensor(1e-3))
lr = optimizer.param_groups[0]["lr"]
WarmupLR(optimizer, warmup_min_lr=1e-5, warmup_max_lr=1e-3, warmup_num_steps=5)
now = optimizer.param_groups[0]["lr"]
in_place = releases.parse(deepspeed.__version__) >= (0, 19, 4)
assert (now is lr) == in_place, (now, lr)
assert abs(float(now) - 1e-5) < 1e-12, now
if not in_place:
    assert lr.item() == torch.tensor(1e-3).item(), lr

# a subclass that calls WarmupLR.__init__(self, ...) explicitly is fixed like any other, without a warning
class Mine(WarmupLR):
    def __init__(self, optimizer):
        WarmupLR.__init__(self, optimizer, warmup_min_lr=0.0, warmup_max_lr=2e-3, warmup_num_steps=5)

optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
mine = Mine(optimizer)
assert optimizer.param_groups[0]["lr"] == 0.0 and mine.max_lrs == [2e-3], (optimizer.param_groups, mine.max_lrs)
assert [r.getMessage() for r in records if r.levelname == "WARNING"] == [], [r.getMessage() for r in records]
print("OK")
"""


def test_tensor_lrs_stay_tensors_and_explicit_base_class_calls_are_fixed():
    proc = run_python(SCHEDULER_OBJECTS)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]
