"""The guard table, row by row: each lookup at each edge of each span, against the values its sources give (the
upstream changes' lookups: tests/unit/test_upstream.py).

The expected values are written out here (from the rows' sources: each release's lr_schedules.py, engine.py and
multinode_runner.py), not computed from the table, so that a row edited by mistake turns a case red.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import pytest

from accelerate_warmup_patch import multinode_runners, releases
from accelerate_warmup_patch.releases import MaxLrDefault, Start, Support

LEAVES, GROUP_0, EVERY = Start.LEAVES_OPTIMIZER_LR, Start.SETS_GROUP_0_ONLY, Start.SETS_EVERY_GROUP
UNTESTED = "0.20.0"  # newer than the table: the newest row is assumed to hold


@pytest.mark.parametrize(("scheduler", "version", "start"), [
    ("WarmupLR", "0.8.9", None), ("WarmupLR", "0.9.0", LEAVES), ("WarmupLR", "0.15.2", LEAVES),
    ("WarmupLR", "0.15.3", EVERY), ("WarmupLR", "0.19.8", EVERY), ("WarmupLR", UNTESTED, EVERY),
    ("WarmupDecayLR", "0.8.9", None), ("WarmupDecayLR", "0.9.0", LEAVES), ("WarmupDecayLR", "0.15.2", LEAVES),
    ("WarmupDecayLR", "0.15.3", EVERY), ("WarmupDecayLR", UNTESTED, EVERY),
    ("WarmupCosineLR", "0.12.2", None), ("WarmupCosineLR", "0.12.3", LEAVES), ("WarmupCosineLR", "0.15.2", LEAVES),
    ("WarmupCosineLR", "0.15.3", GROUP_0), ("WarmupCosineLR", "0.18.9", GROUP_0),
    ("WarmupCosineLR", "0.19.0", EVERY), ("WarmupCosineLR", "0.19.8", EVERY), ("WarmupCosineLR", UNTESTED, EVERY),
    ("OneCycle", "0.8.9", None), ("OneCycle", "0.9.0", EVERY), ("OneCycle", UNTESTED, EVERY),
    ("LRRangeTest", "0.8.9", None), ("LRRangeTest", "0.9.0", EVERY), ("LRRangeTest", UNTESTED, EVERY),
    ("CosineAnnealingLR", "0.15.2", None),  # not DeepSpeed's: the table has no row
    ("WarmupLR", "0.15.2+cu121", LEAVES), ("WarmupLR", "0.15.3rc1", EVERY),  # local and pre-release parts ignored
])
def test_the_start_each_class_has_on_each_release(scheduler: str, version: str, start: Start | None) -> None:
    fact = releases.start_fact(scheduler, version)
    assert (fact.value if fact is not None else None) is start


@pytest.mark.parametrize("row", releases.SCHEDULER_STARTS, ids=lambda f: f"{f.subject}-{f.span}")
def test_each_start_row_holds_from_its_first_release_to_its_last_and_no_further(
        row: releases.Fact[releases.Start]) -> None:
    assert releases.start_fact(row.subject, row.span.first) == row
    before = list(releases.parse(row.span.first))
    before[-1] -= 1
    if before[-1] >= 0:  # x.y.0 has no x.y.-1: the edge below it is the previous minor's, tested above
        assert releases.start_fact(row.subject, ".".join(map(str, before))) != row
    if row.span.last is not None:
        assert releases.start_fact(row.subject, row.span.last) == row
        after = list(releases.parse(row.span.last))
        after[-1] += 1
        assert releases.start_fact(row.subject, ".".join(map(str, after))) != row
    assert row.source, "every row names where its fact came from"


def test_each_class_has_one_row_per_release_from_its_first_on() -> None:
    for scheduler in releases.scheduler_classes():
        rows = sorted((f for f in releases.SCHEDULER_STARTS if f.subject == scheduler),
                      key=lambda f: releases.parse(f.span.first))
        for earlier, later in zip(rows, rows[1:]):
            assert earlier.span.last is not None
            gap = releases.parse(later.span.first) > releases.parse(earlier.span.last)
            assert gap and releases.start_fact(scheduler, earlier.span.last) == earlier
        assert rows[-1].span.last is None, f"{scheduler}: the newest row runs on to untested releases"


def test_the_classes_in_the_tables_order() -> None:
    assert releases.scheduler_classes() == ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest")


@pytest.mark.parametrize(("version", "default"), [
    ("0.9.0", MaxLrDefault.CONSTANT), ("0.17.1", MaxLrDefault.CONSTANT), ("0.17.2", MaxLrDefault.GROUP_0),
    ("0.19.3", MaxLrDefault.GROUP_0), ("0.19.4", MaxLrDefault.EACH_GROUP), ("0.19.8", MaxLrDefault.EACH_GROUP),
    (UNTESTED, MaxLrDefault.EACH_GROUP),
])
def test_warmup_lrs_default_peak_on_each_release(version: str, default: MaxLrDefault) -> None:
    assert releases.warmup_max_lr_default(version) is default


@pytest.mark.parametrize(("version", "method"), [("0.8.9", None), ("0.9.0", "_take_model_step"),
                                                 ("0.15.2", "_take_model_step"), ("0.19.8", "_take_model_step"),
                                                 (UNTESTED, "_take_model_step")])
def test_the_engine_method_that_takes_the_optimizer_step(version: str, method: str | None) -> None:
    assert releases.optimizer_step_method(version) == method


@pytest.mark.parametrize(("version", "level"), [
    ("0.8.9", Support.UNSUPPORTED), ("0.9.0", Support.KNOWN), ("0.15.2", Support.KNOWN), ("0.19.8", Support.KNOWN),
    ("0.19.8+cu121", Support.KNOWN), ("0.19.8.1", Support.KNOWN), ("0.19.9", Support.UNTESTED),
    ("0.20.0rc1", Support.UNTESTED), ("1.0.0", Support.UNTESTED),
])
def test_deepspeed_support_at_the_floor_and_past_the_newest(version: str, level: Support) -> None:
    assert releases.deepspeed_support(version) is level


def test_accelerate_support_at_the_floor_and_past_the_newest() -> None:
    newest = releases.parse(releases.NEWEST_ACCELERATE)
    assert releases.accelerate_support("0.9.9") is Support.UNSUPPORTED
    assert releases.accelerate_support("0.10.0") is Support.KNOWN
    assert releases.accelerate_support(releases.NEWEST_ACCELERATE) is Support.KNOWN
    next_patch = ".".join(map(str, (*newest[:2], newest[2] + 1)))
    assert releases.accelerate_support(next_patch) is Support.UNTESTED


@pytest.mark.parametrize(("text", "parsed"), [
    ("0.15.3", (0, 15, 3)), ("0.15.3+abc", (0, 15, 3)), ("v1.2", (1, 2)), (" 0.9.0rc1", (0, 9, 0)),
    ("1.0.0.dev0", (1, 0, 0)), ("2", (2,)), ("0.19.8.post1", (0, 19, 8)),
])
def test_parse_reads_the_release_part_alone(text: str, parsed: tuple[int, ...]) -> None:
    assert releases.parse(text) == parsed


@pytest.mark.parametrize("text", ["", "abc", "dev", ".1.2"])
def test_parse_refuses_what_is_not_a_release(text: str) -> None:
    with pytest.raises(ValueError, match="not a release version"):
        releases.parse(text)


@pytest.mark.parametrize(("runner", "version", "launcher", "carries", "shell"), [
    ("PDSHRunner", "0.9.0", "pdsh", True, True), ("PDSHRunner", "0.19.8", "pdsh", True, True),
    ("OpenMPIRunner", "0.9.0", "openmpi", True, False), ("SlurmRunner", "0.15.2", "slurm", True, False),
    ("MVAPICHRunner", "0.19.8", "mvapich", True, False),
    ("MPICHRunner", "0.9.0", "mpich", False, False), ("MPICHRunner", "0.9.1", "mpich", False, False),
    ("MPICHRunner", "0.9.2", "mpich", True, False),
    ("IMPIRunner", "0.9.3", "impi", True, False), ("PDSHRunner", UNTESTED, "pdsh", True, True),
])
def test_each_runners_fact_on_each_release(runner: str, version: str, launcher: str, carries: bool,
                                           shell: bool) -> None:
    fact = multinode_runners.runner_fact(runner, version)
    assert fact is not None
    assert (fact.value.launcher, fact.value.carries, fact.value.remote_shell) == (launcher, carries, shell)


@pytest.mark.parametrize(("runner", "version"), [("IMPIRunner", "0.9.2"), ("PDSHRunner", "0.8.9"),
                                                 ("LocalRunner", "0.15.2")])
def test_a_runner_the_release_lacks_has_no_fact(runner: str, version: str) -> None:
    assert multinode_runners.runner_fact(runner, version) is None


def test_an_untested_release_has_the_newest_releases_runners() -> None:
    assert multinode_runners.runner_facts(UNTESTED) == multinode_runners.runner_facts(releases.NEWEST_DEEPSPEED)
    assert {f.value.launcher for f in multinode_runners.runner_facts("0.19.8")} == {
        "pdsh", "openmpi", "mpich", "impi", "slurm", "mvapich"}
    assert {f.value.launcher for f in multinode_runners.runner_facts("0.9.0")} == {"pdsh", "openmpi", "mpich", "slurm",
                                                                          "mvapich"}


def test_installed_asks_the_imported_module_first(deepspeed_release: Callable[[str], None]) -> None:
    deepspeed_release("0.15.2")  # what runs, whatever the metadata says
    assert releases.installed("deepspeed") == "0.15.2"


def test_installed_reads_the_metadata_of_what_is_not_imported() -> None:
    assert releases.installed("wrapt") == metadata.version("wrapt")  # the package's one dependency


def test_installed_is_none_for_a_distribution_that_is_absent() -> None:
    assert releases.installed("no-such-distribution-awp") is None
