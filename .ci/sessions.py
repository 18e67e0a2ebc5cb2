"""Run CI's nox sessions two at a time and say, as it happens, what runs: .ci/run's second half.

    python3 .ci/sessions.py                 every session of noxfile.CI_SESSIONS, in its order (longest first)
    python3 .ci/sessions.py lint demo       the sessions named, in that order
    python3 .ci/sessions.py --parallel 1    one at a time

`nox --parallel 2 -s ci` runs the same sessions, but when its output is not a terminal (a CI log) nox holds each
session's output until the session ends: a log stayed silent for 33 minutes. Here each session runs as its own
`nox -s NAME`, its output going to a file, and this script prints `ci: start NAME`, a line at least once a minute
naming what runs and for how long, and `ci: end NAME: passed|FAILED in M min`. When a session ends its log follows
in full (pytest's closing summary, "N passed, ...", with it); at the end, one line per session with its result, its
time and that summary. The exit status is 1 when any session failed. Standard library and nox only.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".nox" / "_ci_logs"
HEARTBEAT_S = 60
# pytest's closing line ("361 passed, 12 skipped in 1312.01s"), else nox's own last words on the session
PYTEST_SUMMARY = re.compile(r"\b(passed|failed|errors?|skipped|no tests ran)\b.* in [\d.]+s\b")
NOX_SUMMARY = re.compile(r"^nox > Session .* (was successful|failed|aborted)")


@dataclass
class Run:
    name: str
    log: Path
    started: float = field(default_factory=time.monotonic)
    process: subprocess.Popen[bytes] | None = None
    output: IO[bytes] | None = None
    ended: float | None = None
    code: int | None = None

    def minutes(self, now: float | None = None) -> float:
        return ((self.ended or now or time.monotonic()) - self.started) / 60

    @property
    def passed(self) -> bool:
        return self.code == 0


def ci_sessions() -> list[str]:
    """noxfile.CI_SESSIONS: the noxfile is the one list of what CI runs."""
    sys.path.insert(0, str(ROOT))
    import noxfile

    return list(noxfile.CI_SESSIONS)


def say(line: str) -> None:
    print(f"ci: {line}", flush=True)


def start(name: str) -> Run:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / (re.sub(r"[^\w.]+", "-", name).strip("-") + ".log")
    run = Run(name, log)
    run.output = open(log, "wb")  # noqa: SIM115  (closed in finish())
    # the interpreter that imported the noxfile runs nox: .ci/run installed nox into it
    run.process = subprocess.Popen([sys.executable, "-m", "nox", "-s", name], cwd=ROOT, stdout=run.output,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    say(f"start {name} (log: {log.relative_to(ROOT)})")
    return run


def finish(run: Run) -> None:
    assert run.process is not None and run.output is not None
    run.code = run.process.returncode
    run.ended = time.monotonic()
    run.output.close()
    say(f"end {run.name}: {'passed' if run.passed else 'FAILED'} in {run.minutes():.1f} min")
    text = run.log.read_text(errors="replace")
    say(f"{run.name}'s log ({len(text.splitlines())} lines):")
    print(text, end="" if text.endswith("\n") else "\n", flush=True)
    say(f"end of {run.name}'s log")


def summary_line(run: Run) -> str:
    """What sums the session up: each of its pytest runs' closing line (the suite runs in two passes), else nox's
    last."""
    lines = run.log.read_text(errors="replace").splitlines()
    found = [line.strip(" =") for line in lines if PYTEST_SUMMARY.search(line)]
    if found:
        return "; ".join(found)
    found = [line.strip(" =") for line in lines if NOX_SUMMARY.search(line)]
    if found:
        return found[-1]
    return "(no summary line in its log)"


def heartbeat(begun: float, running: list[Run], waiting: int) -> None:
    now = time.monotonic()
    names = ", ".join(f"{run.name} ({run.minutes(now):.0f} min)" for run in running)
    say(f"{(now - begun) / 60:.0f} min: running {names}; {waiting} waiting")


def run_all(names: list[str], parallel: int) -> list[Run]:
    begun = last_beat = time.monotonic()
    waiting = list(names)
    running: list[Run] = []
    done: list[Run] = []
    say(f"{len(names)} sessions, {parallel} at a time: {', '.join(names)}")
    try:
        while waiting or running:
            while waiting and len(running) < parallel:
                running.append(start(waiting.pop(0)))
            time.sleep(1)
            for run in [r for r in running if r.process is not None and r.process.poll() is not None]:
                running.remove(run)
                finish(run)
                done.append(run)
            if running and time.monotonic() - last_beat >= HEARTBEAT_S:
                last_beat = time.monotonic()
                heartbeat(begun, running, len(waiting))
    finally:
        for run in running:  # interrupted: the sessions still running go with this script
            if run.process is not None and run.process.poll() is None:
                run.process.terminate()
    say(f"all {len(done)} sessions ended in {(time.monotonic() - begun) / 60:.1f} min:")
    for run in done:
        say(f"  {run.name}: {'passed' if run.passed else 'FAILED'} in {run.minutes():.1f} min: {summary_line(run)}")
    return done


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", nargs="*", help="nox sessions to run (default: noxfile.CI_SESSIONS)")
    parser.add_argument("--parallel", type=int, default=2, help="sessions at a time (default 2: two cores)")
    args = parser.parse_args(argv)
    done = run_all(args.sessions or ci_sessions(), max(1, args.parallel))
    failed = [run.name for run in done if not run.passed]
    if failed:
        say(f"FAILED: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
