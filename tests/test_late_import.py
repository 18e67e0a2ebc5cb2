"""A late import (the package imported after a scheduler was built) never makes a run worse than the bug.

A scheduler built before the patch and set to a later iteration without a step (``load_state_dict``, or
``last_batch_iteration=`` given to the constructor) looks the same to the patch either way, but the newest
release starts the two differently (measured on 0.19.8: built fresh then resumed, step 0 runs at
``warmup_min_lr``; built at the iteration, at the optimizer's lr). The patch leaves its lr as this release
made it and says so in one warning; ``status()`` says which scheduler it could not fix.
"""

from __future__ import annotations

import json

import pytest
from conftest import installed, run_child

from accelerate_warmup_patch import releases, upstream

DEEPSPEED = installed("deepspeed")
BUGGY = upstream.lacks("start", "WarmupLR", DEEPSPEED)



@pytest.mark.parametrize("road", ["load", "argument", "engine"])
def test_a_scheduler_resumed_before_a_late_import_keeps_its_lr_and_is_named_in_one_warning(road):
    proc = run_child("resumed.py", road)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert ran["late"] == ran["unpatched"]  # never worse than the bug: a restored lr is never overwritten
    assert ran["status"]["fixes_applied"] == 0
    warnings = [line for line in ran["said"] if line.startswith("WARNING")]
    if not BUGGY:  # this release starts it where the newest does: nothing to say
        assert warnings == [] and ran["status"]["not_fixed"] == []
        return
    assert ran["late"][0] == [1e-3]
    assert len(warnings) == 1, ran["said"]
    assert "WarmupLR" in warnings[0] and "iteration 2" in warnings[0] and "[0.001]" in warnings[0], warnings
    assert f"DeepSpeed {releases.BEHAVIOR_REFERENCE}" in warnings[0] and "before building it" in warnings[0], warnings
    assert len(ran["status"]["not_fixed"]) == 1 and "WarmupLR" in ran["status"]["not_fixed"][0]
