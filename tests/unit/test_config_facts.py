"""What doctor --config and audit read from the guard table for one scheduler's params (cli/config_facts.py)."""

from __future__ import annotations

from typing import Any

import pytest

from accelerate_warmup_patch.cli import config_facts


@pytest.mark.parametrize(("scheduler", "version", "params", "labels"), [
    ("WarmupLR", "0.15.2", None, ["start (#6597)", "get lr before start (#6597)", "default peak (#8171)"]),
    ("WarmupLR", "0.15.2", {"warmup_max_lr": 1e-3}, ["start (#6597)", "get lr before start (#6597)"]),
    ("WarmupLR", "0.17.2", {}, ["default peak (#8171)"]),  # the newest row per key: #8171, not #7360
    ("WarmupLR", "0.19.4", None, []), ("OneCycle", "0.15.2", None, []),
    ("WarmupDecayLR", "0.19.3", {"warmup_max_lr": 1e-3}, []),
    ("WarmupCosineLR", "0.19.0", None, ["ratio past warmup (#8142)", "unknown warmup type (#8151)"]),
    ("WarmupCosineLR", "0.19.0", {"warmup_type": "linear"}, ["ratio past warmup (#8142)"]),
])
def test_the_differences_a_config_meets_newest_row_per_key(scheduler: str, version: str,
                                                           params: dict[str, Any] | None, labels: list[str]) -> None:
    assert [config_facts.label(c) for c in config_facts.differences(scheduler, version, params)] == labels


@pytest.mark.parametrize("value", [0, -1, 1.5, "5", True, None])
@pytest.mark.parametrize("scheduler", ["WarmupLR", "WarmupDecayLR", "WarmupCosineLR"])
def test_a_warmup_num_steps_a_newer_release_refuses_is_named_with_its_fix(scheduler: str, value: object) -> None:
    (line,) = config_facts.refused_later(scheduler, {"warmup_num_steps": value})
    assert line.startswith(f"warmup_num_steps={value}: DeepSpeed 0.19.3 and newer (#8126) raise ValueError")
    assert f"building {scheduler}" in line and "set it to 1 or more" in line
    assert line.endswith("max(2, warmup_num_steps) steps")
    assert (" (an int)" in line) is (not isinstance(value, int))


@pytest.mark.parametrize(("scheduler", "params"), [
    ("WarmupLR", {"warmup_num_steps": 1}), ("WarmupLR", {"warmup_num_steps": 1000}),
    ("WarmupLR", {"warmup_num_steps": "auto"}),  # the Trainer fills it in
    ("WarmupLR", {}), (None, {"warmup_num_steps": 0}),
    ("OneCycle", {"warmup_num_steps": 0}), ("LRRangeTest", {"warmup_num_steps": -1}),  # not validated there
])
def test_what_no_release_refuses_says_nothing(scheduler: str | None, params: dict[str, Any]) -> None:
    assert config_facts.refused_later(scheduler, params) == []
