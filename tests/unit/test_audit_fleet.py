"""`audit` of a fleet: reports written as they come, stopped cleanly by Ctrl-C and SIGTERM, split into shards,
judged in worker processes, with excludes, symlinked folders counted, and several engines in one folder.

Each test runs the command line as a user does (`python -m accelerate_warmup_patch audit`, a child process) on
runs written by tests/unit/audit_files.py and hard-linked into a fleet.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch.cli import audit as audit_cli

PACKAGE_ROOT = str(Path(audit_cli.__file__).parents[3])
LIMIT_S = 120  # a hang, not a timing: every test here takes well under a second or two


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelerate_warmup_patch", "audit", *args]


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}, "PYTHONPATH": PACKAGE_ROOT}


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command(*args), env=_env(), capture_output=True, text=True, timeout=LIMIT_S)


def lines(proc: subprocess.CompletedProcess[str] | str) -> list[dict[str, Any]]:
    """The reports of a --jsonl output (without its part's opening and closing lines)."""
    return [r for r in map(json.loads, (proc if isinstance(proc, str) else proc.stdout).splitlines()) if "verdict" in r]


def ends(out: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A --jsonl output's opening and closing lines."""
    first, *_, last = map(json.loads, out.splitlines())
    assert first["audit_part"] == "opening" and last["audit_part"] == "closing", (first, last)
    return first, last


def fleet(root: Path, runs: int) -> Path:
    """``runs`` copies of one unpatched 0.15.2 run (affected), hard links of its files, 20 to a folder."""
    source = root / "source"
    files.write_run(source)
    for index in range(runs):
        run = root / "fleet" / f"group{index // 20:03d}" / f"run{index:05d}"
        (run / "global_step6").mkdir(parents=True)
        os.link(source / "latest", run / "latest")
        os.link(source / "global_step6" / "mp_rank_00_model_states.pt",
                run / "global_step6" / "mp_rank_00_model_states.pt")
    return root / "fleet"


# Streaming and stopping ----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("form", ["--jsonl", "--json"])
def test_a_stopped_audit_leaves_every_judged_run_whole_and_a_partial_summary(
        tmp_path: Path, signum: int, code: int, form: str) -> None:
    runs = fleet(tmp_path, 1000)
    proc = subprocess.Popen(command(form, str(runs)), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # out before the walk is over: the audit streams
    if form == "--jsonl":
        first += proc.stdout.readline()  # the first report, after the part's opening line
    proc.send_signal(signum)
    rest, stderr = proc.stdout.read(), proc.stderr.read()  # communicate() would skip what readline buffered
    proc.wait(timeout=LIMIT_S)
    assert proc.returncode == code, (proc.returncode, stderr)
    assert "Traceback" not in stderr and f"stopped by {signal.Signals(signum).name}" in stderr, stderr
    reports = lines(first + rest) if form == "--jsonl" else json.loads(first + rest)  # --json: one valid document
    assert 0 < len(reports) < 1000 and all(r["verdict"] == "affected" for r in reports), len(reports)
    assert f": {len(reports)} report" in stderr, stderr
    if form == "--jsonl":
        assert ends(first + rest)[1] == {"audit_part": "closing", "shard": "0/1", "paths": [str(runs)],
                                         "exclude": [], "reports": len(reports), "finished": False,
                                         "stopped_by": signal.Signals(signum).name, "errors": []}


def test_jsonl_is_one_report_a_line_and_the_summary_goes_to_stderr(tmp_path: Path) -> None:
    proc = audit("--jsonl", str(fleet(tmp_path, 30)))
    assert proc.returncode == 1 and len(lines(proc)) == 30 == len(proc.stdout.splitlines()) - 2, proc.stderr
    opening, closing = ends(proc.stdout)
    assert opening["shard"] == closing["shard"] == "0/1" and closing["reports"] == 30 and closing["finished"]
    assert "30 reports" in proc.stderr and "30 affected" in proc.stderr and "DeepSpeed 0.15.2: 30" in proc.stderr


def test_the_text_output_is_a_block_per_run_then_the_summary(tmp_path: Path) -> None:
    runs = fleet(tmp_path, 3)
    proc = audit(str(runs))
    assert proc.returncode == 1 and proc.stderr == "", proc.stderr
    assert f"{runs / 'group000' / 'run00000'}: affected" in proc.stdout.splitlines()
    assert proc.stdout.splitlines()[-2].startswith("summary: 3 reports in "), proc.stdout


# Shards and jobs ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_shards_are_disjoint_and_together_the_whole_fleet(tmp_path: Path) -> None:
    runs = fleet(tmp_path, 60)
    whole = {r["path"] for r in lines(audit("--jsonl", str(runs)))}
    parts = [{r["path"] for r in lines(audit("--jsonl", "--shard", f"{k}/3", str(runs)))} for k in range(3)]
    assert sum(len(part) for part in parts) == len(whole) == 60 and set().union(*parts) == whole
    assert all(part for part in parts)  # each machine of the array has work


@pytest.mark.slow
def test_merged_parts_summarize_as_the_whole(tmp_path: Path) -> None:
    runs = fleet(tmp_path, 40)
    for k in range(2):
        (tmp_path / f"part-{k}.jsonl").write_text(audit("--jsonl", "--shard", f"{k}/2", str(runs)).stdout)
    proc = audit("--summarize", *(str(tmp_path / f"part-{k}.jsonl") for k in range(2)))
    assert proc.returncode == 1 and proc.stdout.startswith("summary: 40 reports: 40 affected"), proc
    assert f"  parts: 2 of 2 shards of {runs}, each finished" in proc.stdout.splitlines() and proc.stderr == ""


def _task(runs: Path, shard: str, part: Path, *, stop: bool = False) -> None:
    """One array task: its part written to a file as `> part-K.jsonl` does; ``stop``: SIGTERM once a report is out
    (as scancel or a time limit sends it; the pipe's buffer holds far fewer lines than the shard's runs)."""
    proc = subprocess.Popen(command("--jsonl", "--shard", shard, str(runs)), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.readline() + proc.stdout.readline()  # the opening line and a first report
    if stop:
        proc.send_signal(signal.SIGTERM)
    out += proc.stdout.read()
    said = proc.stderr.read()
    # 2: a shard that took none of the runs, and its summary says so (#55 item 5: an audit that judged nothing)
    code = proc.wait(timeout=LIMIT_S)
    assert code in ((143,) if stop else (0, 1, 2)) and (code != 2 or "none of the" in said), said
    part.write_text(out)


@pytest.mark.slow
def test_a_merge_names_each_missing_empty_stopped_cut_twice_given_and_foreign_part_and_exits_2(
        tmp_path: Path) -> None:
    # an array of 6 tasks over 1200 runs (about 200 each): 0 and 1 finished, 2 never ran (no file), 3 failed before
    # the audit ran (an empty file), 4 stopped by SIGTERM, 5 killed without a chance to close (SIGKILL: its last
    # line gone); beside them a copy of part 1 and an earlier audit's part of another folder, matched by the glob
    runs = fleet(tmp_path, 1200)
    parts = tmp_path / "parts"
    parts.mkdir()
    for k in (0, 1, 5):
        _task(runs, f"{k}/6", parts / f"part-{k}.jsonl")
    _task(runs, "4/6", parts / "part-4.jsonl", stop=True)
    (parts / "part-3.jsonl").write_text("")
    cut = parts / "part-5.jsonl"
    cut.write_text("".join(cut.read_text().splitlines(keepends=True)[:-1]))
    (parts / "part-1-again.jsonl").write_bytes((parts / "part-1.jsonl").read_bytes())
    files.write_run(tmp_path / "other" / "run")
    _task(tmp_path / "other", "0/6", parts / "part-old.jsonl")
    proc = audit("--summarize", *sorted(map(str, parts.glob("part-*.jsonl"))))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
    errors = [line.removeprefix("accelerate-warmup-patch audit: error: ") for line in proc.stderr.splitlines()]
    stopped = len(lines((parts / "part-4.jsonl").read_text()))
    assert 0 < stopped < 150, stopped
    assert sorted(errors) == sorted([
        f"{parts / 'part-3.jsonl'}: empty: its task wrote nothing (it never ran the audit, or failed before it "
        "started)",
        f"{parts / 'part-4.jsonl'}: shard 4/6 stopped by SIGTERM after {stopped} reports: run it again",
        f"{cut}: shard 5/6 cut short: no closing line after {len(lines(cut.read_text()))} reports (its process was "
        "killed before it could write one: SIGKILL after a time limit, a lost node)",
        f"{parts / 'part-old.jsonl'}: another audit's part (shard 0/6 of PATHs {tmp_path / 'other'}), not of this "
        f"merge's audit (N=6, PATHs {runs})",
        "shard 2/6: missing (no part of it among the files given)",
        "shard 3/6: missing (no part of it among the files given)",
        f"shard 1/6: 2 parts ({parts / 'part-1-again.jsonl'}, {parts / 'part-1.jsonl'}), each counted"]), errors
    assert f"  parts: 4 of 6 shards of {runs}" in proc.stdout.splitlines(), proc.stdout


def test_a_file_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path) -> None:
    _task(fleet(tmp_path, 5), "0/1", tmp_path / "part-0.jsonl")
    for bad in (tmp_path / "part-9.jsonl", tmp_path):
        proc = audit("--summarize", str(tmp_path / "part-0.jsonl"), str(bad))
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc
        assert proc.stderr.startswith(f"accelerate-warmup-patch audit: error: {bad}: cannot read it ("), proc.stderr


def test_parts_of_an_older_audit_without_their_lines_are_read_with_a_note(tmp_path: Path) -> None:
    part = tmp_path / "part-0.jsonl"
    _task(fleet(tmp_path, 5), "0/1", part)
    part.write_text("".join(part.read_text().splitlines(keepends=True)[1:-1]))  # as 0.6.0 wrote it
    proc = audit("--summarize", str(part))
    assert proc.returncode == 1 and proc.stdout.startswith("summary: 5 reports: 5 affected"), proc
    assert proc.stderr == (f"accelerate-warmup-patch audit: note: {part}: 5 reports with no opening or closing line "
                           "(an audit older than 0.7.0 writes none): whether that part is whole, and which shard it "
                           "is, cannot be told\n"), proc.stderr


def test_jobs_give_the_same_reports_in_the_same_order(tmp_path: Path) -> None:
    runs = fleet(tmp_path, 40)
    one, two = audit("--jsonl", str(runs)), audit("--jsonl", "--jobs", "2", str(runs))
    assert one.stdout == two.stdout and two.returncode == one.returncode == 1, two.stderr


# What the walk enters ----------------------------------------------------------------------------------------

def test_an_excluded_folder_is_not_entered(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "kept")
    files.write_run(tmp_path / "runs" / "wandb" / "run")
    files.write_run(tmp_path / "runs" / "a" / "hf_export")
    proc = audit("--jsonl", "--exclude", "wandb", "--exclude", "a/hf_*", str(tmp_path / "runs"))
    assert [Path(r["path"]).name for r in lines(proc)] == ["kept"], proc


def test_symlinked_folders_are_counted_and_named_only_with_verbose(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "run")
    (tmp_path / "runs" / "link").symlink_to(tmp_path / "runs" / "run")
    quiet, verbose = audit("--jsonl", str(tmp_path / "runs")), audit("--jsonl", "-v", str(tmp_path / "runs"))
    assert [r["verdict"] for r in lines(quiet)] == ["affected"] and "1 symlinked folder" in quiet.stderr
    assert sorted(r["verdict"] for r in lines(verbose)) == ["affected", "skipped"], verbose


# Several engines in one folder (issue 41 item 5) -----------------------------------------------------------------

def test_two_engines_saved_by_accelerate_are_each_judged_and_the_affected_one_shown(tmp_path: Path) -> None:
    # accelerate's save_state of two prepared models: tags pytorch_model and pytorch_model_1 in one folder
    # one engine a class that needs no fix on any release (proof by the table), the other an affected one
    files.write_run(tmp_path / "state", tag="pytorch_model", version="0.19.8",
                    scheduler={"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}})
    files.write_run(tmp_path / "state", tag="pytorch_model_1")
    proc = audit("--jsonl", str(tmp_path / "state"))
    reports = {r["engine"]: r for r in lines(proc)}
    assert sorted(reports) == ["pytorch_model", "pytorch_model_1"], proc
    assert reports["pytorch_model"]["verdict"] == "not affected"
    assert reports["pytorch_model_1"]["verdict"] == "affected" and proc.returncode == 1
    assert all(r["path"] == str(tmp_path / "state") for r in reports.values())
    text = audit(str(tmp_path / "state")).stdout
    assert f"{tmp_path / 'state'} (pytorch_model_1): affected" in text.splitlines(), text


def test_engines_under_accelerates_automatic_checkpoints_are_each_judged_over_their_saves(tmp_path: Path) -> None:
    for round_, steps in ((0, 3), (1, 6)):
        save = tmp_path / "project" / "checkpoints" / f"checkpoint_{round_}"
        files.write_run(save, tag="pytorch_model", global_steps=steps)
        files.write_run(save, tag="pytorch_model_1", global_steps=steps, version="0.19.8" if round_ else "0.15.2")
    reports = {r["engine"]: r for r in lines(audit("--jsonl", str(tmp_path / "project")))}
    assert sorted(reports) == ["pytorch_model", "pytorch_model_1"], reports
    for engine, report in reports.items():
        assert report["path"] == str(tmp_path / "project" / "checkpoints"), report
        assert report["step0_checkpoint"].endswith(f"checkpoint_0/{engine}/mp_rank_00_model_states.pt"), report
        assert report["checkpoint"].endswith(f"checkpoint_1/{engine}/mp_rank_00_model_states.pt"), report
    assert reports["pytorch_model_1"]["deepspeed_version"] == "0.19.8"


def test_one_engine_keeps_its_report_as_before(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", tag="global_step3", global_steps=3)
    files.write_run(tmp_path / "run", tag="global_step6")
    (report,) = lines(audit("--jsonl", str(tmp_path / "run")))
    assert report["engine"] is None and report["checkpoint"].endswith("global_step6/mp_rank_00_model_states.pt")


def test_a_run_named_by_its_tag_folder_and_inside_a_folder_of_runs_is_reported_once(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "a")
    files.write_run(tmp_path / "runs" / "b")
    proc = audit("--jsonl", str(tmp_path / "runs" / "a" / "global_step6"), str(tmp_path / "runs"))
    assert [Path(r["path"]).name for r in lines(proc)] == ["global_step6", "b"], proc.stdout


def test_a_part_line_with_the_wrong_types_is_a_broken_line_not_a_traceback(tmp_path: Path) -> None:
    part = tmp_path / "part-0.jsonl"
    _task(fleet(tmp_path, 2), "0/1", part)
    first, *reports, last = part.read_text().splitlines()
    forged = {**json.loads(last), "paths": [{"a": 1}], "errors": [["x"]]}
    part.write_text("\n".join([first, *reports, json.dumps(forged), json.dumps({**forged, "shard": "0/99999999"}),
                               "[" * 200_000]))
    proc = audit("--summarize", str(part))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc
    assert "3 lines that are not a report or a part's opening or closing line" in proc.stderr
    assert "cut short: no closing line after 2 reports" in proc.stderr, proc.stderr


def _stderr_of_a_terminal(args: list[str]) -> str:
    """What the audit writes to stderr when stderr is a terminal (a pseudo-terminal) and stdout a pipe."""
    import pty

    leader, follower = pty.openpty()
    try:
        subprocess.run(command(*args), env=_env(), stdout=subprocess.PIPE, stderr=follower, timeout=LIMIT_S)
    finally:
        os.close(follower)
    out = b""
    try:
        while chunk := os.read(leader, 65536):
            out += chunk
    except OSError:  # EIO: the terminal's other end is closed and everything was read
        pass
    finally:
        os.close(leader)
    return out.decode("utf-8", "replace")


def test_a_terminal_sees_one_progress_line_of_the_runs_judged_and_a_pipe_none(tmp_path: Path) -> None:
    for name in ("a", "b"):
        files.write_run(tmp_path / name)
    seen = _stderr_of_a_terminal([str(tmp_path)])
    assert "judged 1 run, found " in seen and seen.endswith("\r\x1b[K"), repr(seen)  # cleared at the end
    assert "judged" not in audit(str(tmp_path)).stderr
