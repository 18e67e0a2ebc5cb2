"""PR #7969 (DeepSpeed 0.19.0): WarmupCosineLR starts every group at 0.0, as #6597 did for WarmupLR.

0.15.3 (#6597) already had WarmupCosineLR's constructor write its ``get_lr()``, but ``get_lr()`` at -1 returned
[0.0], and ``zip()`` stopped at group 0: groups 1+ kept the optimizer's lr. 0.19.0's ``get_lr()`` before the first
step returns 0.0 per group and ``get_lr_ratio()`` 0.0 (was [0.0]). The keys and the start write are #6597's.
"""

from __future__ import annotations

from typing import Any

from .. import reference
from ..scratch import is_number
from .pr6597 import GET_LR_BEFORE_START, START, START_WRITE, get_lr_differs, starts_elsewhere, write_start
from .unit import BEFORE_START, Answer, AtConstruction, AtStep0, Change, Check, Unit


def _zeros(scheduler: Any) -> Any:
    return reference.lr_before_start(scheduler, "WarmupCosineLR")


def _zero_ratio(scheduler: Any) -> float:
    return 0.0


UNIT = Unit(pr="#7969", release="0.19.0", source="deepspeed/runtime/lr_schedules.py @ v0.18.9 and v0.19.0", changes=(
    Change(START, "WarmupCosineLR", "__init__",
           "the constructor starts every group at 0.0 (0.15.3-0.18.9: group 0 only)",
           probe=starts_elsewhere("WarmupCosineLR"),
           backport=AtConstruction(START_WRITE, write_start, last=True),
           judgement=AtStep0(),
           cases=("tensor_lr_cosine", "tensor_lr_cosine_two_groups", "subclass_with_a_floored_cosine",
                  "reported_before_the_first_step")),
    Change(GET_LR_BEFORE_START, "WarmupCosineLR", "get_lr",
           "get_lr() before the first step returns 0.0 per group (was [0.0])",
           probe=get_lr_differs("WarmupCosineLR"),
           backport=Answer("get_lr() returns 0.0 per group while last_batch_iteration < 0", BEFORE_START, _zeros,
                           original_too=True, when=" before its first step"),
           judgement=AtStep0(),
           cases=("reported_before_the_first_step",)),
    Change("ratio_before_start", "WarmupCosineLR", "get_lr_ratio",
           "get_lr_ratio() before the first step returns 0.0 (was [0.0])",
           probe=Check(lambda scratch: not is_number(scratch.built("WarmupCosineLR").get_lr_ratio(), 0.0)),
           backport=Answer("get_lr_ratio() returns 0.0 while last_batch_iteration < 0", BEFORE_START, _zero_ratio,
                           original_too=True),
           judgement=AtStep0(),
           cases=("reported_before_the_first_step",)),
))
