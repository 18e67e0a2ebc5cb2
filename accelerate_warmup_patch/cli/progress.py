"""What a command says on stderr while it works, one way for every command: a line that a terminal shows replaced
in place until one ends it, and stdout, which ``--json`` keeps for its output, never touched.

``doctor``, ``status --live`` and ``demo`` say what child process they wait for (``child.progress``); ``audit``
counts the runs it judged (``RunCounter``). Standard library only.
"""

from __future__ import annotations

import sys
import time

UPDATE_S = 0.1  # the counter's line is written at most this often: a fleet judges thousands of runs a second


def say(text: str, terminal: bool, end: bool) -> None:
    """A line on stderr; on a terminal each write replaces the line in place until one ends it."""
    if sys.stderr is None:
        return
    sys.stderr.write(("\r\x1b[K" if terminal else "") + text + ("\n" if end else ""))
    sys.stderr.flush()


class RunCounter:
    """Runs judged, found and the rate on stderr while stderr is a terminal and stdout is not (on a terminal the
    reports are the progress); nothing otherwise. The line is cleared at the end: the summary says the rest."""

    def __init__(self) -> None:
        self.on = sys.stderr is not None and sys.stderr.isatty() and not sys.stdout.isatty()
        self.count = 0
        self.started = time.monotonic()
        self.shown = 0.0

    def judged(self, found: int) -> None:
        if not self.on:
            return
        self.count += 1
        now = time.monotonic()
        if now - self.shown < UPDATE_S:
            return
        self.shown = now
        rate = self.count / max(now - self.started, 1e-9)
        say(f"judged {self.count} run{'s' if self.count != 1 else ''}, found {found} ({rate:.0f}/s)", True, False)

    def close(self) -> None:
        if self.on and self.count:
            say("", True, False)
