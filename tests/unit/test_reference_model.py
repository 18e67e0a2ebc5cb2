"""The package's model of the reference release (reference.step_lrs), where a scheduler starts mid-way: what the
record's ``expected`` and the audit's step-0 reference are (tests/test_differential.py compares the model with the
real reference over generated configurations; these are its pure-logic rules)."""

from __future__ import annotations

from types import SimpleNamespace

from accelerate_warmup_patch import reference
from accelerate_warmup_patch.cli.audit import judge
from accelerate_warmup_patch.releases import Start


def _warmup(iteration: int) -> SimpleNamespace:
    return SimpleNamespace(min_lrs=[0.0], delta_lrs=[1e-3], warmup_num_steps=4, warmup_type="linear",
                           last_batch_iteration=iteration)


def test_a_scheduler_built_mid_way_runs_its_first_step_at_the_optimizers_lr() -> None:
    # the reference's constructor writes its start lr at -1 alone: built at 2, its first step runs at the group's lr
    assert reference.step_lrs(_warmup(2), "WarmupLR", 2, [5e-4], built_at=2) == [5e-4]


def test_a_scheduler_built_mid_way_runs_its_formula_once_it_has_stepped() -> None:
    assert reference.step_lrs(_warmup(3), "WarmupLR", 3, [5e-4], built_at=2) == [0.75e-3]


def test_a_scheduler_built_at_minus_one_runs_its_start() -> None:
    assert reference.step_lrs(_warmup(-1), "WarmupLR", -1, [1e-3], built_at=None) == [0.0]


def test_no_formula_no_answer() -> None:
    assert reference.step_lrs(_warmup(2), "OneCycle", 2, [5e-4], built_at=2) is None


def test_the_audit_expects_the_optimizers_lr_for_a_scheduler_configured_mid_way() -> None:
    params = {"warmup_min_lr": 0.0, "warmup_num_steps": 4, "last_batch_iteration": 5}
    for how in Start:
        ran, ref = judge.step0_lrs(how, "WarmupLR", params, 1e-3, 1)
        assert ran == ref == [1e-3], how


def test_the_audit_still_expects_the_start_for_a_fresh_scheduler() -> None:
    ran, ref = judge.step0_lrs(Start.LEAVES_OPTIMIZER_LR, "WarmupLR", {"warmup_min_lr": 0.0}, 1e-3, 1)
    assert (ran, ref) == ([1e-3], [0.0])


def _one_cycle_verdict(version: str, params: dict[str, object]) -> judge.Verdict:
    from accelerate_warmup_patch.cli.audit.report import Report

    return judge.judge(Report(path="/ckpt/global_step4"), "OneCycle", params, version, version)


def test_the_audit_never_clears_a_onecycle_given_stair_counts_on_a_release_that_ignores_them() -> None:
    found = _one_cycle_verdict("0.15.2", {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_stair_count": 2})
    assert found.verdict == "unknown" and "#8179" in found.why, found
    assert _one_cycle_verdict("0.19.4", {"cycle_first_stair_count": 2}).verdict == "not affected"
    assert _one_cycle_verdict("0.15.2", {"cycle_first_stair_count": 0}).verdict == "not affected"
