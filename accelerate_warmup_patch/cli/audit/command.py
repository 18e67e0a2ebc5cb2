"""The command: every PATH's runs (``runs``) judged and written as they come (``writers``: text blocks, JSON or JSON
lines), a summary at the end, and the exit code.

A fleet is tens of thousands of runs, so nothing waits for the walk to end: each run is judged as soon as it is
found and its lines are written (and flushed) at once. Nothing is kept of a run once written but what telling it
apart from a later PATH's needs (and only when there are several PATHs). Ctrl-C and SIGTERM stop the work between
two runs (a second signal: at once, between two writes), close a JSON document, and print the partial summary.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..progress import RunCounter
from . import jobs, parts, runs, writers
from .run_report import judged_report
from .runs import Options
from .summary import Summary
from .writers import JSON, JSONL, TEXT

# Judging -----------------------------------------------------------------------------------------------------

def _reports(paths: Sequence[str], options: Options, tally: Summary, errors: list[str],
             stopping: Callable[[], bool] = lambda: False) -> Iterator[dict[str, Any]]:
    found = runs.found(paths, options, tally, errors)
    if options.jobs > 1:
        yield from jobs.judged(found, options.jobs, options.config_root, runs.Row, stopping)
        return
    for item in found:
        yield item.report if isinstance(item, runs.Row) else judged_report(item, options.config_root)


def audit(paths: list[str], config_root: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports of every run under ``paths`` (each once) and of every folder under them that could not be
    searched, and one error line per PATH with no run found (a list: for a caller that wants them all)."""
    errors: list[str] = []
    return list(_reports(paths, Options(config_root), Summary(), errors)), errors


# Stopping between two writes ---------------------------------------------------------------------------------

class Interrupted(BaseException):  # not an Exception: no reader's "except Exception" may take it
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Signals:
    """The first SIGINT or SIGTERM asks to stop: the run being judged is finished and written (every run is
    bounded: seconds at most), then the audit stops. A second one stops at once (Interrupted, raised wherever the
    work is), except while a report is being written: then right after it, so that every line out is whole."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.forced = False
        self.writing = False
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.received is None:
            self.received = signum
            return
        self.forced = True
        if not self.writing:
            raise Interrupted(self.received)

    def write(self, writer: writers.Writer, report: dict[str, Any]) -> None:
        """Writes the report unless a second signal came while it was judged (it may be the product of a read
        cut short); stops after it once a signal came."""
        if self.forced:
            raise Interrupted(self.received or signal.SIGINT)
        self.writing = True
        try:
            writer.write(report)
        finally:
            self.writing = False
        if self.received is not None:
            raise Interrupted(self.received)


# The command -------------------------------------------------------------------------------------------------

def main(paths: list[str], as_json: bool = False, config_root: str | None = None, *, form: str | None = None,
         options: Options | None = None) -> int:
    """Exit 1 if any run is affected; else 2 if anything could not be read (a PATH with no run, an unreadable run,
    a folder that cannot be listed); else 0. A run that could not be judged never makes it 1. Interrupted by
    SIGINT or SIGTERM: 130 or 143, after every report judged so far and the partial summary."""
    form = form or (JSON if as_json else TEXT)
    options = options or Options(config_root)
    writer = writers.WRITERS[form](sys.stdout)
    tally = Summary()
    tally.shard = options.shard
    errors: list[str] = []
    stopped: int | None = None
    progress = RunCounter()
    with _Signals() as signals:
        if form == JSONL:  # a part that says who it is: --summarize checks the parts (parts.py)
            writer.write(parts.opening(paths, options.shard, options.exclude))
        try:
            for report in _reports(paths, options, tally, errors, lambda: signals.received is not None):
                tally.add(report)
                signals.write(writer, report)
                progress.judged(tally.found)
            stopped = signals.received  # one that came after the last run: the summary still says it
        except Interrupted as interrupted:
            stopped = interrupted.signum
        except jobs.Stopped:
            stopped = signals.received
        except KeyboardInterrupt:  # signals not ours to catch (not the main thread)
            stopped = signal.SIGINT
        finally:
            progress.close()
        signals.writing = True  # the closing lines go out whole, whatever comes now
        writer.close()
        if form == JSONL:
            writer.write(parts.closing(paths, options.shard, options.exclude, reports=sum(tally.verdicts.values()),
                                       stopped=stopped, errors=errors))
        tally.write(sys.stdout if form == TEXT else sys.stderr, stopped)  # always: silence is not all-clear
    if stopped is not None:
        return 128 + stopped
    return tally.exit_code(errors)
