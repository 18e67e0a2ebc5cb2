"""What the patch wraps, on which DeepSpeed releases, in which modes, and why (``WRAPPED``): the rows ``targets.py``
follows and docs/how-it-works.md's "What is wrapped" table is generated from. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .releases import DEEPSPEED_FLOOR, Span, parse

# targets.py wraps what these rows name on the running release and mode (launcher.py the runner's, at its
# module's import), and docs/how-it-works.md's "What is wrapped" table is generated from them (tests/tables.py).
# accelerate's own code is not wrapped: accelerate and the HF Trainer build their engines through
# deepspeed.initialize (accelerate's utils/deepspeed.py and Accelerator._prepare_deepspeed @ v0.29.3..v1.16.0).

ARMED = ("reset", "step", "warn")  # settings.Mode's values while the patch is armed
SCHEDULER_METHODS = "the scheduler methods of methods_to_fix"  # one row for what the upstream changes decide
_RUNNERS = "deepspeed.launcher.multinode_runner"  # launcher.MODULE


@dataclass(frozen=True)
class Wrapped:
    """A function or method the patch wraps: on which DeepSpeed releases, in which modes, and why."""

    target: str  # as a user names it: deepspeed.initialize, DeepSpeedEngine.load_checkpoint
    span: Span
    modes: tuple[str, ...]
    why: str
    hook: str = "deepspeed"  # the module whose import the patch waits for to wrap it

    def wraps(self, deepspeed_version: str, mode: str) -> bool:
        return mode in self.modes and self.span.contains(parse(deepspeed_version))


WRAPPED: tuple[Wrapped, ...] = (
    Wrapped(SCHEDULER_METHODS, Span(DEEPSPEED_FLOOR, None), ARMED,
            "the fix (backport.py): each method a backported change changed, on the releases that lack it"),
    Wrapped("deepspeed.initialize", Span(DEEPSPEED_FLOOR, None), ARMED,
            "settles a scheduler built before the patch was applied; accelerate and the HF Trainer build through it"),
    Wrapped("DeepSpeedEngine.load_checkpoint", Span(DEEPSPEED_FLOOR, None), ARMED,
            "a load that did not restore the optimizer's lr: each group gets the restored scheduler's lr (where the "
            "release builds the class wrong, or in step mode)"),
    Wrapped("DeepSpeedEngine.save_checkpoint", Span(DEEPSPEED_FLOOR, None), ARMED,
            "writes the record accelerate_warmup_patch.json beside each checkpoint (docs/mark.md)"),
    Wrapped("TorchCheckpointEngine.save", Span(DEEPSPEED_FLOOR, None), ARMED,
            "notes the states files each rank saved itself (told to the record's writer), so that a record is not "
            "bound to files another job saved into the same tag at the same moment (docs/mark.md)"),
    Wrapped("DeepSpeedEngine._take_model_step", Span(DEEPSPEED_FLOOR, None), ("step",),
            "steps a fresh scheduler once, just before its engine's first optimizer step (OPTIMIZER_STEPS)"),
    Wrapped("MultiNodeRunner.__init__", Span(DEEPSPEED_FLOOR, None), (*ARMED, "off"),
            "carries ACCELERATE_WARMUP_PATCH, off too, to every node of a multi-node launch (launcher.py)",
            hook=_RUNNERS),
)


def wrapped(deepspeed_version: str, mode: str, hook: str = "deepspeed") -> tuple[Wrapped, ...]:
    """The rows of WRAPPED that the import of ``hook`` wraps on this release in this mode."""
    return tuple(row for row in WRAPPED if row.hook == hook and row.wraps(deepspeed_version, mode))
