"""The audit's output, one writer per kind (``--format``): text blocks, one JSON list, JSON lines; each report
written and flushed as it comes."""

from __future__ import annotations

import json
import textwrap
from typing import Any, TextIO

from ... import releases
from .report import lr_text, lrs_text

TEXT, JSON, JSONL = "text", "json", "jsonl"


class Writer:
    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, report: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _put(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()


class JsonLines(Writer):
    def write(self, report: dict[str, Any]) -> None:
        self._put(json.dumps(report) + "\n")


class JsonList(Writer):
    """One JSON list, as ``json.dumps(reports, indent=2)`` writes it, written an element at a time."""

    def __init__(self, out: TextIO) -> None:
        super().__init__(out)
        self.count = 0

    def write(self, report: dict[str, Any]) -> None:
        self._put(("[\n" if not self.count else ",\n") + textwrap.indent(json.dumps(report, indent=2), "  "))
        self.count += 1

    def close(self) -> None:
        self._put("\n]\n" if self.count else "[]\n")


class Blocks(Writer):
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
                     f"ran at {lrs_text(r['step0_lrs'], r['step0_lr'])}, on {releases.BEHAVIOR_REFERENCE} at "
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


WRITERS: dict[str, type[Writer]] = {TEXT: Blocks, JSON: JsonList, JSONL: JsonLines}
