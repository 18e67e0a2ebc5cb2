"""What a build's ``load_checkpoint`` really restored: the scheduler, the optimizer's lr, both or neither.

The arguments do not say it. Upstream's ``_load_checkpoint`` restores the scheduler only outside
``load_module_only`` (engine.py @ v0.15.2, v0.19.8), while EleutherAI's DeeperSpeed restores it under
``load_module_only`` too (deepspeed/runtime/engine.py, ``_load_checkpoint``, at tag v3.0 = 91d1c55 and main =
65d9f99, version 0.16.5; its v2.0, 0.8.3, does not); ZeRO's elastic checkpoints restore the optimizer's state
but not its lr (stage_1_and_2.py's ``_restore_base_optimizer_state`` @ v0.15.2). So the load net looks at the
engine before and after the original load (``look``) and compares (``restored``): the scheduler was restored
where its position moved (or it is another object), the optimizer's lr where any group is another dict, holds
another lr object or another value (torch's ``Optimizer.load_state_dict`` replaces every group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Look:
    """The engine's scheduler and its optimizer's groups at one moment (references, so that no id is reused)."""

    scheduler: object
    position: object  # the scheduler's last_batch_iteration
    groups: tuple[object, ...]  # the optimizer's group dicts
    lrs: tuple[object, ...]  # each group's lr object
    values: tuple[float, ...]  # each group's lr as a float


@dataclass(frozen=True)
class Restored:
    """What a load restored, as observed."""

    scheduler: bool
    optimizer_lr: bool

    @property
    def aligns(self) -> bool:
        """A restored scheduler beside an optimizer whose lr the load left: the one case the load net aligns."""
        return self.scheduler and not self.optimizer_lr


def look(engine: Any) -> Look | None:
    """The engine's scheduler and its optimizer's lrs now; None where it has no scheduler."""
    scheduler = getattr(engine, "lr_scheduler", None)
    if scheduler is None:
        return None
    groups = tuple(scheduler.optimizer.param_groups)
    lrs = tuple(group["lr"] for group in groups)
    values = tuple(float(lr.item()) if hasattr(lr, "item") else float(lr) for lr in lrs)
    return Look(scheduler, getattr(scheduler, "last_batch_iteration", None), groups, lrs, values)


def restored(before: Look, after: Look) -> Restored:
    """What the load between ``before`` and ``after`` restored."""
    scheduler = after.scheduler is not before.scheduler or after.position != before.position
    optimizer_lr = len(after.groups) != len(before.groups) or any(
        new is not old for new, old in zip(after.groups + after.lrs, before.groups + before.lrs)) or \
        after.values != before.values
    return Restored(scheduler, optimizer_lr)
