"""`audit` on odd and hostile files, all in this one process, standard library only: every path gets its line, in
bounded time and memory, a good run named beside a broken one is still reported, and the exit status is 1 only
where a run is affected (never for a crash).

Each case builds its files with the standard library (tests/unit/audit_files.py), audits the broken path alone
(the exit status it gets alone, its verdict and reason, measured: time, tracemalloc's peak and the process's
maxrss, printed), then beside a good run of DeepSpeed 0.15.2 (`affected`, step 0 at 0.001). A case that would
hang is ended by an alarm, which fails it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch.cli import audit as audit_cli

MIB = 1 << 20
PEAK_LIMIT = 300 * MIB
HANG_LIMIT_S = 120  # a case that takes this long is taken as hung


class Hung(Exception):
    pass


def _reset_peak_rss() -> bool:
    """Linux: reset this process's peak RSS (VmHWM), so that it measures one case; False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _status_bytes(field: str) -> int:
    """A figure of /proc/self/status in bytes: VmHWM (the peak RSS), VmRSS (the RSS now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no {field}")


@contextlib.contextmanager
def measured(name: str) -> Iterator[dict[str, float]]:
    """Time and peak memory of the block, printed; an alarm ends a block that hangs. The peak is the process's
    peak RSS during the block where Linux lets it be reset (interpreter and pytest included), else tracemalloc's
    (which slows allocation-heavy code down tens of times). maxrss: the process's, since it started."""
    def alarm(signum: int, frame: Any) -> None:
        raise Hung(f"{name}: still running after {HANG_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_LIMIT_S)
    rss = _reset_peak_rss()
    # what the process held before the case (pytest, and in a nox session of the suite torch and DeepSpeed): the
    # case's own cost is what its peak adds to it
    before = _status_bytes("VmRSS") if rss else 0
    if not rss:
        tracemalloc.start()
    start = time.perf_counter()
    figures: dict[str, float] = {}
    try:
        yield figures
    finally:
        figures["seconds"] = time.perf_counter() - start
        if rss:
            figures["peak"] = _status_bytes("VmHWM")
        else:
            figures["peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        figures["added"] = figures["peak"] - before
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        figures["maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        print(f"\n[audit case] {name}: {figures['seconds']:.2f} s, peak {figures['peak'] / MIB:.1f} MiB "
              f"({'peak RSS of the whole process' if rss else 'tracemalloc'}; the case added "
              f"{figures['added'] / MIB:.1f} MiB), maxrss {figures['maxrss'] / MIB:.0f} "
              "MiB")


def run_audit(*paths: str, config_root: str | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """The CLI's main in this process: exit status, the --json reports, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = audit_cli.main(list(paths), as_json=True, config_root=config_root)
    return code, json.loads(out.getvalue() or "[]"), err.getvalue()


def good_run(root: Path) -> Path:
    files.write_run(root / "good")
    return root / "good"


# The cases: each builds its broken path under a folder and says what the audit must answer -----------------

Case = Callable[[Path], Path]


def hostile_pickle(root: Path) -> Path:
    marker = root / "it-ran"
    state = {"a": files.Call(files.Global("os", "system"), (f"touch {marker}",)),
             "b": files.Call(files.Global("builtins", "eval"), (f"open({str(marker)!r}, 'w')",)),
             "c": files.Call(files.Global("subprocess", "Popen"), (["touch", str(marker)],)),
             "d": files.Call(files.Global("posix", "system"), (f"touch {marker}",))}
    files.write_run(root / "run", client_state=state)
    return root / "run"


def fifo_model_states(root: Path) -> Path:
    (root / "run" / "global_step6").mkdir(parents=True)
    os.mkfifo(root / "run" / "global_step6" / "mp_rank_00_model_states.pt")
    (root / "run" / "latest").write_text("global_step6")
    return root / "run"


def fifo_latest(root: Path) -> Path:
    files.write_run(root / "run", latest=False)
    os.mkfifo(root / "run" / "latest")
    return root / "run"


def fifo_config(root: Path) -> Path:
    os.mkfifo(root / "ds_config.json")
    files.write_run(root / "run", ds_config=str(root / "ds_config.json"))
    return root / "run"


def latest_dev_zero(root: Path) -> Path:
    files.write_run(root / "run", latest=False)
    (root / "run" / "latest").symlink_to("/dev/zero")
    return root / "run"


def config_dev_zero(root: Path) -> Path:
    files.write_run(root / "run", ds_config="/dev/zero")
    return root / "run"


def _bomb(root: Path, **member: Any) -> Path:
    (root / "run" / "global_step6").mkdir(parents=True)
    files.write_zip_member(root / "run" / "global_step6" / "mp_rank_00_model_states.pt", **member)
    return root / "run"


def dup_bomb(root: Path) -> Path:  # 2^30 DUP opcodes in a 1 MB zip
    return _bomb(root, prefix=b"\x80\x02N", chunk=b"2" * MIB, count=1024, suffix=b".")


def none_pop_bomb(root: Path) -> Path:  # 4 GiB of NONE/POP in a 4 MB zip
    return _bomb(root, prefix=b"\x80\x02", chunk=b"N0" * (MIB // 2), count=4096, suffix=b"N.")


def dup_within_bytes(root: Path) -> Path:  # 16 MiB of DUP: under the byte bound, past the stack's
    return _bomb(root, prefix=b"\x80\x02N", chunk=b"2" * MIB, count=16, suffix=b".")


def none_pop_within_bytes(root: Path) -> Path:  # 16 MiB of NONE/POP: under the byte bound, past the opcodes'
    return _bomb(root, prefix=b"\x80\x02", chunk=b"N0" * (MIB // 2), count=16, suffix=b"N.")


def unknown_method(root: Path) -> Path:
    data, _ = files.torch_pickle(files.model_states())
    return _bomb(root, prefix=data, method=99)


def encrypted(root: Path) -> Path:
    data, _ = files.torch_pickle(files.model_states())
    return _bomb(root, prefix=data, method=0, flags=1)


def broken_local_header(root: Path) -> Path:
    data, _ = files.torch_pickle(files.model_states())
    return _bomb(root, prefix=data, method=0, local_name="archive/data.pkX")


def set_in_params(root: Path) -> Path:
    scheduler = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5,
                                                "warmup_type": "linear", "groups": {1, 2}}}
    files.write_run(root / "run", scheduler=scheduler)
    return root / "run"


def tensor_in_params(root: Path) -> Path:
    scheduler = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": files.Tensor((1,)),
                                                "warmup_num_steps": 5, "warmup_type": "linear"}}
    files.write_run(root / "run", scheduler=scheduler)
    return root / "run"


def deep_in_params(root: Path) -> Path:
    scheduler = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "deep": files.Deep(200_000)}}
    files.write_run(root / "run", scheduler=scheduler)
    return root / "run"


def deep_in_client_state(root: Path) -> Path:
    files.write_run(root / "run", client_state={"deep": files.Deep(200_000)})
    return root / "run"


def relative_config(root: Path) -> Path:
    (root / "job" / "conf").mkdir(parents=True)
    (root / "job" / "conf" / "ds.json").write_text(json.dumps(files.model_states()["ds_config"]))
    files.write_run(root / "run", ds_config="conf/ds.json")
    return root / "run"


def symlink_loop(root: Path) -> Path:
    files.write_run(root / "runs" / "a")
    (root / "runs" / "loop").symlink_to(root / "runs")
    (root / "runs" / "self").symlink_to(root / "runs" / "self")  # a link to itself: not a folder, not a run
    file = root / "runs" / "b" / "global_step1" / "mp_rank_00_model_states.pt"
    file.parent.mkdir(parents=True)
    file.symlink_to(file)  # a model-states file that is a link to itself
    return root / "runs"


def loop_named(root: Path) -> Path:
    (root / "self").symlink_to(root / "self")
    return root / "self"


# name: (build, verdict of the broken run or None for a PATH error line, words its why or note holds, exit alone)
CASES: dict[str, tuple[Case, str | None, str, int]] = {
    "os.system, builtins.eval, subprocess.Popen pickled": (hostile_pickle, "affected", "0.001", 1),
    "FIFO as model-states": (fifo_model_states, "unreadable", "not a regular file (a FIFO)", 2),
    "FIFO as latest": (fifo_latest, "affected", "not a regular file (a FIFO)", 1),
    "FIFO as the ds_config path": (fifo_config, "unknown", "not a regular file (a FIFO)", 0),
    "latest linked to /dev/zero": (latest_dev_zero, "affected", "not a regular file (a character device)", 1),
    "ds_config path /dev/zero": (config_dev_zero, "unknown", "not a regular file (a character device)", 0),
    "1 MB zip of 2^30 DUP": (dup_bomb, "unreadable", "declares 1073741828 bytes", 2),
    "4 MB zip of 4 GiB NONE/POP": (none_pop_bomb, "unreadable", "declares 4294967300 bytes", 2),
    "16 MiB of DUP": (dup_within_bytes, "unreadable", "stack grows past 1000000", 2),
    "16 MiB of NONE/POP": (none_pop_within_bytes, "unreadable", "more than 4000000 opcodes", 2),
    "unknown compression method": (unknown_method, "unreadable", "compressed with method 99", 2),
    "encrypted flag": (encrypted, "unreadable", "encrypted", 2),
    "broken local header": (broken_local_header, "unreadable", "damaged zip archive", 2),
    "a set among the scheduler's params": (set_in_params, "affected", "0.001", 1),
    "a tensor among the scheduler's params": (tensor_in_params, "affected", "0.001", 1),
    "nested 200,000 deep in the params": (deep_in_params, "unreadable", "nested deeper than 64", 2),
    "nested 200,000 deep in client_state": (deep_in_client_state, "affected", "0.001", 1),
    "relative ds_config path": (relative_config, "unknown", "--config-root", 0),
    "symlink loops inside a folder of runs": (symlink_loop, "skipped", "a symlink to a folder: not followed", 1),
    "PATH that is a symlink loop": (loop_named, None, "too many levels of symbolic links", 2),
}


def _text(report: dict[str, Any]) -> str:
    return " ".join([report["why"], *report["notes"]])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_every_odd_file_gets_its_line_in_bounded_time_and_memory(name: str, tmp_path: Path) -> None:
    build, verdict, words, alone = CASES[name]
    (tmp_path / "broken").mkdir()
    broken = build(tmp_path / "broken")
    with measured(name) as figures:
        code, reports, stderr = run_audit(str(broken))
    assert figures["added"] < PEAK_LIMIT and figures["seconds"] < HANG_LIMIT_S, figures
    assert code == alone, (code, reports, stderr)
    if verdict is None:
        # the PATH's one error line, then the summary, which says that nothing was judged (#55 item 5)
        error, *summary = stderr.splitlines()
        assert reports == [] and words in error and "nothing was judged" in summary[-1], stderr
    else:
        mine = [r for r in reports if r["path"] == str(broken)]
        if name == "symlink loops inside a folder of runs":  # the run is read, each link named, none followed
            verdicts = {Path(r["path"]).name: (r["verdict"], r["why"]) for r in reports}
            assert verdicts["a"][0] == "affected" and sorted(verdicts) == ["a", "b", "loop"], reports
            assert verdicts["b"][0] == "unreadable" and "too many levels of symbolic links" in verdicts["b"][1]
            mine = [r for r in reports if r["path"] == str(broken / "loop")]
        assert len(mine) >= 1 and all(r["verdict"] == verdict and words in _text(r) for r in mine), reports
    assert not (tmp_path / "broken" / "it-ran").exists()  # nothing the pickle named ran
    json.dumps(reports)  # --json took every value
    # beside a good run: both reported, the good one as it is
    code, reports, stderr = run_audit(str(broken), str(good_run(tmp_path / "good")))
    good = [r for r in reports if r["path"] == str(tmp_path / "good" / "good")]
    assert len(good) == 1 and good[0]["verdict"] == "affected" and good[0]["step0_lr"] == 0.001, reports
    assert code == 1, (code, reports, stderr)
    assert not (tmp_path / "broken" / "it-ran").exists()


def test_a_set_or_a_tensor_among_the_params_comes_out_as_plain_json(tmp_path: Path) -> None:
    _, reports, _ = run_audit(str(set_in_params(tmp_path / "set")), str(tensor_in_params(tmp_path / "tensor")))
    params = {Path(r["path"]).parent.name: r["params"] for r in reports}
    assert params["set"]["groups"] == [1, 2]
    assert params["tensor"]["warmup_max_lr"] == "<tensor FloatStorage [1]>"


def test_a_relative_config_path_is_read_under_config_root_only(tmp_path: Path) -> None:
    run = relative_config(tmp_path)
    code, (report,), _ = run_audit(str(run))
    assert report["verdict"] == "unknown" and "'conf/ds.json'" in report["why"] and code == 0, report
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cwd = os.getcwd()
    try:  # never against the auditor's working directory, even where the file is there
        os.chdir(tmp_path / "job")
        code, (report,), _ = run_audit(str(run))
        assert report["verdict"] == "unknown", report
    finally:
        os.chdir(cwd)
    code, (report,), _ = run_audit(str(run), config_root=str(tmp_path / "job"))
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001 and code == 1, report
    assert any(str(tmp_path / "job" / "conf" / "ds.json") in note for note in report["notes"]), report


# Folders that cannot be listed --------------------------------------------------------------------------------

def _unlistable_tree() -> tuple[Path, Callable[..., subprocess.CompletedProcess[str]]]:
    """A folder of runs holding a good run and a mode-700 run of someone else's, and the audit as run by a user
    who cannot list the latter. As root (which lists anything), the audit runs as `nobody` through setpriv, in
    a child `python -S`; as any other user, chmod 000 does it in a child too."""
    # /tmp, not pytest's own folder (mode 700): the user the audit runs as must reach the tree
    base = Path(tempfile.mkdtemp(prefix="awp-audit-", dir="/tmp" if os.path.isdir("/tmp") else None))
    base.chmod(0o755)
    files.write_run(base / "runs" / "good")
    files.write_run(base / "runs" / "locked")
    for folder in (base / "runs", base / "runs" / "good", base / "runs" / "good" / "global_step6"):
        folder.chmod(0o755)
    for file in (base / "runs" / "good").rglob("*"):
        file.chmod(0o755 if file.is_dir() else 0o644)
    package = Path(audit_cli.__file__).parents[2]
    copy = base / "package"
    shutil.copytree(package, copy / "accelerate_warmup_patch", ignore=shutil.ignore_patterns("__pycache__"))
    for item in [copy, *copy.rglob("*")]:
        item.chmod(0o755 if item.is_dir() else 0o644)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no way to be a user who cannot list a folder")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        (base / "runs" / "locked").chmod(0o700)  # root's, mode 700: nobody cannot list it
    else:
        (base / "runs" / "locked").chmod(0o000)

    def audit(*args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(copy)}
        return subprocess.run([*prefix, sys.executable, "-S", "-m", "accelerate_warmup_patch", "audit", *args],
                              env=env, cwd=str(base), capture_output=True, text=True, timeout=HANG_LIMIT_S)

    return base, audit


def test_a_run_that_cannot_be_listed_is_named_and_the_others_reported() -> None:
    base, audit = _unlistable_tree()
    try:
        with measured("mode-700 run inside a folder of runs"):
            proc = audit("--json", str(base / "runs"))
        reports = {Path(r["path"]).name: r for r in json.loads(proc.stdout)}
        assert reports["good"]["verdict"] == "affected", proc
        assert reports["locked"]["verdict"] == "unreadable" and "permission denied" in reports["locked"]["why"], proc
        assert proc.returncode == 1, proc  # the good run is affected
        with measured("unlistable root folder"):
            proc = audit(str(base / "runs" / "locked"))
        assert proc.returncode == 2 and "nothing was judged" in proc.stdout.splitlines()[-1], proc  # the summary
        assert "cannot list it: permission denied" in proc.stderr and "no DeepSpeed checkpoint" not in proc.stderr
    finally:
        (base / "runs" / "locked").chmod(0o700)
        shutil.rmtree(base)
