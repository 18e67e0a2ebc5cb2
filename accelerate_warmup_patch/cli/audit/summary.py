"""The counts at the end of an audit (per verdict, per DeepSpeed release, runs a second), the exit code they
make (``--summarize`` sums merged parts with it: parts.py), and the progress line a terminal shows while it runs."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, TextIO

from ... import releases
from .verdicts import AFFECTED, SKIPPED, UNREADABLE, VERDICTS


class Summary:
    """What was written so far, counted: a few numbers, whatever the fleet's size."""

    def __init__(self, timed: bool = True) -> None:
        self.timed = timed  # False for merged lines: their audits' time is not this process's
        self.started = time.monotonic()
        self.verdicts: Counter[str] = Counter()
        self.releases: Counter[str] = Counter()
        self.symlinked = 0  # symlinked folders met and not followed (a row each only with --verbose)
        self.found = 0  # runs the walk found (all shards'), for the progress line

    def add(self, report: dict[str, Any]) -> None:
        verdict = str(report.get("verdict"))
        self.verdicts[verdict] += 1
        if verdict != SKIPPED:
            self.releases[str(report.get("deepspeed_version") or "?")] += 1

    def exit_code(self, errors: Iterable[str] = ()) -> int:
        """1 if any run is affected; else 2 if anything could not be read; else 0."""
        if self.verdicts[AFFECTED]:
            return 1
        return 2 if self.verdicts[UNREADABLE] or any(True for _ in errors) else 0

    def lines(self, stopped: int | None = None) -> list[str]:
        seconds = max(time.monotonic() - self.started, 1e-9)
        rows = sum(self.verdicts.values())
        head = "summary" if stopped is None else \
            f"summary (stopped by {signal.Signals(stopped).name}: the reports above only)"
        verdicts = ", ".join(f"{self.verdicts[v]} {v}" for v in VERDICTS if self.verdicts[v])
        rate = f" in {seconds:.1f} s ({rows / seconds:.0f}/s)" if self.timed else ""
        lines = [f"{head}: {rows} report{'s' if rows != 1 else ''}{rate}" + (f": {verdicts}" if verdicts else "")]
        if self.releases:
            lines.append("  DeepSpeed " + ", ".join(f"{release}: {count}" for release, count in
                                                    sorted(self.releases.items(), key=lambda kv: _release_key(kv[0]))))
        if self.symlinked:
            lines.append(f"  {self.symlinked} symlinked folder{'s' if self.symlinked != 1 else ''} not followed "
                         "(each is named with --verbose; give one as a PATH to audit it)")
        return lines

    def write(self, out: TextIO, stopped: int | None = None) -> None:
        out.write("\n".join(self.lines(stopped)) + "\n")
        out.flush()


def _release_key(release: str) -> tuple[int, ...]:
    try:
        return releases.parse(release)[:3]
    except ValueError:
        return (1 << 30,)
