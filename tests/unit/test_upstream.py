"""The upstream changes (accelerate_warmup_patch/upstream/): each unit whole, each key spelled in its unit alone, and
the lookups every decision asks of them, at each edge of each release.

The expected values of the lookups are written out here (from the changes' sources: each release's lr_schedules.py),
not computed from the units, so that a unit edited by mistake turns a case red.
"""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelerate_warmup_patch import releases, upstream
from accelerate_warmup_patch.cli.audit import judge
from accelerate_warmup_patch.cli.audit.report import Report
from accelerate_warmup_patch.upstream import unit as parts

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "accelerate_warmup_patch"
UNITS = PACKAGE / "upstream"
sys.path.insert(0, str(ROOT / "tests"))
import cases  # noqa: E402  (tests/cases.py: standard library at import; its cases import torch when they run)

UNTESTED = "0.20.0"  # newer than the table: the newest row is assumed to hold
# the cases of tests/cases.py that show no change: the reference and every release agree on them
NOTHING_TO_BACKPORT = {"restored_lr_warmup", "restored_lr_one_cycle"}
ALL_CHANGES = [(f"{c.pr}-{c.key}-{c.scheduler}", c) for c in upstream.CHANGES]


def _by_id(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    return {"argvalues": [value for _, value in pairs], "ids": [name for name, _ in pairs]}


# Each unit whole -------------------------------------------------------------------------------------------------

def test_every_module_of_upstream_is_a_unit_listed_once_in_release_order() -> None:
    modules = sorted(path.stem for path in UNITS.glob("pr*.py"))
    assert [f"pr{unit.pr.lstrip('#')}" for unit in upstream.UNITS] == modules, "a unit's module not listed in UNITS"
    order = [(releases.parse(unit.release), int(unit.pr.lstrip("#"))) for unit in upstream.UNITS]
    assert order == sorted(order), "UNITS in release order (and PR order within a release)"


@pytest.mark.parametrize("unit", upstream.UNITS, ids=lambda u: u.pr)
def test_each_unit_names_its_release_and_where_it_was_read(unit: parts.Unit) -> None:
    assert unit.changes, unit
    assert releases.parse(unit.release) > releases.parse(releases.DEEPSPEED_FLOOR)
    assert unit.source.startswith("deepspeed/") and " @ v" in unit.source, unit.source
    assert all((c.pr, c.release) == (unit.pr, unit.release) for c in unit.changes)
    module = sys.modules[f"accelerate_warmup_patch.upstream.pr{unit.pr.lstrip('#')}"]
    assert module.__doc__ and module.__doc__.startswith(f"PR {unit.pr} (DeepSpeed {unit.release})"), module.__doc__


def _why(part: object) -> str:
    return str(getattr(part, "why", ""))


@pytest.mark.parametrize("change", **_by_id(ALL_CHANGES))
def test_each_change_has_every_part_or_says_why_not(change: parts.Change) -> None:
    assert change.key and change.method and change.what, change
    assert isinstance(change.probe, (parts.Check, parts.NotProbed, parts.ByLater))
    assert isinstance(change.backport, (parts.AtConstruction, parts.Answer, parts.NotBackported, parts.ByLater))
    assert isinstance(change.judgement, (parts.Applied, parts.AtStep0, parts.NotJudged, parts.ByLater))
    for part in (change.probe, change.backport, change.judgement, change.cases):
        if isinstance(part, (parts.NotProbed, parts.NotBackported, parts.NotJudged, parts.Elsewhere, parts.ByLater)):
            assert len(_why(part)) > 10, f"{change.pr} {change.key}: {type(part).__name__} without its reason"
    assert change.why, "docs/matrix.md's words: how the patch reproduces it, or why not"
    if change.backported:  # the audit judges a run that lacked it; the probe asks a build for it
        assert not isinstance(change.judgement, parts.NotJudged), f"{change.pr} {change.key}: no judgement"
        assert not isinstance(change.probe, parts.NotProbed), f"{change.pr} {change.key}: not probed"
    else:
        assert isinstance(change.judgement, parts.NotJudged) and isinstance(change.probe, parts.NotProbed)
    if isinstance(change.backport, parts.Answer):
        assert change.method != "__init__" and change.backport.where in (parts.BEFORE_START, parts.PAST_WARMUP)
    if isinstance(change.backport, parts.AtConstruction):
        assert change.method == "__init__"
    if isinstance(change.judgement, parts.AtStep0):  # decides step 0 alone: what the constructor or a method does then
        assert change.key == upstream.START or (isinstance(change.backport, parts.Answer)
                                                and change.backport.where == parts.BEFORE_START)


@pytest.mark.parametrize("change", **_by_id([(n, c) for n, c in ALL_CHANGES if any(
    isinstance(part, parts.ByLater) for part in (c.probe, c.backport, c.judgement, c.cases))]))
def test_a_part_done_by_a_later_change_is_done_there(change: parts.Change) -> None:
    later = [c for c in upstream.CHANGES if (c.key, c.scheduler) == (change.key, change.scheduler)
             and releases.parse(c.release) > releases.parse(change.release)]
    assert later, f"{change.pr} {change.key}: no later change of its key"
    for name in ("probe", "backport", "judgement", "cases"):
        part = getattr(change, name)
        if isinstance(part, parts.ByLater):
            done = next(c for c in later if c.pr == part.pr)
            assert not isinstance(getattr(done, name), parts.ByLater), f"{part.pr} does not do its {name} itself"
            assert change.meets == done.meets and change.not_for == done.not_for, "one key, one rule of configs"


def test_the_start_is_the_constructors_last_write_and_each_start_class_has_one() -> None:
    starts = [c for c in upstream.CHANGES if c.key == upstream.START]
    assert {c.scheduler for c in starts} == {"WarmupLR", "WarmupCosineLR"}
    assert all(isinstance(c.backport, parts.AtConstruction) and c.backport.last for c in starts)
    lasts = [c for c in upstream.CHANGES if isinstance(c.backport, parts.AtConstruction) and c.backport.last]
    assert lasts == starts, "only the start is written last"
    assert [c.key for c in upstream.at_construction("WarmupLR")] == ["default_peak", "start"]
    assert [c.key for c in upstream.at_construction("WarmupCosineLR")] == ["unknown_warmup_type", "start"]
    assert [c.key for c in upstream.at_construction("WarmupDecayLR")] == ["start"]  # its own warmup_max_lr


def _cases_of(change: parts.Change) -> tuple[str, ...]:
    return change.cases if isinstance(change.cases, tuple) else ()


def test_every_case_named_is_a_case_of_tests_cases_with_the_references_run() -> None:
    golden = json.loads((ROOT / "tests" / "golden_cases.json").read_text())["cases"]
    named = {name for c in upstream.CHANGES for name in _cases_of(c)}
    assert named - set(cases.CASES) == set(), "a case named by a unit that tests/cases.py lacks"
    assert set(cases.CASES) == set(golden), "golden_cases.json holds the reference's run of every case"
    assert set(cases.CASES) - named == NOTHING_TO_BACKPORT, "a case of tests/cases.py no unit names"
    assert all(_cases_of(c) or isinstance(c.cases, (parts.Elsewhere, parts.ByLater)) for c in upstream.CHANGES)


# Each key, spelled in its unit alone --------------------------------------------------------------------------------

def _constants(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_each_key_is_spelled_in_one_unit_and_nowhere_else_in_the_package() -> None:
    spelled: dict[str, list[str]] = {key: [] for key in upstream.CHANGE_KEYS}
    for path in sorted(PACKAGE.rglob("*.py")):
        for key in _constants(path) & upstream.CHANGE_KEYS:
            spelled[key].append(str(path.relative_to(PACKAGE)))
    first = {c.key: f"upstream/pr{c.pr.lstrip('#')}.py" for c in reversed(upstream.CHANGES)}
    assert spelled == {key: [first[key]] for key in upstream.CHANGE_KEYS}


def test_the_key_guard_sees_a_key_spelled_elsewhere(tmp_path: Path) -> None:
    module = tmp_path / "nets.py"
    module.write_text('lacks = installed.lacks("default_peak", name)\n')
    assert _constants(module) & upstream.CHANGE_KEYS == {"default_peak"}


# The audit judges what it meets, never silently ------------------------------------------------------------------

def test_every_change_the_audit_meets_has_a_judgement_of_its_own() -> None:
    """The audit meets the newest backported row of each key (config_facts.differences); each is judged by step 0's
    lrs or by its unit's own judgement, never by a default."""
    newest = {(c.key, c.scheduler): c for c in upstream.CHANGES if c.backported}
    for change in newest.values():
        assert isinstance(change.judgement, (parts.AtStep0, parts.Applied)), f"{change.pr} {change.key}"
    for version in ("0.9.0", "0.12.3", "0.15.2", "0.17.2", "0.19.0", "0.19.3"):
        for scheduler in releases.scheduler_classes():
            for change in judge.backported_changes(scheduler, version, {"warmup_type": "cosine"}):
                assert isinstance(change.judgement, (parts.AtStep0, parts.Applied)), (version, change)


def test_a_change_without_a_judgement_is_unknown_never_affected() -> None:
    change = parts.Change("unjudged", "WarmupLR", "__init__", "a change no unit judges",
                          probe=parts.NotProbed("a test's"), backport=parts.NotBackported("a test's"),
                          judgement=parts.NotJudged("a test's"), cases=parts.Elsewhere("a test's own"))
    applied, why = judge.change_applied(change, Report(path="run"), {}, "0.15.2")
    assert applied is None and "no judgement" in why


def test_the_last_steps_are_judged_on_the_newest_saves_release() -> None:
    assert [(c.pr, c.key) for c in upstream.CHANGES if judge.by_last_steps(c)] == [("#8142", "ratio_past_warmup")]
    assert {(c.pr, c.key) for c in upstream.CHANGES if judge.step0_only(c)} == {
        ("#6597", "start"), ("#6597", "get_lr_before_start"), ("#7969", "start"), ("#7969", "get_lr_before_start"),
        ("#7969", "ratio_before_start")}


# Which releases and builds lack each change ---------------------------------------------------------------------

@pytest.mark.parametrize(("pr", "version", "lacked"), [
    ("#6597", "0.15.2", True), ("#6597", "0.15.3", False), ("#6597", "0.15.2+local", True),
    ("#8171", "0.19.3", True), ("#8171", "0.19.4", False), ("#4688", "0.12.3", True), ("#4688", "0.12.4", False),
])
def test_a_unit_is_lacked_by_the_releases_before_its_first(pr: str, version: str, lacked: bool) -> None:
    assert next(u for u in upstream.UNITS if u.pr == pr).lacked_by(version) is lacked


def test_the_vendor_builds_that_lack_a_unit_are_those_that_carry_an_older_release() -> None:
    by_pr = {unit.pr: {build.based_on for build in unit.lacking_builds()} for unit in upstream.UNITS}
    assert by_pr["#6597"] == {"0.9.4", "0.10.3", "0.12.4", "0.14.0", "0.14.4"}  # Gaudi 1.11 to 1.19
    assert by_pr["#4688"] == {"0.9.4", "0.10.3"}  # Gaudi 1.14's 0.12.4 has it
    assert by_pr["#8171"] == {"0.9.4", "0.10.3", "0.12.4", "0.14.0", "0.14.4", "0.16.1", "0.16.5"}


# The lookups, at each edge of each release ------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "scheduler", "version", "lacks"), [
    ("start", "WarmupLR", "0.9.0", True), ("start", "WarmupLR", "0.15.2", True), ("start", "WarmupLR", "0.15.3", False),
    ("start", "WarmupDecayLR", "0.15.2", True), ("start", "WarmupDecayLR", "0.15.3", False),  # WarmupLR's __init__
    ("start", "WarmupCosineLR", "0.15.2", True), ("start", "WarmupCosineLR", "0.18.9", True),
    ("start", "WarmupCosineLR", "0.19.0", False), ("start", "OneCycle", "0.9.0", False),
    ("start", "LRRangeTest", "0.9.0", False),
    ("get_lr_before_start", "WarmupLR", "0.15.2", True), ("get_lr_before_start", "WarmupLR", "0.15.3", False),
    ("get_lr_before_start", "WarmupCosineLR", "0.18.9", True),
    ("get_lr_before_start", "WarmupCosineLR", "0.19.0", False),
    ("ratio_before_start", "WarmupCosineLR", "0.18.9", True), ("ratio_before_start", "WarmupCosineLR", "0.19.0", False),
    ("ratio_past_warmup", "WarmupCosineLR", "0.19.2", True), ("ratio_past_warmup", "WarmupCosineLR", "0.19.3", False),
    ("unknown_warmup_type", "WarmupCosineLR", "0.19.3", True),
    ("unknown_warmup_type", "WarmupCosineLR", "0.19.4", False),
    # two rows: #7360 (0.17.2, group 0's lr) and #8171 (0.19.4, each group's): the newest is what is backported
    ("default_peak", "WarmupLR", "0.17.1", True), ("default_peak", "WarmupLR", "0.17.2", True),
    ("default_peak", "WarmupLR", "0.19.3", True), ("default_peak", "WarmupLR", "0.19.4", False),
    # WarmupDecayLR passes its own warmup_max_lr (default 0.001 on every release): no default peak to backport
    ("default_peak", "WarmupDecayLR", "0.15.2", False), ("default_peak", "WarmupDecayLR", "0.19.3", False),
    ("start", "WarmupDecayLR", "0.15.2", True),
    ("default_peak", "WarmupLR", UNTESTED, False),
    # changes the patch does not backport: never "lacks", whatever the release
    ("validation", "WarmupLR", "0.15.2", False), ("tensor_type", "WarmupLR", "0.15.2", False),
    ("tensor_in_place", "WarmupCosineLR", "0.19.3", False), ("log_of_warmup_steps", "WarmupCosineLR", "0.12.3", False),
    ("get_last_lr", "WarmupCosineLR", "0.12.3", False),
])
def test_what_each_release_lacks(key: str, scheduler: str, version: str, lacks: bool) -> None:
    assert upstream.lacks(key, scheduler, version) is lacks


@pytest.mark.parametrize("key", ["strat", "Start", "default-peak", ""])
def test_a_key_no_change_has_raises_instead_of_answering_false(key: str) -> None:
    with pytest.raises(KeyError, match="no change"):
        upstream.lacks(key, "WarmupLR", "0.15.2")


def test_the_change_keys() -> None:
    keys = {"log_of_warmup_steps", "get_last_lr", "start", "get_lr_before_start", "default_peak", "tensor_type",
            "ratio_before_start", "validation", "ratio_past_warmup", "unknown_warmup_type", "tensor_in_place",
            "stair_counts"}
    assert keys == upstream.CHANGE_KEYS


W_INIT, W_GET_LR = ("WarmupLR", "__init__"), ("WarmupLR", "get_lr")
C_INIT, C_GET_LR = ("WarmupCosineLR", "__init__"), ("WarmupCosineLR", "get_lr")
C_RATIO = ("WarmupCosineLR", "get_lr_ratio")


@pytest.mark.parametrize(("version", "methods"), [
    ("0.8.9", set()),  # below the floor: nothing
    ("0.9.0", {W_INIT, W_GET_LR}), ("0.12.2", {W_INIT, W_GET_LR}),  # WarmupCosineLR does not exist yet
    ("0.12.3", {W_INIT, W_GET_LR, C_INIT, C_GET_LR, C_RATIO}),
    ("0.15.2", {W_INIT, W_GET_LR, C_INIT, C_GET_LR, C_RATIO}),
    ("0.15.3", {W_INIT, C_INIT, C_GET_LR, C_RATIO}), ("0.18.9", {W_INIT, C_INIT, C_GET_LR, C_RATIO}),
    ("0.19.0", {W_INIT, C_INIT, C_RATIO}), ("0.19.2", {W_INIT, C_INIT, C_RATIO}),
    ("0.19.3", {W_INIT, C_INIT}), ("0.19.4", set()), ("0.19.8", set()), (UNTESTED, set()),
])
def test_the_methods_the_patch_wraps_on_each_release(version: str, methods: set[tuple[str, str]]) -> None:
    wrapped = upstream.methods_to_fix(version)
    assert set(wrapped) == methods
    assert len(wrapped) == len(methods), "each method once"


@pytest.mark.parametrize(("scheduler", "version", "wrong"), [
    ("WarmupLR", "0.15.2", True), ("WarmupLR", "0.15.3", True), ("WarmupLR", "0.19.3", True),
    ("WarmupLR", "0.19.4", False), ("WarmupDecayLR", "0.15.2", True), ("WarmupDecayLR", "0.15.3", False),
    ("WarmupDecayLR", "0.19.3", False), ("WarmupDecayLR", "0.19.4", False),
    ("WarmupCosineLR", "0.18.9", True), ("WarmupCosineLR", "0.19.0", True),  # 0.19.4's unknown-warmup_type fallback
    ("WarmupCosineLR", "0.19.3", True), ("WarmupCosineLR", "0.19.4", False),
    ("OneCycle", "0.9.0", False), ("LRRangeTest", "0.15.2", False), ("WarmupLR", UNTESTED, False),
])
def test_which_classes_each_release_builds_otherwise_than_the_reference(scheduler: str, version: str,
                                                                       wrong: bool) -> None:
    assert upstream.built_wrong(scheduler, version) is wrong


@pytest.mark.parametrize(("scheduler", "version", "verdict"), [
    ("WarmupLR", "0.8.9", "unsupported"), ("OneCycle", "0.8.9", "unsupported"),
    ("WarmupCosineLR", "0.12.2", "absent"),
    ("WarmupLR", UNTESTED, "untested"), ("WarmupCosineLR", UNTESTED, "untested"),
    ("WarmupLR", "0.9.0", "affected"), ("WarmupLR", "0.15.2", "affected"), ("WarmupDecayLR", "0.15.2", "affected"),
    ("WarmupCosineLR", "0.12.3", "affected"), ("WarmupCosineLR", "0.15.3", "affected (groups 1+)"),
    ("WarmupCosineLR", "0.18.9", "affected (groups 1+)"),
    ("OneCycle", "0.15.2", "not affected"), ("LRRangeTest", "0.19.8", "not affected"),
    ("WarmupLR", "0.15.3", "fixed upstream; the patch backports default peak (#8171)"),
    ("WarmupLR", "0.19.3", "fixed upstream; the patch backports default peak (#8171)"),
    ("WarmupDecayLR", "0.19.3", "fixed upstream"),  # its own warmup_max_lr default, 0.001 on 0.19.8 too
    ("WarmupCosineLR", "0.19.0",
     "fixed upstream; the patch backports ratio past warmup (#8142), unknown warmup type (#8151)"),
    ("WarmupCosineLR", "0.19.3", "fixed upstream; the patch backports unknown warmup type (#8151)"),
    ("WarmupLR", "0.19.4", "fixed upstream"), ("WarmupCosineLR", "0.19.8", "fixed upstream"),
])
def test_the_verdict_each_class_gets_on_each_release(scheduler: str, version: str, verdict: str) -> None:
    assert upstream.verdict(scheduler, version) == verdict


def test_the_verdicts_name_every_class_in_the_tables_order() -> None:
    verdicts = upstream.verdicts("0.15.2")
    assert list(verdicts) == list(releases.scheduler_classes())
    assert verdicts["WarmupLR"] == "affected" and verdicts["OneCycle"] == "not affected"


@pytest.mark.parametrize(("scheduler", "version", "params", "keys"), [
    ("WarmupLR", "0.19.3", {"warmup_max_lr": 1e-3}, []),  # a given peak never meets the default's change
    ("WarmupLR", "0.19.3", {}, ["default_peak"]),
    ("WarmupLR", "0.15.2", {"warmup_max_lr": 1e-3}, ["start", "get_lr_before_start"]),
    ("WarmupLR", "0.15.2", {}, ["start", "get_lr_before_start", "default_peak", "default_peak"]),
    ("WarmupDecayLR", "0.19.3", {"total_num_steps": 8}, []),  # its default peak is 0.001 on 0.19.8 too
    ("WarmupDecayLR", "0.15.2", {"total_num_steps": 8}, ["start", "get_lr_before_start"]),
    ("WarmupCosineLR", "0.19.3", {}, []),  # warmup_type defaults to log
    ("WarmupCosineLR", "0.19.3", {"warmup_type": "linear"}, []),
    ("WarmupCosineLR", "0.19.3", {"warmup_type": "cosine"}, ["unknown_warmup_type"]),
    ("WarmupCosineLR", "0.19.2", {"warmup_type": "log"}, ["ratio_past_warmup"]),
    ("WarmupLR", "0.19.4", {}, []), ("OneCycle", "0.15.2", {}, []),
])
def test_the_changes_a_scheduler_built_with_these_params_meets(scheduler: str, version: str,
                                                               params: dict[str, object], keys: list[str]) -> None:
    assert [c.key for c in upstream.backports_for(scheduler, version, params)] == keys


@pytest.mark.parametrize(("scheduler", "never"), [
    ("OneCycle", True), ("LRRangeTest", True), ("WarmupLR", False), ("WarmupDecayLR", False),
    ("WarmupCosineLR", False), ("NotAScheduler", False)])
def test_only_classes_right_on_every_release_are_never_affected(scheduler: str, never: bool) -> None:
    assert upstream.never_affected(scheduler) is never


@pytest.mark.parametrize(("version", "step_lr"), [
    ("0.9.0", releases.StepLr.FLOAT), ("0.18.0", releases.StepLr.FLOAT), ("0.18.1", releases.StepLr.NEW_TENSOR),
    ("0.19.3", releases.StepLr.NEW_TENSOR), ("0.19.4", releases.StepLr.IN_PLACE), (UNTESTED, releases.StepLr.IN_PLACE),
])
def test_what_each_releases_step_leaves_in_a_tensor_lr(version: str, step_lr: str) -> None:
    assert upstream.step_lr(version) == step_lr


def test_the_releases_the_command_line_names() -> None:
    assert (upstream.first_release(upstream.START), upstream.fixed_release()) == ("0.15.3", "0.19.4")


def test_doctors_advice_is_the_changes_that_refuse_a_config() -> None:
    advice: Callable[[str | None, dict[str, Any]], list[str]] = upstream.advice
    assert advice(None, {"warmup_num_steps": 0}) == [] and advice("WarmupLR", {"warmup_num_steps": 5}) == []
    (line,) = advice("WarmupDecayLR", {"warmup_num_steps": 0})
    assert line.startswith("warmup_num_steps=0: DeepSpeed 0.19.3 and newer (#8126) raise ValueError")
