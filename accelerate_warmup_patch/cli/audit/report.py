"""The command: every PATH's runs judged and reported, as a table or JSON, and the exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ... import releases
from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .find import NoRun, find_runs
from .judge import audit_run, blank_report, lr_text, lrs_text, unreadable_report
from .verdicts import AFFECTED, SKIPPED, UNREADABLE


def audit(paths: list[str], config_root: str | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The reports of every run under ``paths`` (each once) and of every folder under them that could not be
    searched, and one error line per PATH with no run found."""
    reports: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: dict[str, str] = {}  # the real path of a run's newest tag -> the run's path as first reported
    for path in paths:
        try:
            found = find_runs(path)
        except NoRun as error:
            errors.append(str(error))
            continue
        except Exception as error:  # a bug of ours on an odd folder: that PATH's line, not a traceback
            errors.append(f"{path}: the audit failed on it ({type(error).__name__}: {str(error)[:200]})")
            continue
        for folder, verdict, why in found.skipped:
            reports.append({**blank_report(folder), "verdict": verdict, "why": why})
        before, again = len(reports), []
        for run in found.runs:
            key = os.path.realpath(run.tag)
            if key in seen:
                again.append(seen[key])
                continue
            seen[key] = str(run.path)
            reports.append(_plain_report(audit_run(run, config_root)))
        if again and len(reports) == before:  # a PATH named twice, or through a link: still its line
            reports.append({**blank_report(path), "verdict": SKIPPED,
                            "why": f"the same run{'s' if len(again) > 1 else ''} as {', '.join(again)}, "
                                   "reported once (above)"})
    return reports, errors


def _plain_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report as plain JSON data; a value that will not go (a nest past the bound, say) makes it unreadable."""
    try:
        plain = checkpoint_pickle.plain(report)
        json.dumps(plain)
        return plain  # type: ignore[no-any-return]
    except (Unreadable, ValueError, TypeError, RecursionError) as error:
        return unreadable_report(blank_report(str(report.get("path"))), f"its report cannot be written ({error})")


def main(paths: list[str], as_json: bool = False, config_root: str | None = None) -> int:
    """Exit 1 if any run is affected; else 2 if anything could not be read (a PATH with no run, an unreadable run,
    a folder that cannot be listed); else 0. A run that could not be judged never makes it 1."""
    reports, errors = audit(paths, config_root)
    for error in errors:
        print(f"accelerate-warmup-patch audit: error: {error}", file=sys.stderr)
    if as_json:
        print(json.dumps(reports, indent=2))
    elif reports:
        print_table(reports)
    if any(r["verdict"] == AFFECTED for r in reports):
        return 1
    return 2 if errors or any(r["verdict"] == UNREADABLE for r in reports) else 0


def print_table(reports: list[dict[str, Any]]) -> None:
    header = ("verdict", "DeepSpeed", "scheduler", "groups", "step 0 ran at", f"on {releases.NEWEST_DEEPSPEED}",
              "run")
    rows = [(r["verdict"].upper() if r["verdict"] == AFFECTED else r["verdict"], _releases(r),
             r["scheduler"] or "-", "?" if r["param_groups"] is None else str(r["param_groups"]),
             lrs_text(r["step0_lrs"], r["step0_lr"]), lrs_text(r["newest_step0_lrs"], r["newest_step0_lr"]), r["path"])
            for r in reports]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    print()
    for r in reports:
        print(f"{r['path']}: {r['verdict']}")
        if r["checkpoint"]:
            print(f"  read {r['checkpoint']}")
        if r["step0_checkpoint"] and r["step0_checkpoint"] != r["checkpoint"]:
            print(f"  step 0 from {r['step0_checkpoint']} (DeepSpeed {r['step0_deepspeed_version']})")
        if r["record"]:
            print(f"  record: {_record_line(r['record'])}")
        if r["scheduler"]:
            params = ", ".join(f"{k}={v}" for k, v in (r["params"] or {}).items())
            print(f"  {r['scheduler']}({params}); optimizer lr {lr_text(r['optimizer_lr'])}; "
                  f"at iteration {_or_unknown(r['last_batch_iteration'])}, {_or_unknown(r['global_steps'])} "
                  "optimizer steps")
        print(f"  {r['why']}")
        for note in r["notes"]:
            print(f"  note: {note}")


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
