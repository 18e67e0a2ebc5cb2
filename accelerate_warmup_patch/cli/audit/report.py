"""One run's report: its fields, in the order every output writes them (docs/audit.md's field table is checked
against this list), the plain row each writer is given, and the lr text the writers and the verdicts' reasons use."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Union

from .verdicts import UNKNOWN, UNREADABLE

# An lr as a report holds it: a number, a string for NaN and the infinities (as the record writes them), or None
# where the files do not say.
Lr = Union[float, str, None]


@dataclass
class Report:
    """What the audit found of one run, filled in as it is judged (``run_report``, ``chain``, ``saves``)."""

    path: str
    engine: str | None = None  # which of the engines saved in one folder (accelerate's two models), where several
    checkpoint: str | None = None
    deepspeed_version: str | None = None
    step0_checkpoint: str | None = None
    step0_deepspeed_version: Any = None  # as a record names it: read, not checked
    scheduler: str | None = None
    params: dict[str, Any] | None = None
    # the ds_config files read outside the checkpoint (an engine given a path saves the path alone), as they are now:
    # they may make the verdict worse or unknown, never clear it
    config_files: list[str] = field(default_factory=list)
    optimizer_lr: Lr = None
    param_groups: int | None = None
    global_steps: Any = None
    last_batch_iteration: Any = None
    step0_lr: Lr = None
    newest_step0_lr: Lr = None
    step0_lrs: list[Lr] | None = None
    newest_step0_lrs: list[Lr] | None = None
    record: dict[str, Any] | None = None
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: str = UNKNOWN
    why: str = ""

    def unreadable(self, why: str) -> Report:
        self.verdict, self.why = UNREADABLE, why
        return self

    def row(self) -> dict[str, Any]:
        """The report as the writers write it: every field, in this order."""
        return {name: getattr(self, name) for name in FIELDS}


FIELDS = tuple(item.name for item in fields(Report))


def lr_text(value: Lr) -> str:
    """An lr as the report shows it: ``?`` where unknown; NaN and infinities (strings in the JSON) as such."""
    if value is None:
        return "?"
    return value if isinstance(value, str) else f"{value:g}"


def lrs_text(per_group: list[Lr] | None, first: Lr) -> str:
    if per_group:
        return ", ".join(lr_text(v) for v in per_group)
    return lr_text(first)
