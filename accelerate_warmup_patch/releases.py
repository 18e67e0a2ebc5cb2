"""The version guard table: what each DeepSpeed and accelerate release does, as data, and its one lookup.

Every row names where its fact came from: the release's source at its tag, or a real run on
this project's CI machine (CPU, torch 2.13). Its other rooms hold the vendor builds whose code is known
(``vendor_builds.py``), each multi-node runner's exports (``multinode_runners.py``) and what the patch wraps
(``wrapped_targets.py``). With the upstream changes (``upstream/``: each change DeepSpeed made to
its schedulers, one unit per pull request), the table is the single source for the patch's decisions, ``doctor``
and ``status()``, the generated tables of README.md, docs/how-it-works.md and docs/matrix.md (``tests/tables.py``)
and the version matrix's checks (``tests/matrix.py``). The releases the matrix installs are test tooling
(``tests/tiers.py``). Standard library only.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar


class Start(enum.Enum):
    """What a scheduler does to the optimizer's lr when it is built (``last_batch_iteration=-1``)."""

    LEAVES_OPTIMIZER_LR = "leaves the optimizer's lr"
    SETS_GROUP_0_ONLY = "sets group 0 only"
    SETS_EVERY_GROUP = "sets every group"


class MaxLrDefault(enum.Enum):
    """WarmupLR's peak lr when the config gives no ``warmup_max_lr``."""

    CONSTANT = "0.001 for every group"
    GROUP_0 = "group 0's lr for every group"
    EACH_GROUP = "each group's own lr"


@dataclass(frozen=True)
class Span:
    """An inclusive range of releases of one framework; ``last=None`` means "up to ``newest``, and on":
    ``newest`` is the newest release of that framework the table was read at (None: DeepSpeed's)."""

    first: str
    last: str | None
    newest: str | None = None

    def contains(self, version: tuple[int, ...]) -> bool:
        if version < parse(self.first):
            return False
        return self.last is None or version <= parse(self.last)

    def __str__(self) -> str:
        return f"{self.first} to {self.last or self.newest or NEWEST_DEEPSPEED}"


Value = TypeVar("Value")


@dataclass(frozen=True)
class Fact(Generic[Value]):
    """One row of the table: what ``subject`` (a class, a method) does on the releases of ``span``, and
    where that was read. Every table below is a tuple of these, and ``row`` is its one lookup."""

    subject: str
    span: Span
    value: Value
    source: str


def rows(table: tuple[Fact[Value], ...], deepspeed_version: str, subject: str | None = None) -> list[Fact[Value]]:
    """The rows of ``table`` whose span holds this release (about ``subject``, when given), in the table's order."""
    parsed = parse(deepspeed_version)
    return [fact for fact in table if fact.span.contains(parsed) and subject in (None, fact.subject)]


def row(table: tuple[Fact[Value], ...], deepspeed_version: str, subject: str | None = None) -> Fact[Value] | None:
    """The first row whose span holds this release (about ``subject``, when given); None if the table has none.
    An untested release falls in the newest row (``last=None``): it is assumed to hold."""
    found = rows(table, deepspeed_version, subject)
    return found[0] if found else None


def installed(distribution: str) -> str | None:
    """The release of ``distribution`` in this process: the imported module's ``__version__`` when it
    is imported (what runs), else the installed metadata's (nothing is imported); None if absent."""
    import sys

    version = getattr(sys.modules.get(distribution.replace("-", "_")), "__version__", None)
    if version:
        return str(version)
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=128)  # the audit asks the table of each run's release many times
def parse(version: str) -> tuple[int, ...]:
    """``"0.15.3+abc"`` -> ``(0, 15, 3)``; pre-release and local parts are ignored."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if match is None:
        raise ValueError(f"not a release version: {version!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def release_number(version: str) -> str:
    """The number of the release ``version`` names, alone: ``"0.15.3+abc"`` -> ``"0.15.3"``."""
    return ".".join(map(str, parse(version)))


def is_release(version: str) -> bool:
    """True for a release's number as published (``0.15.2``); False with a local part (``+abc``, ``+hpu…``) or a
    dev, pre or post suffix: such a build is not the release it names (pip install from git, a cherry-pick, a
    vendor's fork), and its code may differ from that release's."""
    return re.fullmatch(r"\s*v?\d+(?:\.\d+)*\s*", version) is not None


def between_rows(version: str) -> bool:
    """True for a number that falls between two rows of a scheduler class (``0.18.10``: WarmupCosineLR's rows end at
    0.18.9 and start again at 0.19.0): no release of that number was read, so the table does not know its code."""
    parsed = parse(version)
    for scheduler in dict.fromkeys(fact.subject for fact in SCHEDULER_STARTS):
        spans = [fact.span for fact in SCHEDULER_STARTS if fact.subject == scheduler]
        if not any(span.contains(parsed) for span in spans) and any(parse(span.first) > parsed for span in spans) \
                and any(span.last is not None and parse(span.last) < parsed for span in spans):
            return True
    return False


def not_the_release(version: str) -> str | None:
    """Why this version's number says nothing sure about its code, in a few words ("a build, not the release
    0.15.3"); None for the number of a release the table was read at."""
    number = release_number(version)
    if not is_release(version):
        return f"a build, not the release {number}"
    if between_rows(version):
        return "a number between two releases the table was read at, no release it knows"
    return None


# DeepSpeed -------------------------------------------------------------------------------

DEEPSPEED_FLOOR = "0.9.0"  # the oldest release whose lr_schedules.py this table was read from
NEWEST_DEEPSPEED = "0.19.8"  # the newest release read and run; newer ones are "untested"
BEHAVIOR_REFERENCE = NEWEST_DEEPSPEED  # the patch backports this release's behavior

_LR_SCHEDULES = "deepspeed/runtime/lr_schedules.py"
_RUN = "real engine run, CPU, torch 2.13"

# what each scheduler class does to the optimizer's lr when it is built
SCHEDULER_STARTS: tuple[Fact[Start], ...] = (
    Fact("WarmupLR", Span("0.9.0", "0.15.2"), Start.LEAVES_OPTIMIZER_LR,
         f"{_LR_SCHEDULES} @ v0.9.0..v0.15.2: __init__ never calls update; {_RUN} on 0.14.4, 0.15.2"),
    Fact("WarmupLR", Span("0.15.3", None), Start.SETS_EVERY_GROUP,
         f"{_LR_SCHEDULES} @ v0.15.3 (PR #6597): update_lr(groups, min_lrs) at -1; {_RUN} on 0.15.3+"),
    Fact("WarmupDecayLR", Span("0.9.0", "0.15.2"), Start.LEAVES_OPTIMIZER_LR,
         f"{_LR_SCHEDULES} @ v0.9.0..v0.15.2: inherits WarmupLR.__init__"),
    Fact("WarmupDecayLR", Span("0.15.3", None), Start.SETS_EVERY_GROUP,
         f"{_LR_SCHEDULES} @ v0.15.3: inherits WarmupLR.__init__"),
    Fact("WarmupCosineLR", Span("0.12.3", "0.15.2"), Start.LEAVES_OPTIMIZER_LR,
         f"{_LR_SCHEDULES} @ v0.12.3 (class added)..v0.15.2: __init__ never calls update"),
    Fact("WarmupCosineLR", Span("0.15.3", "0.18.9"), Start.SETS_GROUP_0_ONLY,
         f"{_LR_SCHEDULES} @ v0.15.3..v0.18.9: get_lr() at -1 returns [0.0], zip() stops at group 0"),
    Fact("WarmupCosineLR", Span("0.19.0", None), Start.SETS_EVERY_GROUP,
         f"{_LR_SCHEDULES} @ v0.19.0 (PR #7969): get_lr() at -1 returns 0.0 per group"),
    Fact("OneCycle", Span("0.9.0", None), Start.SETS_EVERY_GROUP,
         f"{_LR_SCHEDULES} @ v0.9.0..v0.19.8: _initialize_lr sets cycle_min_lr at -1"),
    Fact("LRRangeTest", Span("0.9.0", None), Start.SETS_EVERY_GROUP,
         f"{_LR_SCHEDULES} @ v0.9.0..v0.19.8: __init__ sets lr_range_test_min_lr at -1"),
)

# WarmupLR's peak lr when the config gives no warmup_max_lr
WARMUP_MAX_LR_DEFAULTS: tuple[Fact[MaxLrDefault], ...] = (
    Fact("WarmupLR", Span("0.9.0", "0.17.1"), MaxLrDefault.CONSTANT,
         f"{_LR_SCHEDULES} @ v0.9.0..v0.17.1: warmup_max_lr: float = 0.001"),
    Fact("WarmupLR", Span("0.17.2", "0.19.3"), MaxLrDefault.GROUP_0,
         f"{_LR_SCHEDULES} @ v0.17.2..v0.19.3: [group['lr'] for group in groups][0]"),
    Fact("WarmupLR", Span("0.19.4", None), MaxLrDefault.EACH_GROUP,
         f"{_LR_SCHEDULES} @ v0.19.4 (PR #8171): [group['lr'] for group in groups]"),
)
# the peak of MaxLrDefault.CONSTANT (lr_schedules.py @ v0.9.0..v0.17.1: warmup_max_lr: float = 0.001), and
# WarmupDecayLR's own default on every release (upstream/pr7360.py: NOT_FOR)
DEFAULT_PEAK = 0.001


@dataclass(frozen=True)
class WarmupLength:
    """How a warmup scheduler's constructor reads ``warmup_num_steps``."""

    default: int  # the warmup's steps when the config gives none
    fewest: int  # it keeps max(fewest, warmup_num_steps): no warmup runs fewer steps


# WarmupLR, WarmupDecayLR and WarmupCosineLR read warmup_num_steps alike
WARMUP_LENGTHS: tuple[Fact[WarmupLength], ...] = (
    Fact("WarmupLR, WarmupDecayLR, WarmupCosineLR", Span("0.9.0", None), WarmupLength(default=1000, fewest=2),
         f"{_LR_SCHEDULES} @ v0.9.0, v0.12.3, v0.15.2, v0.19.2, v0.19.3, v0.19.8: warmup_num_steps: int = 1000 and "
         "self.warmup_num_steps = max(2, warmup_num_steps) in each constructor (WarmupCosineLR's from 0.12.3)"),
)


def warmup_length(deepspeed_version: str) -> WarmupLength:
    """How this release reads ``warmup_num_steps`` (an untested or older one: the table's nearest row)."""
    fact = row(WARMUP_LENGTHS, deepspeed_version)
    return fact.value if fact is not None else WARMUP_LENGTHS[0].value


# where the reference release starts every group of each class when it is built: the constructor's param, and
# its default (None: required); WarmupCosineLR at 0.0 (lr_schedules.py @ v0.19.8: the constructors' defaults,
# get_lr() at iteration -1)
REFERENCE_STARTS: MappingProxyType[str, tuple[str | None, float | None]] = MappingProxyType({
    "WarmupLR": ("warmup_min_lr", 0.0), "WarmupDecayLR": ("warmup_min_lr", 0.0), "WarmupCosineLR": (None, 0.0),
    "OneCycle": ("cycle_min_lr", None), "LRRangeTest": ("lr_range_test_min_lr", 1e-3)})


# WarmupDecayLR runs WarmupLR.__init__ (super().__init__) and inherits get_lr (lr_schedules.py @ v0.9.0..v0.19.8)
INHERITS = MappingProxyType({"WarmupDecayLR": "WarmupLR"})


class StepLr:
    """What a scheduler's step leaves in a group whose lr is a tensor (strings: the probe's answer is plain data).
    Where each began is the change that brought it (``upstream/``: PR #7633, #8202)."""

    FLOAT = "float"  # the tensor is replaced by a Python float (up to 0.18.0)
    NEW_TENSOR = "new tensor"  # a new tensor (0.18.1-0.19.3, PR #7633; Intel Gaudi's 0.14.4)
    IN_PLACE = "in place"  # the group's own tensor, filled (0.19.4+, PR #8202)


# Where an engine takes its optimizer step: the last moment that decides the first step's lr, where step
# mode looks at the scheduler (and steps it once if user code has not).

_ENGINE = "deepspeed/runtime/engine.py"
_READ_AT = "read at v0.9.0, 0.9.5, 0.10.0, 0.10.3, 0.11.2, 0.12.0, 0.12.6, 0.13.5, 0.14.0, 0.14.4, 0.14.5, 0.15.0, " \
    "0.15.2, 0.15.4, 0.16.0, 0.16.9, 0.17.0, 0.17.6, 0.18.0, 0.18.9, 0.19.0, 0.19.8"


# the DeepSpeedEngine method that runs the optimizer step and then the scheduler's
OPTIMIZER_STEPS: tuple[Fact[str], ...] = (
    Fact("DeepSpeedEngine", Span("0.9.0", None), "_take_model_step",
         f"{_ENGINE} @ v0.9.0..v0.19.8: step() calls it only at a gradient accumulation boundary; it "
         "runs optimizer.step(), then lr_scheduler.step() unless the step overflowed; "
         "runtime/pipe/engine.py's _exec_optimizer_step calls it; no other class defines it "
         f"({_READ_AT}; its block_eigenvalue parameter is gone by 0.19.8); {_RUN} on 0.15.2, 0.19.8"),
)


def optimizer_step_method(deepspeed_version: str) -> str | None:
    """The DeepSpeedEngine method step mode wraps on this release; None below the table's floor."""
    fact = row(OPTIMIZER_STEPS, deepspeed_version)
    return fact.value if fact is not None else None


# accelerate ------------------------------------------------------------------------------

ACCELERATE_FLOOR = "0.10.0"  # before it, DeepSpeedEngineWrapper subclassed DeepSpeedEngine
# 1.16.0 read at its tag: utils/deepspeed.py is unchanged from 1.15.0, and Accelerator._prepare_deepspeed still
# builds the engine and its scheduler through deepspeed.initialize (only MS-AMP, TP and SP lines changed)
NEWEST_ACCELERATE = "1.16.0"
ACCELERATE_CPU_FLOOR = "0.29.0"  # older releases force nccl and cuda devices for DeepSpeed

# Lookups ---------------------------------------------------------------------------------

class Support(enum.Enum):
    UNSUPPORTED = "unsupported"  # older than the floor: the patch does nothing
    KNOWN = "known"  # inside the table
    UNTESTED = "untested"  # newer than the table: the patch acts on what it observes


def support(version: str, floor: str, newest: str) -> Support:
    parsed = parse(version)
    if parsed < parse(floor):
        return Support.UNSUPPORTED
    if parsed[:3] > parse(newest):
        return Support.UNTESTED
    return Support.KNOWN


def deepspeed_support(version: str) -> Support:
    return support(version, DEEPSPEED_FLOOR, NEWEST_DEEPSPEED)


def accelerate_support(version: str) -> Support:
    return support(version, ACCELERATE_FLOOR, NEWEST_ACCELERATE)


def start_fact(scheduler: str, deepspeed_version: str) -> Fact[Start] | None:
    """The table's row for this scheduler class on this release; None if the table has none."""
    return row(SCHEDULER_STARTS, deepspeed_version, scheduler)


def warmup_max_lr_default(deepspeed_version: str) -> MaxLrDefault:
    fact = row(WARMUP_MAX_LR_DEFAULTS, deepspeed_version)
    return fact.value if fact is not None else MaxLrDefault.EACH_GROUP


def scheduler_classes() -> tuple[str, ...]:
    return tuple(dict.fromkeys(fact.subject for fact in SCHEDULER_STARTS))
