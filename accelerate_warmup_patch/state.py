"""What the patch knows about this process, in one object: ``STATE``.

This module owns it; every other runtime module asks it (``from .state import STATE``) and keeps no mutable
global of its own. The one exception is the start-up module's post-import hooks (``__init__.py``), which must
exist before anything else of the package is loaded: the start-up module hands them to ``STATE.hooks`` the
moment this module is loaded. A test checks both (tests/unit/test_layout_state.py).

The rules:

- ``mode`` is the switch: None while nothing is armed (every wrapper then calls the original alone), else the
  armed mode. The wrappers that run on every optimizer step read it as one plain attribute, never through a
  function call, which would cost every step.
- ``lock`` (re-entrant) guards ``mode``, ``applied_by``, the list of what is wrapped and the attributes the
  patch sets: ``api.apply()`` and ``api.remove()`` hold it for their whole run, so that any interleaving of them
  from several threads ends as one of them run alone. Re-entrant, since apply() may call remove() and a hook that
  apply() fires applies again. Never held across an import of a framework: import first, then take it.
- The counters, the sets of schedulers seen and the warned keys change inside the user's calls (a constructor,
  ``deepspeed.initialize``, an optimizer step). Each change is one step on a built-in object (``+= 1``, ``add``),
  and each scheduler is met by the thread that built or steps it: they need no lock.
- ``dry`` is per thread: set while warn mode's dry run of a change runs (``schedules.change``); ``said`` too, while
  the start write of a scheduler whose build already said DeepSpeed's warning runs (``upstream.pr6597``).

To add a field: give it a default here (``field(default_factory=...)`` for a container) and a comment that
says who writes it; ``reset()`` makes it anew with the others.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any

Hook = Callable[[ModuleType], None]


@dataclass(frozen=True)
class Hooks:
    """The start-up module's post-import hooks, as api.py uses them (``__init__._hand_down`` makes this)."""

    waits_for: tuple[str, ...]  # the modules the package waits for; api.py patches each
    when_imported: Callable[[str, Hook], ModuleType | None]  # hook it, or return the module if already imported
    sweep: Callable[[], None]  # call the hooks of modules that finished loading meanwhile
    waiting_for: Callable[[Hook], list[str]]  # the modules a hook waits for
    forget_all: Callable[[], None]  # no hook pending, no importer of the package recorded


class Seen:
    """Objects seen, by id (a scheduler may be unhashable), forgotten when they die. An object without
    __weakref__ is not remembered: its id could be reused by a newer object while it is recorded."""

    def __init__(self) -> None:
        self.ids: set[int] = set()  # a set of ints: `id(x) in seen.ids` runs on step mode's every optimizer step

    def __contains__(self, obj: object) -> bool:
        return id(obj) in self.ids

    def add(self, obj: object) -> None:
        key = id(obj)
        if key in self.ids:
            return
        try:
            weakref.finalize(obj, self.ids.discard, key)
        except TypeError:
            return
        self.ids.add(key)


@dataclass
class State:
    """The patch's knowledge of this process; the one instance is ``STATE``."""

    # the switch every wrapper reads: None while nothing is armed (api.apply and api.remove set it)
    mode: str | None = None
    # who armed it, in order: ".pth", "sitecustomize", "import", "apply()", ... (api.apply)
    applied_by: list[str] = field(default_factory=list)
    # each wrapper with its original, in the order wrapped (wrapping.py's list, which it alone reads)
    wrapped: list[Any] = field(default_factory=list)
    # wrapt's FunctionWrapper with pickling, made at the first wrap (wrapping.py): wrapt costs ~50 ms to import
    wrapper_class: type | None = None
    # the start-up module's post-import hooks, handed down when this module is loaded; reset() keeps them
    hooks: Hooks | None = None
    # the DeepSpeed release as deepspeed's hook saw it (targets.py)
    deepspeed_version: str | None = None
    # what the installed build's scheduler classes do (installed.Probed), and id() of the lr_schedules module the
    # probe ran on: probe.ensure, once per process and per reload of deepspeed
    probed: Any = None
    probed_module: int | None = None
    # schedulers whose build-time behaviour the patch has decided on, one try each (backport.settle)
    settled: Seen = field(default_factory=Seen)
    # schedulers a net has seen, each settled once (nets.prepare_first_step)
    netted: Seen = field(default_factory=Seen)
    # schedulers step mode has looked at, at their engine's first optimizer step (nets.optimizer_step_wrapper)
    looked: Seen = field(default_factory=Seen)
    # schedulers the patch changed (reset and step mode)
    fixes: int = 0
    # warn mode: the schedulers reset mode would have changed
    would_fix: int = 0
    # one line per scheduler the patch saw and had to leave wrong
    not_fixed: list[str] = field(default_factory=list)
    # id(scheduler) -> what the patch did about its optimizer step 0 (record_writer.Action), until the scheduler
    # dies: the record each checkpoint's save writes beside it (record_writer.py)
    actions: dict[int, Any] = field(default_factory=dict)
    # id(engine) -> its watch of this process's first optimizer step (step_watch.Watch), until the engine dies
    watches: dict[int, Any] = field(default_factory=dict)
    # ``saving.notes``: while this thread runs a save of a job that writes records, the states files this process
    # wrote itself in it (own_writes.SaveNotes: each path -> binding.file_stamp right after the write), else None
    saving: threading.local = field(default_factory=threading.local)
    # id(engine) -> what its last load_checkpoint brought into this process (loaded_record.LoadedHistory), until it
    # dies
    loaded: dict[int, Any] = field(default_factory=dict)
    # a call to the job's key-value service that did not return within its bound (bounded.call): no other call is
    # started while it waits
    late_call: Any = None
    # the keys of the warnings given, each once per process (log.py)
    warned: set[str] = field(default_factory=set)
    # ``dry.on``: this thread runs warn mode's dry run of a change (schedules.change)
    dry: threading.local = field(default_factory=threading.local)
    # ``said.on``: this thread writes the start lr of a scheduler whose build's constructor already asked get_lr() and
    # so said DeepSpeed's warning, once as the reference does: the answering wrappers do not ask the original again
    said: threading.local = field(default_factory=threading.local)
    # see the module's docstring; reset() keeps it
    lock: threading.RLock = field(default_factory=threading.RLock)

    @contextlib.contextmanager
    def dry_run(self, on: bool) -> Iterator[None]:
        """While it is open (and ``on``), this thread's wrappers compute as in reset mode."""
        before = getattr(self.dry, "on", False)
        self.dry.on = on or before
        try:
            yield
        finally:
            self.dry.on = before

    @contextlib.contextmanager
    def already_said(self, on: bool) -> Iterator[None]:
        """While it is open (and ``on``), this thread's answering wrappers leave the original's warning unsaid."""
        before = getattr(self.said, "on", False)
        self.said.on = on or before
        try:
            yield
        finally:
            self.said.on = before


STATE = State()


def reset() -> None:
    """For tests: forget everything, as in a fresh interpreter, keeping the one lock. It puts nothing back in
    place: take the patch's wrappers out first (``api.remove()``)."""
    with STATE.lock:
        fresh = State()
        for each in fields(State):
            if each.name not in ("lock", "hooks"):
                setattr(STATE, each.name, getattr(fresh, each.name))
