"""The parts of an audit's JSON lines (``--jsonl``): the line that opens each part and the line that closes it, and
their merge (``--summarize``), which sums the reports only after checking that the parts are one audit's shards,
each present once and finished.

A Slurm array writes one part per task. A task that failed before it ran leaves an empty file, one that was never
run leaves none, one cut by its time limit leaves a part that stops early, and a file left over from another
audit may match the same glob. Summed blindly, each of these looks like a smaller fleet. So each part says who it
is: its opening line (written before the walk) names the shard K/N, the PATHs and the excludes; its closing line
repeats them and adds how many reports it wrote, whether it finished or which signal stopped it, and its error
lines. An opening line without a closing one is a part whose process was killed (SIGKILL after a time limit's
grace, a lost node); neither line is a part of an audit older than 0.7.0, which wrote none.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from ... import __version__
from .summary import Summary

KEY = "audit_part"  # a report never has this key; jq's `select(.verdict)` skips these lines
OPENING, CLOSING = "opening", "closing"
_LINE_LIMIT = 1 << 20  # characters: a report is a few KiB; a file that is not JSON lines is not read whole
_ERROR = "accelerate-warmup-patch audit: error: "


def _who(paths: list[str], shard: tuple[int, int], exclude: tuple[str, ...]) -> dict[str, Any]:
    return {"shard": f"{shard[0]}/{shard[1]}", "paths": list(paths), "exclude": list(exclude)}


def opening(paths: list[str], shard: tuple[int, int], exclude: tuple[str, ...]) -> dict[str, Any]:
    """The first line of a ``--jsonl`` output: which audit and which shard of it."""
    return {KEY: OPENING, "version": __version__, **_who(paths, shard, exclude)}


def closing(paths: list[str], shard: tuple[int, int], exclude: tuple[str, ...], *, reports: int,
            stopped: int | None, errors: list[str]) -> dict[str, Any]:
    """The last line: the same names, the reports written, and whether the part is whole."""
    return {KEY: CLOSING, **_who(paths, shard, exclude), "reports": reports, "finished": stopped is None,
            "stopped_by": None if stopped is None else signal.Signals(stopped).name, "errors": list(errors)}


# Reading the parts -------------------------------------------------------------------------------------------

@dataclass
class _Part:
    """One part as read: where it came from, its two lines (None where absent), the reports between them."""

    source: str
    opening: dict[str, Any] | None = None
    closing: dict[str, Any] | None = None
    reports: int = 0

    def who(self) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
        """The audit the part belongs to (N, PATHs, excludes): what every part of one array shares."""
        line = self.opening or self.closing
        if line is None:
            return None
        return (str(line["shard"]).partition("/")[2], tuple(line["paths"]), tuple(line["exclude"]))

    def shard(self) -> str:
        line = self.opening or self.closing
        return "?" if line is None else str(line["shard"])


@dataclass
class _Read:
    """Everything the merge read: the parts, the lines that were no report, the files it could not read."""

    tally: Summary = field(default_factory=lambda: Summary(timed=False))
    parts: list[_Part] = field(default_factory=list)
    broken: int = 0
    unreadable: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)


def _part_line(value: Any) -> str | None:
    """OPENING or CLOSING where ``value`` is such a line with the fields the merge reads, else None."""
    if not isinstance(value, dict) or value.get(KEY) not in (OPENING, CLOSING):
        return None
    shard = value.get("shard")
    names = ("paths", "exclude", "errors") if value[KEY] == CLOSING else ("paths", "exclude")
    fields_ok = (isinstance(shard, str) and shard.count("/") == 1
                 and all(_strings(value.get(name)) for name in names))
    if value[KEY] == CLOSING:
        fields_ok = fields_ok and isinstance(value.get("reports"), int)
    return str(value[KEY]) if fields_ok else None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _lines(out: TextIO) -> Iterator[str]:
    """The file's lines, each cut at _LINE_LIMIT (the rest of an overlong line is skipped)."""
    while True:
        line = out.readline(_LINE_LIMIT)
        if not line:
            return
        if len(line) == _LINE_LIMIT and not line.endswith("\n"):
            while (rest := out.readline(_LINE_LIMIT)) and not rest.endswith("\n"):
                pass
        yield line


def _read_file(name: str, out: TextIO, read: _Read) -> None:
    current: _Part | None = None
    seen = False
    for number, line in enumerate(_lines(out), start=1):
        seen = seen or bool(line.strip())
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            value = None
        kind = _part_line(value)
        if kind == OPENING or (kind == CLOSING and (current is None or current.closing is not None)):
            current = _Part(f"{name}:{number}" if number > 1 else name, opening=value if kind == OPENING else None)
            read.parts.append(current)
        if kind == CLOSING:
            assert current is not None
            current.closing = value
            continue
        if kind is not None:
            continue
        if not isinstance(value, dict) or "verdict" not in value:
            read.broken += line.strip() != ""
            continue
        if current is None or current.closing is not None:  # reports outside any part: an older audit's
            current = _Part(f"{name}:{number}" if number > 1 else name)
            read.parts.append(current)
        current.reports += 1
        read.tally.add(value)
    if not seen:
        read.empty.append(name)


def _read(files: list[str]) -> _Read:
    read = _Read()
    for name in files:
        if name == "-":
            _read_file("stdin", sys.stdin, read)
            continue
        try:
            if not stat.S_ISREG(os.stat(name).st_mode):
                raise OSError(f"not a regular file: {name}")
            with open(name, encoding="utf-8", errors="replace") as out:
                _read_file(name, out, read)
        except OSError as error:
            read.unreadable.append(f"{name}: cannot read it ({error.strerror or error})")
    return read


# Checking them -----------------------------------------------------------------------------------------------

def _problems(read: _Read) -> tuple[list[str], list[str], str]:
    """The parts' problems (each a reason the merge is not the whole audit), notes, and the line that says which
    shards are here."""
    problems = [*read.unreadable, *(f"{name}: empty: its task wrote nothing (it never ran the audit, or failed "
                                    "before it started)" for name in read.empty)]
    notes = [f"{part.source}: {part.reports} report{'s' if part.reports != 1 else ''} with no opening or closing "
             "line (an audit older than 0.7.0 writes none): whether that part is whole, and which shard it is, "
             "cannot be told" for part in read.parts if part.who() is None]
    named = [(part, who) for part in read.parts if (who := part.who()) is not None]
    if not named:
        return problems, notes, ""
    ours = collections.Counter(who for _, who in named).most_common(1)[0][0]
    count = int(ours[0]) if ours[0].isdigit() and len(ours[0]) <= 6 else 0  # an array's N, not a forged one
    by_shard: dict[str, list[_Part]] = collections.defaultdict(list)
    for part, who in named:
        if who != ours:
            problems.append(f"{part.source}: another audit's part (shard {part.shard()} of PATHs {' '.join(who[1])}"
                            f"{_excluding(who[2])}), not of this merge's audit (N={count}, PATHs "
                            f"{' '.join(ours[1])}{_excluding(ours[2])})")
            continue
        by_shard[part.shard()].append(part)
        problems.extend(_unfinished(part))
    problems += [f"shard {k}/{count}: missing (no part of it among the files given)"
                 for k in range(count) if f"{k}/{count}" not in by_shard]
    problems += [f"shard {shard}: {len(same)} parts ({', '.join(p.source for p in same)}), each counted"
                 for shard, same in by_shard.items() if len(same) > 1]
    here = sum(1 for k in range(count) if f"{k}/{count}" in by_shard)
    return problems, notes, f"parts: {here} of {count} shards of {' '.join(ours[1])}{_excluding(ours[2])}"


def _excluding(exclude: tuple[str, ...]) -> str:
    return f", --exclude {' '.join(exclude)}" if exclude else ""


def _unfinished(part: _Part) -> list[str]:
    closing = part.closing
    if closing is None:
        return [f"{part.source}: shard {part.shard()} cut short: no closing line after {part.reports} reports (its "
                "process was killed before it could write one: SIGKILL after a time limit, a lost node)"]
    found = []
    if not closing.get("finished"):
        found.append(f"{part.source}: shard {part.shard()} stopped by {closing.get('stopped_by') or 'a signal'} "
                     f"after {part.reports} reports: run it again")
    if closing["reports"] != part.reports:
        found.append(f"{part.source}: shard {part.shard()}: its closing line counts {closing['reports']} reports, "
                     f"the file holds {part.reports} (lines lost)")
    return found


def summarize(files: list[str]) -> int:
    """The summary of the JSON lines audits wrote (each FILE a part, or parts concatenated; ``-`` for stdin), after
    checking the parts: every shard of N once, each finished, all of one audit (the same PATHs and N). Exit 2
    where a part is missing, duplicated, unfinished or another audit's, or a file cannot be read: the merge is then
    not the whole audit, whatever the reports say; else as the audit: 1 if a run is affected, else 2 if one is
    unreadable (or a line is not a report, or a part's audit met an error), else 0."""
    read = _read(files)
    problems, notes, shards = _problems(read)
    read.tally.write(sys.stdout)
    if shards:
        print(f"  {shards}" + ("" if problems else ", each finished"), flush=True)
    errors = list(dict.fromkeys(error for part in read.parts if part.closing
                                for error in part.closing["errors"]))  # a PATH without runs: every shard's line
    for line in [*problems, *errors]:
        print(_ERROR + line, file=sys.stderr)
    for note in notes:
        print(f"accelerate-warmup-patch audit: note: {note}", file=sys.stderr)
    if read.broken:
        print(f"{_ERROR}{read.broken} line{'s' if read.broken != 1 else ''} that are not a report or a part's "
              "opening or closing line", file=sys.stderr)
    if problems:
        return 2
    return read.tally.exit_code([*errors, *(["broken"] if read.broken else [])])
