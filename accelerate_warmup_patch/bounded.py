"""Every call to the job's key-value service (torch.distributed's TCPStore) with a bound of its own.

The ranks' tells and the writer's asks sit on every save's path, and DeepSpeed's own save never touches that
service: a stalled one must never hold a save. So each call runs in a daemon thread, waited for at most ``OP_S``
seconds, and all of one save's calls on one rank share one budget of ``SAVE_S`` seconds. Past either, the call
raises ``Late`` and the save asks nothing more of the service: the record is written unbound, saying why. A call
that never returns keeps its thread (a daemon, so it never holds the interpreter's exit), and no other call is
started while it waits: at most one thread of ours is ever stuck, whatever the service does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .state import STATE

OP_S = 2.0  # one call (a tell, one ask); a healthy service answers in milliseconds, a loaded one of 512 ranks too
SAVE_S = 5.0  # all of one save's calls on one rank: the most a save waits, whatever the service does

T = TypeVar("T")


class Late(Exception):
    """The service did not answer within the bound (or an earlier call still waits): why, in words."""


@dataclass
class Budget:
    """One save's time for the service on this rank, and why it is asked no more in this save (None while it is)."""

    deadline: float = field(default_factory=lambda: time.monotonic() + SAVE_S)
    given_up: str | None = None


def call(budget: Budget, what: str, function: Callable[[], T]) -> T:
    """``function()`` (``what`` it does, for the reason), waited for at most OP_S and what is left of ``budget``.
    Raises Late past it, and at once where this save gave up already or an earlier call has not returned; any
    error of the call itself is raised as it is."""
    if budget.given_up is not None:
        raise Late(budget.given_up)
    stuck = STATE.late_call
    if stuck is not None and stuck.is_alive():
        budget.given_up = "an earlier call to the job's store has not returned yet: it is not asked again until then"
        raise Late(budget.given_up)
    wait = min(OP_S, budget.deadline - time.monotonic())
    if wait <= 0:
        budget.given_up = f"this save's {SAVE_S:g} s for the job's store were spent"
        raise Late(budget.given_up)
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="accelerate_warmup_patch-call", daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        STATE.late_call = thread
        budget.given_up = f"the job's store did not answer {what} within {wait:.3g} s"
        raise Late(budget.given_up)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]
