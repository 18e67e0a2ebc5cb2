"""Scheduler cases beyond the trajectories of test_core, each as a user meets it (tests/cases.py).

Patched, every release gives what DeepSpeed 0.19.8 gives unpatched (``golden_cases.json``); where a
release lacks the change a case shows, it gives something else unpatched, so each test can fail.
"""

from __future__ import annotations

import json
import os

import fresh_process
import pytest
from conftest import HERE, installed, run_python

from accelerate_warmup_patch import releases, upstream

DEEPSPEED = installed("deepspeed")
GOLDEN_CASES = json.loads((HERE / "golden_cases.json").read_text())
NEWEST = GOLDEN_CASES["cases"]
LATE = "late_import_raw_engine"
# the backported changes each case shows, as their units name it (accelerate_warmup_patch/upstream/); none: the case
# shows nothing to backport (NOTHING_TO_BACKPORT, tests/unit/test_upstream.py)
SHOWS = {name: [c for c in upstream.CHANGES if c.backported and isinstance(c.cases, tuple) and name in c.cases]
         for name in NEWEST}
NOTHING_TO_BACKPORT = {"restored_lr_warmup", "restored_lr_one_cycle"}
# a tensor lr is filled in place from 0.19.4 (PR #8202, not backported): earlier releases' steps write
# Python floats, so these steps differ from the newest only by the tensor's float32 rounding
ROUNDED = {"tensor_lr_warmup"}
# one group: 0.15.3-0.18.9 start group 0 of a WarmupCosineLR already (Start.SETS_GROUP_0_ONLY)
ONE_COSINE_GROUP = {"tensor_lr_cosine", "subclass_with_a_floored_cosine"}
TOGETHER = [name for name in SHOWS if name != LATE]


def run_cases(*names: str, patch: bool) -> dict:
    args = [str(HERE / "cases.py"), *names, *(["--patch"] if patch else [])]
    proc = fresh_process.run(args, dict(os.environ), cwd=str(HERE), timeout=900)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert proc.returncode == 0 and line, proc.stderr[-4000:]
    return {**json.loads(line[len("RESULT "):]), "stderr": proc.stderr}


@pytest.fixture(scope="module")
def unpatched() -> dict:
    return run_cases(*TOGETHER, patch=False)


@pytest.fixture(scope="module")
def patched() -> dict:
    return run_cases(*TOGETHER, patch=True)


def differs_unpatched(name: str) -> bool:
    """Where this release, unpatched, gives something else than the newest release for this case."""
    if name in ONE_COSINE_GROUP:
        return releases.start_fact("WarmupCosineLR", DEEPSPEED).value is releases.Start.LEAVES_OPTIMIZER_LR
    return any(upstream.lacks(change.key, change.scheduler, DEEPSPEED) for change in SHOWS[name])


def test_an_unknown_change_key_is_an_error_not_false():
    with pytest.raises(KeyError, match="no change 'strat'"):
        upstream.lacks("strat", "WarmupLR", DEEPSPEED)
    assert {"start", "default_peak", "get_lr_before_start", "ratio_past_warmup"} <= upstream.CHANGE_KEYS


def test_every_case_shows_a_backported_change_or_nothing_to_backport():
    assert {name for name, shown in SHOWS.items() if not shown} == NOTHING_TO_BACKPORT


@pytest.mark.skipif(GOLDEN_CASES["deepspeed"] != DEEPSPEED, reason=f"golden from {GOLDEN_CASES['deepspeed']}")
def test_golden_cases_are_the_newest_release_unpatched(unpatched):
    assert unpatched["results"] == {name: NEWEST[name] for name in TOGETHER}


@pytest.mark.parametrize("name", [n for n in TOGETHER if n not in ROUNDED])
def test_patched_equals_the_newest_release(patched, unpatched, name):
    assert patched["results"][name] == NEWEST[name]
    if differs_unpatched(name):  # the case can fail: unpatched, this release gives something else
        assert unpatched["results"][name] != NEWEST[name]
    else:  # nothing to backport here: patched equals unpatched
        assert unpatched["results"][name] == NEWEST[name]


@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_a_tensor_lr_equals_the_newest_release_up_to_its_float32_rounding(patched, name):
    got, newest = patched["results"][name], NEWEST[name]
    assert len(got) == len(newest)
    for row, newest_row in zip(got, newest):
        assert row == pytest.approx(newest_row, rel=1e-6)


def test_patched_the_cases_warn_of_nothing(patched):
    lines = [x for x in patched["stderr"].splitlines() if x.startswith("[accelerate_warmup_patch] WARNING")]
    assert lines == []


@pytest.mark.parametrize("patch", [False, True], ids=["unpatched", "patched"])
def test_applied_after_a_raw_engine_was_built_the_engine_is_still_fixed(patch):
    ran = run_cases(LATE, patch=patch)
    if patch:
        assert ran["results"][LATE] == NEWEST[LATE]
        assert ran["status"]["fixes_applied"] == (1 if differs_unpatched(LATE) else 0)
    elif differs_unpatched(LATE):
        assert ran["results"][LATE] != NEWEST[LATE]


def test_the_engine_has_the_optimizer_step_where_step_mode_acts(patched):
    """The guard table names the method of this release's engine that runs the optimizer step (the version
    matrix runs this file on every release): it is wrapped, so step mode can look just before the first one."""
    method = releases.optimizer_step_method(DEEPSPEED)
    label = f"deepspeed.runtime.engine.DeepSpeedEngine.{method}"
    assert label not in patched["status"]["patched"], patched["status"]  # reset mode: nothing that cannot act
    proc = run_python("import json, accelerate_warmup_patch as awp\nawp.apply('step')\nimport deepspeed\n"
                      "print(json.dumps(awp.status()['patched']))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert label in json.loads(proc.stdout.strip().splitlines()[-1])
