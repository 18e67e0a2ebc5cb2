"""Builds that are not releases (#46), in pure logic: which version strings are releases, the vendor builds the
table knows, what installed.py answers from a probe's answer and without one, and the audit of a build's run."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import audit_files as files
import pytest

from accelerate_warmup_patch import installed, loads, releases, upstream, vendor_builds
from accelerate_warmup_patch.releases import MaxLrDefault, Start, StepLr
from accelerate_warmup_patch.state import STATE
from accelerate_warmup_patch.upstream.unit import Check


@pytest.mark.parametrize(("version", "release"), [
    ("0.15.2", True), ("v0.19.8", True), ("0.15.3+g7f8e2a1", False), ("0.15.2+local", False),
    ("0.14.4+hpu.synapse.v1.19.0", False), ("0.16.0.dev0", False), ("0.16.0rc1", False), ("0.16.5+4a3b2c1", False),
])
def test_a_version_with_a_local_part_or_a_suffix_is_not_a_release(version: str, release: bool) -> None:
    assert releases.is_release(version) is release


def test_gaudis_builds_are_named_with_the_release_they_carry() -> None:
    found = vendor_builds.vendor_build("0.14.4+hpu.synapse.v1.19.0")
    assert found is not None and found.based_on == "0.14.4" and "tensor" in found.differences
    assert vendor_builds.vendor_build("0.14.4+hpu.synapse.v1.17.0") is None  # not read: not named
    assert vendor_builds.vendor_build("0.15.3+g7f8e2a1") is None


@pytest.mark.parametrize(("version", "based_on", "differs"), [
    ("0.9.4+hpu.synapse.v1.11.0", "0.9.4", False), ("0.9.4+hpu.synapse.v1.12.1", "0.9.4", False),
    ("0.10.3+hpu.synapse.v1.13.0", "0.10.3", False), ("0.12.4+hpu.synapse.v1.15.1", "0.12.4", False),
    ("0.14.0+hpu.synapse.v1.16.1", "0.14.0", False), ("0.14.0+hpu.synapse.v1.17.1", "0.14.0", False),
    ("0.14.4+hpu.synapse.v1.18.0", "0.14.4", True), ("0.16.1+hpu.synapse.v1.21.0", "0.16.1", True),
    ("0.16.5+91d1c55", "0.16.5", True), ("0.16.5+65d9f99", "0.16.5", True),
])
def test_each_vendor_build_read_is_named_with_the_release_it_is_based_on(version: str, based_on: str,
                                                                          differs: bool) -> None:
    """Gaudi 1.11 to 1.21 (HabanaAI/DeepSpeed's branches) and DeeperSpeed v3.0: the version string each reports."""
    found = vendor_builds.vendor_build(version)
    assert found is not None and found.based_on == based_on, found
    assert (found.differences != "none in the schedulers") is differs
    assert upstream.verdicts(based_on)  # a release of the table


@pytest.mark.parametrize("version", ["0.14.4+hpu.synapse.v1.19.1", "0.16.1+hpu.synapse.v1.22.0",
                                     "0.7.7+hpu.synapse.v1.10.0", "0.16.5+4a3b2c1"])
def test_a_vendor_build_not_read_is_not_named(version: str) -> None:
    """A Gaudi release whose branch was not read (or is below the table's floor), a DeeperSpeed commit that is no
    tag read: unknown, as any build."""
    assert vendor_builds.vendor_build(version) is None


@pytest.fixture
def probed(monkeypatch: pytest.MonkeyPatch) -> installed.Probed:
    """A probe's answer for 0.15.2's code labelled 0.15.3+g7f8e2a1: it lacks what 0.15.2 lacks."""
    lacks = frozenset((c.scheduler, c.key) for name in installed.PROBED
                      for c in upstream.missing_backports(name, "0.15.2"))
    answer = installed.Probed("0.15.3+g7f8e2a1", frozenset(installed.PROBED), lacks,
                              {"WarmupLR": Start.LEAVES_OPTIMIZER_LR, "WarmupCosineLR": Start.LEAVES_OPTIMIZER_LR},
                              MaxLrDefault.CONSTANT, StepLr.FLOAT)
    monkeypatch.setattr(STATE, "probed", answer)
    monkeypatch.setattr(STATE, "deepspeed_version", answer.version)
    return answer


def test_the_probes_answer_decides_where_the_number_would_not(probed: installed.Probed) -> None:
    assert installed.lacks("start", "WarmupDecayLR") and not upstream.lacks("start", "WarmupDecayLR", "0.15.3")
    assert not installed.lacks("default_peak", "WarmupDecayLR")  # its own warmup_max_lr: never WarmupLR's default
    assert installed.built_wrong("WarmupCosineLR")
    assert installed.methods_to_fix("0.15.3+g7f8e2a1") == upstream.methods_to_fix("0.15.2")
    assert installed.start("OneCycle") is Start.SETS_EVERY_GROUP  # not probed: the table's
    assert installed.verdicts("0.15.3+g7f8e2a1")["WarmupLR"] == "affected"
    assert "WarmupLR start (#6597): the build lacks it" in installed.disagreements(probed)
    with pytest.raises(KeyError):
        installed.lacks("strat", "WarmupLR")


@pytest.mark.parametrize(("version", "step_lr"), [("0.18.0", StepLr.FLOAT), ("0.18.1", StepLr.NEW_TENSOR),
                                                  ("0.19.3", StepLr.NEW_TENSOR), ("0.19.4", StepLr.IN_PLACE)])
def test_without_a_probe_a_tensor_lrs_step_is_the_tables(monkeypatch: pytest.MonkeyPatch, version: str,
                                                         step_lr: str) -> None:
    monkeypatch.setattr(STATE, "deepspeed_version", version)
    monkeypatch.setattr(STATE, "probed", None)
    assert installed.step_lr() == step_lr


def test_without_a_probe_the_table_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STATE, "deepspeed_version", "0.15.3")
    monkeypatch.setattr(STATE, "probed", None)
    assert not installed.lacks("start", "WarmupLR") and installed.lacks("start", "WarmupCosineLR")
    assert installed.step_lr() == StepLr.FLOAT
    assert installed.max_lr_default() is MaxLrDefault.CONSTANT


def test_an_unpatched_run_of_a_build_is_unknown_with_the_reason(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", version="0.15.3+g7f8e2a1")
    _, report = files.one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "is a build, not the release 0.15.3" in report["why"], report


@pytest.mark.parametrize(("version", "between"), [
    ("0.18.10", True), ("0.18.9", False), ("0.19.0", False), ("0.16.3", False), ("0.14.4", False),
])
def test_a_number_between_two_rows_of_the_table_is_no_release_it_knows(version: str, between: bool) -> None:
    # 0.18.10: WarmupCosineLR's rows end at 0.18.9 and start again at 0.19.0 (#46 item 6)
    assert releases.between_rows(version) is between
    assert (releases.not_the_release(version) is not None) is between


@pytest.mark.parametrize("scheduler", ["WarmupCosineLR", "WarmupLR"])
def test_an_unpatched_run_between_two_rows_is_unknown_with_the_reason(tmp_path: Path, scheduler: str) -> None:
    # the WarmupLR run was "not affected" from the rows around it, the cosine one "older than the guard table"
    params: dict[str, float] = {"total_num_steps": 10} if scheduler == "WarmupCosineLR" else {"warmup_min_lr": 0.0}
    files.write_run(tmp_path / "run", version="0.18.10", groups=2,
                    scheduler={"type": scheduler, "params": {**params, "warmup_num_steps": 5}})
    _, report = files.one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "between two releases the table was read at" in report["why"], report


def test_an_unpatched_run_of_a_known_vendor_build_is_judged_as_the_release_it_carries(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", version="0.14.4+hpu.synapse.v1.19.0")
    _, report = files.one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001, report
    assert any("Intel Gaudi" in note for note in report["notes"]), report


def _engine(position: int, *lrs: float) -> SimpleNamespace:
    """An engine as the load net reads it: a scheduler at ``position`` over an optimizer with groups of ``lrs``."""
    optimizer = SimpleNamespace(param_groups=[{"params": [], "lr": lr} for lr in lrs])
    return SimpleNamespace(lr_scheduler=SimpleNamespace(optimizer=optimizer, last_batch_iteration=position))


def _look(engine: SimpleNamespace) -> loads.Look:
    seen = loads.look(engine)
    assert seen is not None
    return seen


def test_a_load_that_restores_the_scheduler_and_leaves_the_optimizer_is_the_one_aligned() -> None:
    """DeeperSpeed's load_module_only (or upstream's load without the optimizer's states): the scheduler moved, the
    optimizer's groups are the very same, with the same lrs."""
    engine = _engine(-1, 0.0, 0.0)
    before = _look(engine)
    engine.lr_scheduler.last_batch_iteration = 2
    found = loads.restored(before, _look(engine))
    assert found == loads.Restored(scheduler=True, optimizer_lr=False) and found.aligns


@pytest.mark.parametrize("load", ["replaced groups", "lr written", "another group count"])
def test_a_load_that_restores_the_optimizers_lr_is_not_aligned(load: str) -> None:
    """torch's Optimizer.load_state_dict replaces every group; a build may write the lr into the same group."""
    engine = _engine(-1, 0.0, 0.0)
    before = _look(engine)
    engine.lr_scheduler.last_batch_iteration = 2
    groups = engine.lr_scheduler.optimizer.param_groups
    if load == "replaced groups":  # the checkpoint's lrs happen to be the fresh ones: the groups are new
        engine.lr_scheduler.optimizer.param_groups = [dict(group) for group in groups]
    elif load == "lr written":
        groups[0]["lr"] = 0.0007
    else:
        groups.pop()
    found = loads.restored(before, _look(engine))
    assert found.scheduler and found.optimizer_lr and not found.aligns


def test_upstreams_module_only_load_restores_nothing_the_net_acts_on() -> None:
    """Upstream's load_module_only restores the module alone (engine.py @ v0.15.2, v0.19.8): a scheduler this
    process stepped stays this process's, neither aligned nor said to be resumed."""
    engine = _engine(4, 0.0007, 0.00035)
    before = _look(engine)
    found = loads.restored(before, _look(engine))
    assert found == loads.Restored(scheduler=False, optimizer_lr=False) and not found.aligns
    engine.lr_scheduler = SimpleNamespace(optimizer=engine.lr_scheduler.optimizer, last_batch_iteration=4)
    assert loads.restored(before, _look(engine)).scheduler  # another scheduler object: not the one before


class _PeaksAtGroup0:
    """A build's scratch kit as the probe reads a WarmupLR between #7360 and #8171: the peak is group 0's lr."""

    def peak(self) -> MaxLrDefault:
        return MaxLrDefault.GROUP_0


def test_a_build_between_two_changes_of_one_key_is_said_to_lack_the_later_alone() -> None:
    """A 0.19.4+<hash> whose WarmupLR peaks at group 0's lr has #7360 and lacks #8171 (one key, default_peak): the
    probe asks each PR, and the import WARNING, status() and doctor name #8171 alone (they said it lacked #7360)."""
    peak = [c for c in upstream.CHANGES if c.key == "default_peak"]
    assert [c.pr for c in peak] == ["#7360", "#8171"]
    kit: Any = _PeaksAtGroup0()
    said = {c.pr: c.probe.lacks(kit) for c in peak if isinstance(c.probe, Check)}
    assert said == {"#7360": False, "#8171": True}
    answer = installed.Probed("0.19.4+g1234567", frozenset(installed.PROBED), frozenset({("WarmupLR", "default_peak")}),
                              {"WarmupLR": Start.SETS_EVERY_GROUP, "WarmupCosineLR": Start.SETS_EVERY_GROUP},
                              MaxLrDefault.GROUP_0, StepLr.IN_PLACE, frozenset({("WarmupLR", "#8171")}))
    assert installed.lacked_changes(answer) == ["WarmupLR default peak (#8171)"]
    assert installed.disagreements(answer) == ["WarmupLR default peak (#8171): the build lacks it"]
