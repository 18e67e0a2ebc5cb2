"""PR #7633 (DeepSpeed 0.18.1): a step keeps a group's tensor lr a tensor (``update_lr`` writes a new one-element
tensor on the group's device), where it wrote a Python float.

Not backported: each step's value is the same up to float32's rounding. The probe sees what the build's step leaves
(``scratch.Scratch.step_lr``), and the patch writes an lr the same way (``schedules.write``); where the probe could
not run, this change's release says it (``leaves``).
"""

from __future__ import annotations

from ..releases import StepLr
from .unit import Change, Elsewhere, NotBackported, NotJudged, NotProbed, Unit

SEEN_BY_THE_PROBE = ("the probe sees what the build's step leaves in a tensor lr (Probed.step_lr), which "
                     "schedules.write follows: not backported, so not a lack")

UNIT = Unit(pr="#7633", release="0.18.1", source="deepspeed/runtime/lr_schedules.py @ v0.18.0 and v0.18.1", changes=(
    Change("tensor_type", "every class", "update_lr",
           "a step keeps a tensor lr a tensor (a new one-element tensor; before: a float)",
           probe=NotProbed(SEEN_BY_THE_PROBE),
           backport=NotBackported("each step's value is the same up to the tensor's rounding (float32: ~1e-8 "
                                  "relative); only the object the group holds differs"),
           judgement=NotJudged("not backported: each step ran at the reference's value up to float32's rounding"),
           cases=Elsewhere("tests/test_roads.py (tensor lrs stay tensors) and tests/test_cases.py's tensor cases: "
                           "the patch writes as the build's step writes"),
           leaves=StepLr.NEW_TENSOR),
))
