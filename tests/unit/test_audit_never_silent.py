"""Audit v5 (#55 item 5): never silent. The summary is always written, naming what was skipped and why; an audit
that judged nothing (every folder a symlinked one, a PATH with no run, a shard that took none) says so and exits 2.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch.cli import audit as audit_cli
from accelerate_warmup_patch.cli.audit import Options


def _text(*paths: Path, options: Options | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = audit_cli.main([str(p) for p in paths], options=options or Options(verbose=False))
    return code, out.getvalue(), err.getvalue()


def test_a_folder_whose_runs_are_all_symlinked_says_so_names_them_and_exits_2(tmp_path: Path) -> None:
    # the linked runs are affected; the PATH holds only links to them (#55 item 5: it printed nothing, exit 0)
    for name in ("a", "b"):
        files.write_run(tmp_path / "elsewhere" / name)
        (tmp_path / "runs").mkdir(exist_ok=True)
        os.symlink(tmp_path / "elsewhere" / name, tmp_path / "runs" / name)
    code, out, _ = _text(tmp_path / "runs")
    assert code == 2, out
    assert "skipped: 2 symlinked folders not followed" in out and str(tmp_path / "runs" / "a") in out, out
    assert "nothing was judged: every folder of runs met was a symlinked folder" in out.splitlines()[-1], out


def test_the_summary_names_the_symlinked_folders_beside_judged_runs(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "real", scheduler={"type": "OneCycle", "params": {}})
    for index in range(5):
        os.symlink(tmp_path / "runs" / "real", tmp_path / "runs" / f"link{index}")
    code, out, _ = _text(tmp_path / "runs")
    assert code == 0 and "nothing was judged" not in out, out
    line = next(x for x in out.splitlines() if "symlinked" in x)
    assert "skipped: 5 symlinked folders" in line and "and 2 more" in line, line


def test_a_shard_that_took_no_run_says_so_and_exits_2(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "only")
    codes = {}
    for index in range(2):
        code, out, _ = _text(tmp_path / "runs", options=Options(shard=(index, 2), verbose=False))
        codes[index] = code
        if code == 2:
            assert "nothing was judged: none of the 1 run found is this shard's" in out, out
    assert sorted(codes.values()) == [1, 2], codes  # the run is affected in its shard; the other judged nothing


def test_a_path_with_no_run_is_its_error_line_then_the_summary(tmp_path: Path) -> None:
    code, out, err = _text(tmp_path)
    assert code == 2 and "no DeepSpeed checkpoint" in err, err
    assert out.startswith("summary: 0 reports") and "no run was found" in out, out


def test_a_path_named_twice_is_named_as_skipped_in_the_summary(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run")
    code, out, _ = _text(tmp_path / "run", tmp_path / "run")
    assert code == 1 and "skipped: 1 PATH whose runs were all reported once already" in out, out
