"""The shape of an upstream change: the parts each unit of ``upstream/`` fills in, or says why it does not.

A unit (``Unit``) is one pull request DeepSpeed merged into its schedulers: its number, its first release, where it
was read, and each thing it changed (``Change``: one method of one class, named by its key). Each change holds,
beside its facts, one of each part, every one of which is a way to do it or the reason it is not done:

- ``probe``: how an installed build is asked whether it has the change (``Check``, run by probe.py on a scratch
  optimizer), or why not (``NotProbed``);
- ``backport``: what the patch does where a build lacks it (``AtConstruction``, after the build's own constructor;
  ``Answer``, what a wrapped method returns), or why nothing (``NotBackported``);
- ``judgement``: how ``audit`` judges a run that lacked it (``Applied``: did the run use an lr it changes?
  ``AtStep0``: step 0's lrs decide), or why not (``NotJudged``);
- ``meets``: whether a scheduler built with a config's params meets it (doctor --config, the audit), and
  ``advice``, where the reference refuses such a config;
- ``cases``: the cases of tests/cases.py that show it (a release that lacks it gives something else unpatched, the
  same as the reference's golden_cases.json patched), or where else it is tested (``Elsewhere``).

A part may be done by a later change of the same key (``ByLater``: #7360's default peak is #8171's to reproduce).

Standard library only, and nothing runs at import. A unit imports the table (releases.py), the reference's formulas
(reference.py), the probe's scratch kit (scratch.py) and this module: never the patch's machinery above it
(installed.py, schedules.py, backport.py). What a constructor backport may read and do comes to it as ``Building``;
what a judgement may read of a save, as ``Saved``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Union

from ..releases import MaxLrDefault, Start, parse
from ..scratch import Scratch
from ..vendor_builds import VENDOR_BUILDS, VendorBuild


@dataclass(frozen=True)
class Construction:
    """What a WarmupLR saw when it was built: its groups' lrs (None: unknown) and whether a peak was given."""

    group_lrs: tuple[Any, ...] | None
    max_lr_given: bool


class Building(Protocol):
    """A scheduler the build's own constructor has just built, as backport.py hands it to a constructor backport:
    what the backport may read, and the only ways it may write (as the build writes) or speak (once)."""

    scheduler: Any
    name: str  # its DeepSpeed class (a WarmupDecayLR runs WarmupLR's constructor)
    version: str  # the build's deepspeed.__version__
    construction: Construction | None  # what the constructor saw; None: the patch did not see it built
    peak_known: bool  # False where the constructor's arguments could not be read: its default peak is left

    @property
    def warn_mode(self) -> bool: ...  # the patch only says what reset mode would change (backport.settle undoes it)

    @property
    def dry(self) -> bool: ...  # warn mode's dry run: the backport adds no line of DeepSpeed's own

    def write(self, lrs: list[Any]) -> list[Any]: ...  # the groups' lrs, as the build's own step writes them

    # while open (and ``on``), the build's own get_lr() warning is not said again (its constructor said it)
    def already_said(self, on: bool) -> AbstractContextManager[None]: ...

    def start(self) -> Start | None: ...  # what the build's class does to the optimizer's lr when built

    def max_lr_default(self) -> MaxLrDefault: ...  # the build's WarmupLR peak without warmup_max_lr

    def fresh(self) -> bool: ...  # the scheduler has never stepped

    def group_lrs(self) -> list[Any]: ...  # each group's lr now (a tensor cloned)

    def value(self, lr: Any) -> float: ...  # an lr as a float, a tensor's too

    def fmt(self, lrs: list[Any]) -> str: ...  # lrs for a log line

    def warn_once(self, key: str, message: str, *args: object) -> None: ...  # a warning, once per process


@dataclass(frozen=True)
class Line:
    """A warning to say once: its key and its logging message and arguments."""

    key: str
    message: str
    args: tuple[object, ...]


@dataclass(frozen=True)
class Outcome:
    """What a constructor backport did beyond the groups' lrs (backport.settle sees those itself): the part it
    concerns, for the record and warn mode's one line per scheduler, and whether it set it or left it."""

    part: str  # "its default peak lr"
    changed: bool  # it set it (in warn mode: it would have); False: it left it as the release set it
    warning: str  # warn mode's words for it, in the scheduler's one line
    why_left: str = ""  # why it was left, for the record
    left_line: Line | None = None  # said once where it was left, unless warn mode's one line says it


class Saved(Protocol):
    """One save as the audit read it, for a judgement (cli/audit/judge.py answers)."""

    @property
    def params(self) -> Mapping[str, Any]: ...  # the scheduler's params in the saved ds_config

    @property
    def optimizer_lr(self) -> Any: ...  # the optimizer's lr in the ds_config (group 0's); None: not in the file

    @property
    def param_groups(self) -> int | None: ...  # the groups' count; None: not in the file

    @property
    def iteration(self) -> int | None: ...  # the scheduler's saved last_batch_iteration

    @property
    def version(self) -> str: ...  # the release whose rows judge it

    def number(self, value: Any) -> Any: ...  # a number as the audit reads one from a file, or None

    def lr_text(self, value: Any) -> str: ...  # an lr as the audit writes it


# Parts ------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Check:
    """How a build is asked: True where its classes lack the change (probe.py runs it on its scratch kit, once,
    when deepspeed is imported; the build's own warnings held back)."""

    lacks: Callable[[Scratch], bool]


@dataclass(frozen=True)
class AtConstruction:
    """The backport of a constructor's change, run after the build's own ``__init__`` on a fresh scheduler whose
    build lacks it (backport.settle): returns what it did beyond the groups' lrs (None: nothing of that kind)."""

    how: str  # how the patch reproduces it (docs/matrix.md's words)
    build: Callable[[Building], Outcome | None]
    last: bool = False  # the reference's constructor does it last (the start lr, from get_lr(), reads the others)


# where an Answer decides: the wrapper, which runs on every step, tests these itself, without a call
BEFORE_START = "before the first step"  # last_batch_iteration < 0
PAST_WARMUP = "past the warmup"  # last_batch_iteration >= warmup_num_steps


@dataclass(frozen=True)
class Answer:
    """The backport of a method's change: what the wrapped method returns ``where`` the change decides (elsewhere
    the build's own method answers)."""

    how: str
    where: str  # BEFORE_START or PAST_WARMUP
    answer: Callable[[Any], Any]  # the reference's value there, from the instance
    original_too: bool = False  # the build's own method runs too, for its warning, as the reference's logs it
    when: str = ""  # the words a failure of it adds to the method's name: " before its first step"
    # warn mode's words for what the answer changes of this scheduler (scheduler, the build's version): where it
    # differs from the build's own method, said at construction; None where it changes nothing of this one
    warns: Callable[[Any, str], str | None] | None = None


@dataclass(frozen=True)
class Applied:
    """Whether a run that lacked the change used an lr it changes: (True, how) it did, (False, "") it did not,
    (None, why) the files cannot say."""

    applied: Callable[[Saved], tuple[bool | None, str]]
    last_steps: bool = False  # met by a run's last steps: judged on the newest save's release, not step 0's


@dataclass(frozen=True)
class AtStep0:
    """A change that decides only the lr step 0 runs at: the audit judges it by step 0's lrs (judge.step0_lrs,
    from the table's SCHEDULER_STARTS and REFERENCE_STARTS)."""


@dataclass(frozen=True)
class ByLater:
    """A part done by a later change of the same key: the table lists both, and the newest row decides."""

    pr: str
    why: str


@dataclass(frozen=True)
class NotProbed:
    why: str


@dataclass(frozen=True)
class NotBackported:
    why: str


@dataclass(frozen=True)
class NotJudged:
    why: str


@dataclass(frozen=True)
class Elsewhere:
    """Tested outside tests/cases.py: where, and why no case of it is there."""

    why: str


Probe = Union[Check, ByLater, NotProbed]
Backport = Union[AtConstruction, Answer, ByLater, NotBackported]
Judgement = Union[Applied, AtStep0, ByLater, NotJudged]
Cases = Union[tuple[str, ...], Elsewhere, ByLater]


def every_config(params: Mapping[str, Any]) -> bool:
    """A change every config meets (the start, a formula of every step)."""
    return True


@dataclass(frozen=True)
class Change:
    """One thing a pull request changed: one method of one class, and the patch's part for each tool."""

    key: str  # its name where the CLI says it: "default_peak" -> "default peak (#8171)"
    scheduler: str  # the class whose code it changed upstream ("every class", "WarmupLR, WarmupCosineLR")
    method: str
    what: str
    probe: Probe
    backport: Backport
    judgement: Judgement
    cases: Cases
    meets: Callable[[Mapping[str, Any]], bool] = every_config
    not_for: tuple[str, ...] = ()  # classes that run the changed class's code and never meet it (WarmupDecayLR's peak)
    leaves: str | None = None  # releases.StepLr: what a step leaves in a tensor lr group from this change on
    # doctor --config's advice where the reference's constructor refuses a config this class runs (None: never)
    advice: Callable[[str, Mapping[str, Any]], str | None] | None = None
    pr: str = field(default="", compare=False)  # filled in by its Unit
    release: str = field(default="", compare=False)

    @property
    def backported(self) -> bool:
        return not isinstance(self.backport, NotBackported)

    @property
    def why(self) -> str:
        """How the patch reproduces it, or why it does not (docs/matrix.md's "the patch" column)."""
        backport = self.backport
        return backport.how if isinstance(backport, (AtConstruction, Answer)) else backport.why

    @property
    def target(self) -> str:
        return f"{self.scheduler}.{self.method}"


@dataclass(frozen=True)
class Unit:
    """One pull request DeepSpeed merged into its schedulers: its changes, each given the PR and first release."""

    pr: str  # "#6597"
    release: str  # the first release with it
    source: str  # where it was read: the file at the tags on either side of it
    changes: tuple[Change, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "changes", tuple(replace(c, pr=self.pr, release=self.release) for c in self.changes))

    def lacked_by(self, deepspeed_version: str) -> bool:
        """Whether a release of this number lacks the change (a build's number may lie: installed.py asks its code)."""
        return parse(deepspeed_version) < parse(self.release)

    def lacking_builds(self) -> tuple[VendorBuild, ...]:
        """The vendor builds the table knows whose code lacks it: those based on an older upstream release."""
        return tuple(build for build in VENDOR_BUILDS if self.lacked_by(build.based_on))
