"""The rule tests/test_audit_histories.py checks after each step of a generated run history, and its shrinking
(tests/histories.py), on their own: each break is found, and a failing history shrinks to the steps that matter."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
import histories
from histories import Save, World


def _world(tmp_path: Path, *saves: Save) -> World:
    return World(tmp_path, [{2 + index: save for index, save in enumerate(saves)}])


def _report(tmp_path: Path, verdict: str) -> dict[str, list[dict[str, str]]]:
    return {str(tmp_path / "run0"): [{"verdict": verdict, "why": "because"}]}


def test_each_break_of_the_rule_is_found(tmp_path: Path) -> None:
    hurt = _world(tmp_path, Save([0.0], proven=True), Save([1e-3], proven=False))
    assert "not affected, but global_step3" in histories.broken(hurt, _report(tmp_path, "not affected"))[0]
    assert histories.broken(hurt, _report(tmp_path, "unknown")) == []
    honest = _world(tmp_path, Save([0.0], proven=False, origin=1, fresh=True))
    assert "affected, but every save" in histories.broken(honest, _report(tmp_path, "affected"))[0]
    # its start deleted (or in another folder): the audit assumes the earliest save here ran step 0 (documented)
    resumed = _world(tmp_path, Save([0.0], proven=False, origin=1))
    assert histories.broken(resumed, _report(tmp_path, "affected")) == []
    assert histories.broken(honest, _report(tmp_path, "unknown")) == []
    proven = _world(tmp_path, Save([0.0], proven=True), Save([0.0], proven=True))
    assert "a bound record proves" in histories.broken(proven, _report(tmp_path, "unknown"))[0]
    assert "unreadable" in histories.broken(proven, _report(tmp_path, "unreadable"))[0]
    assert histories.broken(proven, _report(tmp_path, "not affected")) == []


def test_a_failing_history_shrinks_to_the_steps_that_fail() -> None:
    steps = histories.history(random.Random(1), 12)
    culprit = {"op": "rerun", "run": 0, "mode": "off"}
    steps[7] = culprit
    smallest = histories.shrunk(steps, lambda trial: culprit in trial)
    assert smallest == [steps[0], culprit]


def test_histories_are_plain_data_of_the_steps_the_docs_name() -> None:
    steps = histories.history(random.Random(2), 40)
    assert steps[0]["op"] == "start" and {step["op"] for step in steps} <= {"start", "resume", "rerun", "copy",
                                                                            "delete"}
    assert all(step.get("mode", "off") in histories.MODES for step in steps)
