"""PR #8202 (DeepSpeed 0.19.4): a step fills a group's tensor lr in place, and WarmupCosineLR's org_lrs are copies
(0.12.3-0.19.3 held the groups' own lr objects).

Not backported: every step's write would have to be replaced. The probe sees what the build's step leaves
(``scratch.Scratch.step_lr``), and the patch writes an lr the same way, never in place where the build's step is not
(``schedules.write``): an in-place write would change those org_lrs, the whole schedule.
"""

from __future__ import annotations

from ..releases import StepLr
from .pr7633 import SEEN_BY_THE_PROBE
from .unit import Change, Elsewhere, NotBackported, NotJudged, NotProbed, Unit

UNIT = Unit(pr="#8202", release="0.19.4", source="deepspeed/runtime/lr_schedules.py @ v0.19.3 and v0.19.4", changes=(
    Change("tensor_in_place", "every class", "update_lr",
           "a step fills a tensor lr in place; WarmupCosineLR's org_lrs are copies",
           probe=NotProbed(SEEN_BY_THE_PROBE),
           backport=NotBackported("every step's write would have to be replaced; each step's value is the same up "
                                  "to the tensor's rounding, but an optimizer step that captured the tensor "
                                  "(torch.compile, CUDA graphs) keeps reading the old one"),
           judgement=NotJudged("not backported: each step ran at the reference's value up to float32's rounding"),
           cases=Elsewhere("tests/test_cases.py's ROUNDED: tensor_lr_warmup equals the reference up to float32's "
                           "rounding, since earlier steps write floats"),
           leaves=StepLr.IN_PLACE),
))
