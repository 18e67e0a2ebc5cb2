"""A shared image: apply() and remove() from several threads, and other tools' wrappers on the same functions.

Each test runs in a fresh interpreter that imports the real deepspeed and accelerate first and wraps their real
classes. The other tools are wrapped the ways they wrap: OpenTelemetry's instrumentations and ddtrace's
integrations with wrapt (``wrap_function_wrapper``), undone by ``setattr(owner, name, f.__wrapped__)``; a team's
own wrapper with ``functools.wraps`` and ``setattr``, undone by putting back what it saved.
"""

from __future__ import annotations

import json

import pytest
from conftest import installed, run_child

installed("deepspeed")  # every test here runs real DeepSpeed: without it the module skips

# Each scenario is a function of tests/children/coexistence.py. The seam: a layer of ours is an instance of
# the package's wrapper class, counted down the __wrapped__ chain.


def _run(scenario: str, *args: str) -> dict:
    proc = run_child("coexistence.py", scenario, *args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_apply_and_remove_from_two_threads_restore_every_original_and_apply_adds_one_layer():
    got = _run("apply_and_remove_from_two_threads_restore_every_original_and_apply_adds_one_layer")
    assert got["errors"] == []
    assert got["restored"], "remove() left a wrapper in place"
    assert got["layers"] and set(got["layers"].values()) == {1}, got["layers"]
    assert len(got["layers"]) == len(got["patched"])
    assert not [line for line in got["said"] if "wrapped again" in line or "another tool" in line], got["said"]


def test_two_threads_applying_at_once_wrap_each_target_once():
    got = _run("two_threads_applying_at_once_wrap_each_target_once")
    assert got["max"] == 1
    assert not [line for line in got["said"] if "wrapped again" in line], got["said"]


def test_remove_takes_out_our_layer_under_a_wrapt_tools_and_apply_adds_one_on_top():
    got = _run("remove_takes_out_our_layer_under_a_wrapt_tools_and_apply_adds_one_on_top")
    assert got["out"] == [0] * len(got["expected"])
    assert got["their_calls"] == 1  # their wrapper still works with ours gone
    assert got["after_apply"] == got["expected"]
    assert got["on_top"] == bool(got["expected"][1])
    assert got["patched_lr"] == 0.0  # warmup_min_lr, as on the newest release
    assert got["calls"] == 2
    assert not [line for line in got["said"] if "wrapped again" in line], got["said"]


def test_a_plain_wrapper_over_ours_keeps_ours_passing_through_and_apply_reuses_it():
    got = _run("a_plain_wrapper_over_ours_keeps_ours_passing_through_and_apply_reuses_it")
    assert got["held"] == got["expected"]
    assert got["removed_lr"] == (1e-3 if got["needs_fix"] else 0.0)  # passes through: the release's own lr
    assert got["after_apply"] == got["expected"]
    assert got["patched_lr"] == 0.0
    assert got["calls"] == 2
    held_lines = [line for line in got["said"] if "calls this patch's layer directly" in line]
    assert len(held_lines) == sum(got["expected"]), got["said"]
    assert not [line for line in got["said"] if "wrapped again" in line], got["said"]


@pytest.mark.parametrize("tool", ["otel_wrap", "plain_wrap"])
def test_a_tool_under_ours_keeps_working_after_remove(tool):
    got = _run("a_tool_under_ours_keeps_working_after_remove", tool)
    assert got["stacked"] == got["expected"]
    assert got["after"] == [0] * len(got["expected"])
    assert got["theirs_on_top"]
    assert got["calls"] == 1
    assert not [line for line in got["said"] if "wrapped again" in line], got["said"]


def test_a_tool_that_strips_our_layer_is_named_and_the_initialize_net_still_settles():
    got = _run("a_tool_that_strips_our_layer_is_named_and_the_initialize_net_still_settles")
    # WarmupLR.__init__ is wrapped only on a release that builds it wrong
    assert got["lost"] == (["deepspeed.runtime.lr_schedules.WarmupLR.__init__"] if got["needs_fix"] else [])
    assert got["lrs"] == got["newest"]  # deepspeed.initialize's net settled what the constructor's fix missed
    assert got["left"] == 0
    assert not [line for line in got["said"] if "wrapped again" in line], got["said"]
    truth = [line for line in got["said"] if "had already taken this patch's layer out" in line]
    assert len(truth) == int(got["needs_fix"]), got["said"]
