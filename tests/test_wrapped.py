"""docs/how-it-works.md's "What is wrapped" table is what the patch wraps: wrapped_targets.WRAPPED, on the installed
release."""

from __future__ import annotations

import functools
import json
from typing import Any

from conftest import run_child

from accelerate_warmup_patch import targets, upstream, wrapped_targets

# where each row's owner lives, as status()["patched"] names it
MODULES = {"deepspeed": "", "DeepSpeedEngine": "deepspeed.runtime.engine.",
           "MultiNodeRunner": "deepspeed.launcher.multinode_runner.",
           "TorchCheckpointEngine": "deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine."}


def labels(version: str, mode: str) -> list[str]:
    """What the table says the patch wraps on this release in this mode, as status()["patched"] lists it."""
    runners = wrapped_targets._RUNNERS
    rows = [*wrapped_targets.wrapped(version, mode), *wrapped_targets.wrapped(version, mode, hook=runners)]
    found = []
    for row in rows:
        if row.target == wrapped_targets.SCHEDULER_METHODS:
            found += [f"deepspeed.runtime.lr_schedules.{c}.{m}" for c, m in upstream.methods_to_fix(version)]
        else:
            found.append(MODULES[row.target.split(".")[0]] + row.target)
    return sorted(found)


def test_every_row_deepspeed_wraps_has_its_way_of_wrapping_in_targets():
    rows = {row.target for row in wrapped_targets.WRAPPED if row.hook == "deepspeed"}
    assert rows == set(targets._WRAPS)


def test_step_mode_alone_wraps_the_optimizer_step_and_nothing_is_wrapped_below_the_floor():
    assert [row.target for row in wrapped_targets.wrapped("0.15.2", "step")][-1] == "DeepSpeedEngine._take_model_step"
    assert "DeepSpeedEngine._take_model_step" not in {row.target for row in wrapped_targets.wrapped("0.15.2", "reset")}
    assert wrapped_targets.wrapped("0.8.3", "reset") == ()
    assert wrapped_targets.wrapped("0.19.8", "off") == ()


@functools.lru_cache(maxsize=1)
def _wrapped_child() -> dict[str, Any]:
    """tests/children/wrapped.py's answer, asked once for the module's tests."""
    proc = run_child("wrapped.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_the_patch_wraps_what_the_table_says_in_every_mode(deepspeed: str) -> None:
    # the conftest's fixture clears ACCELERATE_WARMUP_PATCH*: each mode is the child's apply(mode=...)
    patched = _wrapped_child()
    for mode in ("reset", "step", "warn"):
        assert patched[mode] == labels(deepspeed, mode), mode


def test_the_probe_finds_on_the_installed_release_what_the_table_says_it_lacks(deepspeed: str) -> None:
    """On a release the probe and the table agree (every release of the table: tests/matrix.py checks the same)."""
    seen = _wrapped_child()["probe"]
    assert seen["probed"] == seen["table"]
    assert seen["table"] == sorted(map(list, {(c.scheduler, c.pr) for name in ("WarmupLR", "WarmupCosineLR")
                                              for c in upstream.missing_backports(name, deepspeed)}))
    assert seen["differs"] == []
