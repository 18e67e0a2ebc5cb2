"""The audit's Slurm array (deploy/audit-array.sbatch, docs/audit.md) under a real Slurm of the tests' own
(tests/slurm.py), cancelled by ``scancel`` at several moments of its tasks: every part keeps its closing line and its
task's summary, and ``--summarize`` names each stopped part, never one cut short.

The script ``exec``s the audit, so Slurm's SIGTERM reaches the audit itself. Behind a shell it reached the shell too,
which ended first, and Slurm then killed the audit: in 2 of 5 cancels the part lost its closing line (#57).

The fleet is one unpatched 0.15.2 run (tests/unit/audit_files.py, no torch) hard-linked into thousands of run folders,
so that each task audits for a few seconds. ``nox -s admin`` runs this module (root; Debian's slurmctld, slurmd,
slurm-client and munge: .ci/run installs them); without them it skips and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ports
import pytest
import slurm
from ports import port

sys.path.insert(0, str(Path(__file__).parent / "unit"))
import audit_files

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "deploy" / "audit-array.sbatch"
RUNS = 12000  # four shards of about 3000 runs: each task audits for a few seconds
LIMIT_S = 300  # a hang, not a timing
# each task's moment of scancel: as soon as it runs (its audit may not have started), once its part is opened, once
# it holds 100 reports, once it holds 1000
MOMENTS = ("running", "opened", "100 reports", "1000 reports")


pytestmark = pytest.mark.skipif(not os.environ.get("AWP_ADMIN_RECIPES"),
                                reason="the admin's recipes, run for real, are `nox -s admin`'s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    try:
        with slurm.cluster(tmp_path_factory.mktemp("slurm"), port(ports.REAL_SLURM)) as env:
            yield env
    except slurm.Unavailable as error:
        pytest.skip(f"the Slurm array needs {error}")


def _fleet(root: Path) -> Path:
    """``RUNS`` copies of one unpatched 0.15.2 run (affected), hard links of its files, 20 to a folder."""
    source = root / "source"
    audit_files.write_run(source)
    for index in range(RUNS):
        run = root / "fleet" / f"group{index // 20:04d}" / f"run{index:05d}"
        (run / "global_step6").mkdir(parents=True)
        os.link(source / "latest", run / "latest")
        os.link(source / "global_step6" / "mp_rank_00_model_states.pt",
                run / "global_step6" / "mp_rank_00_model_states.pt")
    return root / "fleet"


def _slurm(cluster: dict[str, str], *command: str) -> str:
    proc = subprocess.run(command, env={**os.environ, **cluster}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (command, proc.stdout, proc.stderr)
    return proc.stdout


def _reached(moment: str, part: Path) -> bool:
    lines = part.read_text().count("\n") if part.is_file() else 0
    return {"running": True, "opened": lines >= 1, "100 reports": lines >= 101, "1000 reports": lines >= 1001}[moment]


def _cancel_each_at_its_moment(cluster: dict[str, str], job: str, work: Path) -> None:
    """Watch each task; scancel it at its moment; wait until the array is gone from the queue."""
    waiting = dict(enumerate(MOMENTS))
    deadline = time.monotonic() + LIMIT_S
    while True:
        states = dict(line.split() for line in _slurm(cluster, "squeue", "-h", "-r", "-j", job, "-o",
                                                        "%K %T").splitlines() if line.strip())
        if not states:
            return
        for task, moment in list(waiting.items()):
            if states.get(str(task)) == "RUNNING" and _reached(moment, work / f"part-{task}.jsonl"):
                _slurm(cluster, "scancel", f"{job}_{task}")
                del waiting[task]
        assert time.monotonic() < deadline, (states, waiting)
        time.sleep(0.02)


def _part(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_cancelled_array_task_keeps_its_closing_line_and_summary_at_every_moment(
        cluster: dict[str, str], tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    # the script as written; the command line only sizes the array to this machine (options there win over #SBATCH)
    job = _slurm(cluster, "sbatch", "--parsable", f"--array=0-{len(MOMENTS) - 1}", "--cpus-per-task=1",
                 f"--chdir={work}", str(SCRIPT), str(fleet)).strip().split(";")[0]
    _cancel_each_at_its_moment(cluster, job, work)
    stopped = []
    for task, moment in enumerate(MOMENTS):
        part, err = work / f"part-{task}.jsonl", (work / f"audit-{task}.err").read_text()
        lines = _part(part) if part.is_file() else []
        if not lines:  # cancelled before its audit started: no part or an empty one, which --summarize names
            assert moment == "running", (moment, err)
            continue
        opening, closing, reports = lines[0], lines[-1], lines[1:-1]
        assert opening["audit_part"] == "opening" and closing["audit_part"] == "closing", (moment, lines[-2:], err)
        assert closing["reports"] == len(reports) and all(r["verdict"] == "affected" for r in reports), moment
        if closing["finished"]:
            assert closing["stopped_by"] is None and "summary:" in err, (moment, err)
        else:
            assert closing["stopped_by"] == "SIGTERM", (moment, closing)
            assert "summary (stopped by SIGTERM" in err, (moment, err)
            stopped.append(f"{part}: shard {task}/{len(MOMENTS)} stopped by SIGTERM after {len(reports)} report")
    assert len(stopped) >= len(MOMENTS) - 1, stopped  # the later moments come mid-audit: each was stopped
    merged = subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", "audit", "--summarize",
                             *map(str, sorted(work.glob("part-*.jsonl")))], capture_output=True, text=True,
                            timeout=LIMIT_S)
    assert merged.returncode == 2 and "cut short" not in merged.stderr, merged
    for line in stopped:
        assert line in merged.stderr, (line, merged.stderr)
