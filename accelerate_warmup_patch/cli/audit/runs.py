"""The runs one audit reports: each PATH walked (find.walk), each run once across the PATHs given, this shard's
only, and a row for what needs no judging (a folder that could not be listed, a symlinked folder, a PATH seen
already)."""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from . import stores
from .find import NoRun, Run, Symlinked, Unsearched, walk
from .report import Report
from .summary import Summary
from .verdicts import SKIPPED


@dataclass(frozen=True)
class Options:
    """How to audit: the command line's options (main.py builds them); ``verbose`` defaults to a row per symlinked
    folder here, as 0.5.0 reported them, and to their count alone on the command line (``-v`` for the rows)."""

    config_root: str | None = None
    exclude: tuple[str, ...] = ()
    shard: tuple[int, int] = (0, 1)  # K of N
    jobs: int = 1
    verbose: bool = True  # a row per symlinked folder (the command line's default is the count alone)


@dataclass(frozen=True)
class Row:
    """A report that needs no judging: a folder that could not be listed, a link, a PATH seen already."""

    report: dict[str, Any]


def found(paths: Sequence[str], options: Options, tally: Summary, errors: list[str]) -> Iterator[Run | Row]:
    """Each run under ``paths`` that is this shard's, once, and each row; a PATH with no run is an error line
    (``errors``, and stderr at once), and ``tally`` counts what was found."""
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


def _one_path(path: str, options: Options, tally: Summary, seen: dict[str, str] | None) -> Iterator[Run | Row]:
    root = stores.place(path).root
    prefix = str(root)
    real_root = "" if seen is None else prefix if isinstance(root, stores.UrlPath) else os.path.realpath(path)
    again: list[str] = []
    new = 0
    for item in walk(path, options.exclude):
        relative = _relative(item.path, prefix)
        if isinstance(item, Symlinked):
            tally.skipped_link(str(item.path))
            if options.verbose and _mine(relative, options.shard):
                yield Row(Report(str(item.path), verdict=SKIPPED, why="a symlink to a folder: not followed (name it "
                                 "as a PATH to audit what it points to)").row())
            continue
        if isinstance(item, Unsearched):
            if _mine(relative, options.shard):
                yield Row(Report(str(item.path)).unreadable(item.why).row())
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
        tally.repeated += 1
        yield Row(Report(path, verdict=SKIPPED,
                         why=f"the same run{'s' if len(again) > 1 else ''} as {', '.join(dict.fromkeys(again))}, "
                             "reported once (above)").row())


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
