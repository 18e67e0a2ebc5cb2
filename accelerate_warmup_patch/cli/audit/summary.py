"""The counts at the end of an audit (per verdict, per DeepSpeed release, runs a second), what was skipped and why,
the exit code they make (``--summarize`` sums merged parts with it: parts.py). Always written: an audit that judged
nothing says so, and never exits 0 (silence must not read as all-clear)."""

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
        self.linked: list[str] = []  # the first few of them, named in the summary whatever --verbose says
        self.repeated = 0  # PATHs whose runs were all reported already (named twice, or through a link)
        self.found = 0  # runs the walk found (all shards'), for the progress line
        self.shard: tuple[int, int] = (0, 1)  # K of N: which part of what was found this audit judges

    def skipped_link(self, path: str) -> None:
        """A symlinked folder not followed: counted, and the first few named."""
        self.symlinked += 1
        if len(self.linked) < _NAMED:
            self.linked.append(path)

    @property
    def judged(self) -> int:
        """The reports that judged a run (every verdict but ``skipped``)."""
        return sum(self.verdicts.values()) - self.verdicts[SKIPPED]

    def add(self, report: dict[str, Any]) -> None:
        verdict = str(report.get("verdict"))
        self.verdicts[verdict] += 1
        if verdict != SKIPPED:
            self.releases[str(report.get("deepspeed_version") or "?")] += 1

    def exit_code(self, errors: Iterable[str] = ()) -> int:
        """1 if any run is affected; else 2 if anything could not be read, or nothing was judged; else 0."""
        if self.verdicts[AFFECTED]:
            return 1
        return 2 if self.verdicts[UNREADABLE] or any(True for _ in errors) or not self.judged else 0

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
            named = ", ".join(self.linked) + (f" and {self.symlinked - len(self.linked)} more"
                                              if self.symlinked > len(self.linked) else "")
            lines.append(f"  skipped: {self.symlinked} symlinked folder{'s' if self.symlinked != 1 else ''} not "
                         f"followed ({named}; each is named with --verbose; give one as a PATH to audit it)")
        if self.repeated:
            lines.append(f"  skipped: {self.repeated} PATH{'s' if self.repeated != 1 else ''} whose runs were all "
                         "reported once already (named twice, or through a link; each its line above)")
        if not self.judged and stopped is None:
            lines.append("  nothing was judged: " + self._why_nothing() + " (exit status 2)")
        return lines

    def _why_nothing(self) -> str:
        index, count = self.shard
        if self.found and count > 1:
            return (f"none of the {self.found} run{'s' if self.found != 1 else ''} found is this shard's "
                    f"({index}/{count}); the merge of every shard's part tells the fleet's answer")
        if self.symlinked:
            return "every folder of runs met was a symlinked folder, not followed"
        return "no run was found (the error lines above say where)" if self.found == 0 else "no run was judged"

    def write(self, out: TextIO, stopped: int | None = None) -> None:
        out.write("\n".join(self.lines(stopped)) + "\n")
        out.flush()


_NAMED = 3  # the symlinked folders the summary names one by one


def _release_key(release: str) -> tuple[int, ...]:
    try:
        return releases.parse(release)[:3]
    except ValueError:
        return (1 << 30,)
