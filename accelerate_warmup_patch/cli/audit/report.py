"""The command: every PATH's runs judged and written as they come (text blocks, JSON or JSON lines), a summary
at the end, and the exit code.

A fleet is tens of thousands of runs, so nothing waits for the walk to end: each run is judged as soon as it is
found and its lines are written (and flushed) at once. Nothing is kept of a run once written but what telling it
apart from a later PATH's needs (and only when there are several PATHs). Ctrl-C and SIGTERM stop the work between
two runs (a second signal: at once, between two writes), close a JSON document, and print the partial summary.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, TextIO

from ... import releases
from . import jobs, parts, stores, summary
from .find import NoRun, Run, Symlinked, Unsearched, walk
from .judge import blank_row, judged_report, lr_text, lrs_text, unreadable_report
from .summary import Summary
from .verdicts import SKIPPED

TEXT, JSON, JSONL = "text", "json", "jsonl"


@dataclass(frozen=True)
class Options:
    """How to audit: the command line's options (main.py builds them); ``verbose`` defaults to a row per symlinked
    folder here, as 0.5.0 reported them, and to their count alone on the command line (``-v`` for the rows)."""

    config_root: str | None = None
    exclude: tuple[str, ...] = ()
    shard: tuple[int, int] = (0, 1)  # K of N
    jobs: int = 1
    verbose: bool = True  # a row per symlinked folder (the command line's default is the count alone)


# Finding: each PATH's rows and runs, each run once, this shard's only ----------------------------------------

@dataclass(frozen=True)
class _Row:
    """A report that needs no judging: a folder that could not be listed, a link, a PATH seen already."""

    report: dict[str, Any]


def _found(paths: Sequence[str], options: Options, tally: Summary,
           errors: list[str]) -> Iterator[Run | _Row]:
    seen: dict[str, str] | None = {} if len(paths) > 1 else None  # one PATH never meets a run twice
    for path in paths:
        try:
            yield from _one_path(path, options, tally, seen)
        except NoRun as error:
            errors.append(str(error))
            _say_error(str(error))
        except Exception as error:  # a bug of ours on an odd folder: that PATH's line, not a traceback
            line = f"{path}: the audit failed on it ({type(error).__name__}: {str(error)[:200]})"
            errors.append(line)
            _say_error(line)


def _say_error(line: str) -> None:
    print(f"accelerate-warmup-patch audit: error: {line}", file=sys.stderr, flush=True)


def _one_path(path: str, options: Options, tally: Summary, seen: dict[str, str] | None) -> Iterator[Run | _Row]:
    root = stores.place(path).root
    prefix = str(root)
    real_root = "" if seen is None else prefix if isinstance(root, stores.UrlPath) else os.path.realpath(path)
    again: list[str] = []
    new = 0
    for item in walk(path, options.exclude):
        relative = _relative(item.path, prefix)
        if isinstance(item, Symlinked):
            tally.symlinked += 1
            if options.verbose and _mine(relative, options.shard):
                yield _Row({**blank_row(str(item.path)), "verdict": SKIPPED, "why": "a symlink to a folder: not "
                            "followed (name it as a PATH to audit what it points to)"})
            continue
        if isinstance(item, Unsearched):
            if _mine(relative, options.shard):
                yield _Row(unreadable_report(blank_row(str(item.path)), item.why))
            continue
        if seen is not None:
            key = os.path.normpath(os.path.join(real_root, _relative(item.tag, prefix)))
            if key in seen:
                again.append(seen[key])
                continue
            seen[key] = str(item.path)
        new += 1
        tally.found += 1
        if _mine(relative, options.shard):
            yield item
    if again and not new and _mine(".", options.shard):  # a PATH named twice, or through a link: still its line
        yield _Row({**blank_row(path), "verdict": SKIPPED,
                    "why": f"the same run{'s' if len(again) > 1 else ''} as {', '.join(dict.fromkeys(again))}, "
                           "reported once (above)"})


def _relative(found: PurePath, prefix: str) -> str:
    """The path of what the walk found under the PATH it walked (``.`` for the PATH itself)."""
    text = str(found)
    if not text.startswith(prefix):
        return text
    return text[len(prefix):].lstrip("/") or "."


def _mine(relative: str, shard: tuple[int, int]) -> bool:
    """Whether a run (by its path under the PATH given) is this shard's: a hash, so that every machine of an
    array, walking the same tree, takes a disjoint part and together they take it all."""
    index, count = shard
    return count == 1 or zlib.crc32(relative.encode("utf-8", "surrogateescape")) % count == index


# Judging -----------------------------------------------------------------------------------------------------

def _reports(paths: Sequence[str], options: Options, tally: Summary, errors: list[str],
             stopping: Callable[[], bool] = lambda: False) -> Iterator[dict[str, Any]]:
    found = _found(paths, options, tally, errors)
    if options.jobs > 1:
        yield from jobs.judged(found, options.jobs, options.config_root, _Row, stopping)
        return
    for item in found:
        yield item.report if isinstance(item, _Row) else judged_report(item, options.config_root)


def audit(paths: list[str], config_root: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports of every run under ``paths`` (each once) and of every folder under them that could not be
    searched, and one error line per PATH with no run found (a list: for a caller that wants them all)."""
    errors: list[str] = []
    return list(_reports(paths, Options(config_root), Summary(), errors)), errors


# Writing -----------------------------------------------------------------------------------------------------

class _Writer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, report: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _put(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


class _JsonLines(_Writer):
    def write(self, report: dict[str, Any]) -> None:
        self._put(json.dumps(report) + "\n")


class _JsonList(_Writer):
    """One JSON list, as ``json.dumps(reports, indent=2)`` writes it, written an element at a time."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(out)
        self.count = 0

    def write(self, report: dict[str, Any]) -> None:
        self._put(("[\n" if not self.count else ",\n") + textwrap.indent(json.dumps(report, indent=2), "  "))
        self.count += 1

    def close(self) -> None:
        self._put("\n]\n" if self.count else "[]\n")


class _Blocks(_Writer):
    """A block per run, written as it comes: ``PATH: verdict``, then the facts and the why, indented."""

    def write(self, report: dict[str, Any]) -> None:
        self._put("\n".join(block(report)) + "\n\n")


def block(r: dict[str, Any]) -> list[str]:
    """The lines of one run's block in the text output."""
    engine = f" ({r['engine']})" if r.get("engine") else ""
    lines = [f"{r['path']}{engine}: {r['verdict']}"]
    if r["checkpoint"] or r["scheduler"]:
        groups = "? groups" if r["param_groups"] is None else \
            f"{r['param_groups']} group{'s' if r['param_groups'] != 1 else ''}"
        lines.append(f"  DeepSpeed {_releases(r)}, {r['scheduler'] or 'no DeepSpeed scheduler'}, {groups}: step 0 "
                     f"ran at {lrs_text(r['step0_lrs'], r['step0_lr'])}, on {releases.NEWEST_DEEPSPEED} at "
                     f"{lrs_text(r['newest_step0_lrs'], r['newest_step0_lr'])}")
    if r["checkpoint"]:
        lines.append(f"  read {r['checkpoint']}")
    if r["step0_checkpoint"] and r["step0_checkpoint"] != r["checkpoint"]:
        lines.append(f"  step 0 from {r['step0_checkpoint']} (DeepSpeed {r['step0_deepspeed_version']})")
    if r["record"]:
        lines.append(f"  record: {_record_line(r['record'])}")
    if r["scheduler"]:
        params = ", ".join(f"{k}={v}" for k, v in (r["params"] or {}).items())
        lines.append(f"  {r['scheduler']}({params}); optimizer lr {lr_text(r['optimizer_lr'])}; at iteration "
                     f"{_or_unknown(r['last_batch_iteration'])}, {_or_unknown(r['global_steps'])} optimizer steps")
    lines.append(f"  {r['why']}")
    lines.extend(f"  note: {note}" for note in r["notes"])
    return lines


def _or_unknown(value: Any) -> str:
    """A count the file does not hold (or holds as a non-number, or past 63 bits) as ``?``, not ``None``."""
    return "?" if value is None else str(value)


def _releases(report: dict[str, Any]) -> str:
    newest, first = report["deepspeed_version"], report["step0_deepspeed_version"]
    if first and newest and first != newest:
        return f"{first}->{newest}"
    return newest or "?"


def _record_line(record: dict[str, Any]) -> str:
    line = f"accelerate-warmup-patch {record['version']} ({record['mode']}) on DeepSpeed {record['deepspeed']}"
    scheduler = record.get("scheduler")
    if not scheduler:
        return line + ": no lr scheduler"
    return (f"{line}: {scheduler['class']} step 0 {scheduler['step0']}, lrs "
            f"{lrs_text(scheduler['lrs_before'], None)} -> {lrs_text(scheduler['lrs_after'], None)}")


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

    def write(self, writer: _Writer, report: dict[str, Any]) -> None:
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
    writer = {TEXT: _Blocks, JSON: _JsonList, JSONL: _JsonLines}[form](sys.stdout)
    tally = Summary()
    errors: list[str] = []
    stopped: int | None = None
    progress = summary.Progress()
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
        if tally.verdicts or stopped is not None:  # a PATH's error line alone needs no summary under it
            tally.write(sys.stdout if form == TEXT else sys.stderr, stopped)
    if stopped is not None:
        return 128 + stopped
    return tally.exit_code(errors)
