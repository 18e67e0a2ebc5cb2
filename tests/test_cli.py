"""The command line as users and image builds run it: help, --version, demo (with --plot), doctor, status.

Each doctor state, and doctor --config: tests/test_doctor.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, installed

import accelerate_warmup_patch
from accelerate_warmup_patch import releases, settings, upstream
from accelerate_warmup_patch.cli import demo

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", *args], env=full,
                          capture_output=True, text=True, timeout=900)


# The console script, as users run it: its sys.path starts with its own folder. `python -m` would put the
# working directory first for the command itself too, by Python's own rule.
SCRIPT = Path(sys.executable).parent / "accelerate-warmup-patch"


def _command(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    return subprocess.run([str(SCRIPT), *args], env={**full, **(env or {})}, capture_output=True, text=True,
                          timeout=900, cwd=cwd)


def _trapped(folder: Path) -> Path:
    """A working directory holding what a child must never import from it: a json.py and a copy of the package
    (an older checkout), each leaving a file ``sprung-NAME`` in it when it runs."""
    folder.mkdir(parents=True)
    mark = f"open({str(folder / 'sprung-')!r} + __name__, 'a').close()\n"
    shutil.copytree(ROOT / "accelerate_warmup_patch", folder / "accelerate_warmup_patch")
    init = folder / "accelerate_warmup_patch" / "__init__.py"
    init.write_text(mark + init.read_text())
    (folder / "json.py").write_text(mark + "raise ImportError('the json.py of the working directory')\n")
    return folder


def _sprung(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.glob("sprung-*"))


@pytest.fixture(scope="module")
def demo_run(deepspeed: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One `demo -v --plot` run as a user starts it (its two training runs are new interpreters, about 15 s), in a
    working directory of traps, with an empty op folder; each test below reads what it looks for in it."""
    folder = tmp_path_factory.mktemp("demo")
    # an empty op folder: DeepSpeed's CPU backend would JIT-compile its shared-memory op into it (1-3 min)
    env = {"TORCH_EXTENSIONS_DIR": str(folder / "torch_extensions")}
    proc = _command("demo", "-v", "--plot", str(folder / "lr.png"), cwd=_trapped(folder / "work"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, folder


def test_demo_prints_both_trajectories_a_verdict_and_a_plot(demo_run):
    proc, folder = demo_run
    assert _sprung(folder / "work") == []  # its two training runs imported nothing from there
    assert (folder / "lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fixed = releases.start_fact("WarmupLR", installed("deepspeed")).value is releases.Start.SETS_EVERY_GROUP
    expected = "is fixed upstream; the patch changes nothing" if fixed else "has the bug (step 0 ran at 0.001)"
    assert expected in proc.stdout, proc.stdout
    assert "   0           0.001               0" in proc.stdout or fixed


def test_the_readmes_lr_table_is_what_the_demo_prints(demo_run):
    # the README's table opens it: each row of the installed release is the demo's column (steps 0-3)
    proc, _ = demo_run
    printed = [(float(m[1]), float(m[2])) for m in
               (re.match(r"^\s*[0-3]\s+(\S+)\s+(\S+)$", line) for line in proc.stdout.splitlines()) if m]
    assert len(printed) == 4, proc.stdout
    rows = {}
    for line in (ROOT / "README.md").read_text().splitlines():
        if not line.startswith("|"):
            continue  # prose that names the release ("DeepSpeed 0.19.8 (the newest), ...") is not a row
        cells = [cell.strip().strip("*") for cell in line.strip().strip("|").split("|")]
        if cells[0].startswith(f"DeepSpeed {installed('deepspeed')}"):
            rows[cells[0]] = [float(cell) for cell in cells[1:5]]
    assert rows, "the README's lr table has no row for the installed release"
    for name, lrs in rows.items():
        columns = (0, 1) if name.endswith("unpatched or patched") else (0,) if name.endswith("unpatched") else (1,)
        for column in columns:
            assert lrs == [pair[column] for pair in printed], (name, proc.stdout)


def test_demo_builds_no_comm_op_and_says_what_each_run_is_doing(demo_run):
    proc, folder = demo_run
    extensions = folder / "torch_extensions"
    assert not (extensions / "deepspeed_shm_comm").exists(), sorted(p.name for p in extensions.iterdir())
    table = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [float(row[2]) for row in table] == pytest.approx(demo.reference_lrs(demo.DEMO_STEPS))
    work = "(a new interpreter imports torch and DeepSpeed, then trains 6 steps) ..."
    for run in ("unpatched", "patched"):
        assert f"running the {run} demo {work}\n" in proc.stderr, proc.stderr
    # -v shows DeepSpeed's own log (its stdout, where its get_lr warns), and says that warning is expected
    assert f"] {demo.SCHEDULER_WARNING}\n" in proc.stderr, proc.stderr
    assert f'(DeepSpeed\'s own warning "{demo.SCHEDULER_WARNING}" above is expected' in proc.stderr, proc.stderr


def test_the_plots_reference_is_the_newest_release_measured():
    measured = [row[0] for row in GOLDEN["runs"]["deepspeed:WarmupLR-linear:g0.001:ga1:z0"]]
    assert demo.reference_lrs(len(measured)) == measured


def test_doctor_json_names_versions_verdicts_and_activation():
    proc = _cli("doctor", "--json", env={"ACCELERATE_WARMUP_PATCH": "reset"})
    data = json.loads(proc.stdout)
    assert data["versions"]["deepspeed"] == installed("deepspeed")
    assert set(data["verdicts"]) == set(releases.scheduler_classes())
    assert data["activation"]["active_at_start_up"] is True
    assert "accelerate_warmup_patch.pth" in data["activation"]["through"][0]


def test_doctor_strict_passes_on_a_supported_armed_image():
    assert _cli("doctor", "--strict", env={"ACCELERATE_WARMUP_PATCH": "reset"}).returncode == 0


@pytest.mark.parametrize("value", ["rset", "of"])  # "of" was meant as off: a new process would run patched
def test_doctor_strict_fails_on_a_value_it_does_not_accept(value):
    proc = _cli("doctor", "--strict", env={"ACCELERATE_WARMUP_PATCH": value})
    assert proc.returncode == 1, proc.stdout
    problems = [line for line in proc.stdout.splitlines() if line.strip().startswith("problem:")]
    assert len(problems) == 1, proc.stdout
    assert f"ACCELERATE_WARMUP_PATCH={value!r} is not one of: {settings.ACCEPTED}" in problems[0]
    assert "OK" not in proc.stdout.splitlines()
    assert "WARNING" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr  # doctor reports it


def test_doctor_json_lists_a_value_it_does_not_accept_as_a_problem():
    data = json.loads(_cli("doctor", "--json", env={"ACCELERATE_WARMUP_PATCH": "rset"}).stdout)
    assert any("ACCELERATE_WARMUP_PATCH='rset'" in problem for problem in data["problems"]), data["problems"]
    assert data["activation"]["mode"] == "off"  # a value not accepted patches nothing


@pytest.mark.usefixtures("deepspeed")
def test_console_script_is_installed():
    script = Path(sys.executable).parent / "accelerate-warmup-patch"
    proc = subprocess.run([str(script), "doctor", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0 and "WarmupCosineLR" in proc.stdout


def test_help_lists_only_the_public_commands_and_the_exit_codes():
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "{doctor,demo,status,audit}" in proc.stdout and "exit codes:" in proc.stdout
    assert "_demo" not in proc.stdout and "SUPPRESS" not in proc.stdout and "table" not in proc.stdout
    assert "``" not in proc.stdout  # no reST markup


def test_a_bare_command_prints_help_and_exits_0():
    proc = _cli()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: accelerate-warmup-patch") and proc.stderr == ""


def test_version():
    proc = _cli("--version")
    expected = f"accelerate-warmup-patch {accelerate_warmup_patch.__version__}"
    assert (proc.returncode, proc.stdout.strip()) == (0, expected)


@pytest.mark.parametrize("command", ["doctor", "demo", "status"])
def test_each_command_has_a_description_and_points_to_no_file_the_wheel_lacks(command):
    proc = _cli(command, "--help")
    assert proc.returncode == 0
    description = proc.stdout.split("\n\n")[1]
    assert len(description) > 100, proc.stdout  # a paragraph, not the usage line again
    for text in (proc.stdout, _cli("--help").stdout):
        assert "docs/" not in text and ".md" not in text  # the wheel carries the package alone


def test_demo_without_torch_says_so_in_one_line(tmp_path):
    # -S: no site-packages, only the checkout on the path (no torch, no DeepSpeed)
    proc = subprocess.run([sys.executable, "-S", "-m", "accelerate_warmup_patch", "demo"], capture_output=True,
                          text=True, env={"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("accelerate-warmup-patch demo: the demo trains with the installed torch, and torch is not "
                           "installed here: pip install torch\n")
    assert proc.stdout == ""


@pytest.mark.usefixtures("deepspeed")
def test_demo_plot_hint_names_an_extra_that_exists(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    hint = demo.missing_requirement(plot=True)
    assert hint is not None and "pip install '.[plot]'" in hint
    assert "[project.optional-dependencies]\nplot = " in (ROOT / "pyproject.toml").read_text()


# status: what a new process of this environment would do ------------------------------------------------------

@pytest.mark.parametrize("value, mode", [(None, "not armed"), ("reset", "reset"), ("off", "off")])
def test_status_json_is_json_alone_and_reports_a_new_process(value, mode):
    env = {"ACCELERATE_WARMUP_PATCH": value} if value else {}
    proc = _cli("status", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=proc.stdout, capture_output=True, text=True)
    assert tool.returncode == 0, proc.stdout
    data = json.loads(proc.stdout)
    assert data["mode"] == mode and data["armed"] is (mode == "reset")
    assert data["versions"]["deepspeed"] == installed("deepspeed")


def test_status_imports_neither_torch_nor_deepspeed():
    code = ("import sys, contextlib, io; from accelerate_warmup_patch.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['status', '--json'])\n"
            "print(sorted(m for m in ('torch', 'deepspeed', 'accelerate') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "ACCELERATE_WARMUP_PATCH": "reset"})
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_status_live_counts_the_seconds_on_a_terminal_and_json_stays_json():
    # stderr a terminal (a pty): the wait's line is rewritten in place and ends with the seconds it took
    import pty
    import threading

    parent, terminal = pty.openpty()
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    proc = subprocess.Popen([sys.executable, "-m", "accelerate_warmup_patch", "status", "--live", "--json"],
                            env=full, stdout=subprocess.PIPE, stderr=terminal, text=True)
    os.close(terminal)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(parent, 4096)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    out, _ = proc.communicate(timeout=600)
    reader.join(timeout=60)
    os.close(parent)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 0 and json.loads(out)["mode"] == "not armed", out
    doing = "importing deepspeed and accelerate in a new `python` process"
    assert shown.startswith(f"\r\x1b[K{doing} ..."), repr(shown)
    last = shown.rsplit("\r\x1b[K", 1)[1]
    assert last.startswith(f"{doing}: ") and last.endswith(" s\r\n") and last[len(doing) + 2:-4].isdigit(), repr(last)


def test_status_live_unarmed_still_prints_the_versions_line():
    proc = _cli("status", "--live")
    assert proc.returncode == 0, proc.stderr
    assert "  not armed: " in proc.stdout
    verdicts = ", ".join(f"{k} {v}" for k, v in upstream.verdicts(installed("deepspeed")).items())
    assert f"  DeepSpeed {installed('deepspeed')}: {verdicts}" in proc.stdout.splitlines(), proc.stdout
    assert proc.stderr.startswith("importing deepspeed and accelerate in a new `python` process ..."), proc.stderr


@pytest.mark.parametrize("value", [None, "reset"])
def test_status_live_reports_the_process_it_started(value):
    if value:
        installed("deepspeed")  # the armed process imports it
    env = {"ACCELERATE_WARMUP_PATCH": value} if value else {}
    proc = _cli("status", "--live", "--json", env=env)
    data = json.loads(proc.stdout)
    if value is None:
        assert data["mode"] == "not armed" and data["status"] is None  # never this command's own import
    else:
        assert data["armed"] is True and data["status"]["applied_by"] == [".pth"]
        assert data["status"]["mode"] == "reset" and data["imported"]["deepspeed"] is True


DOCTOR_SCHEMA = {
    "": {"schema", "state", "verdict", "strict_fails", "package", "python", "versions", "verdicts", "activation",
         "multinode", "config", "problems", "notes", "interpreter"},
    "activation": {"env", "mode", "pth", "sitecustomize", "active_at_start_up", "through", "by_import", "python",
                   "why_not", "interpreters", "probed_with"},
    "multinode": {"carries", "why", "runners"},
}
# on every DeepSpeed the table supports: what the build's classes do, and where that answer comes from
PROBED = {"deepspeed", "lacks", "lacks_changes", "differs_from_table", "step_lr", "verdicts", "vendor", "answered"}
ANSWERED = {"how", "file", "sha256", "probed_at", "cache", "not_kept"}


def test_doctor_json_has_the_documented_schema():
    data = json.loads(_cli("doctor", "--json").stdout)
    assert data["schema"] == 3
    for key, wanted in DOCTOR_SCHEMA.items():
        assert set(data[key] if key else data) - ({"probed"} if not key else set()) == wanted, key
    if installed("deepspeed") is not None:
        assert set(data["probed"]) == PROBED and set(data["probed"]["answered"]) == ANSWERED, data["probed"]
    documented = (Path(__file__).parent.parent / "docs" / "doctor.md").read_text()
    for keys in (*DOCTOR_SCHEMA.values(), {"probed"}):
        assert all(f"| `{k}` |" in documented for k in keys)
    assert all(f"`{k}`" in documented for k in PROBED | ANSWERED)


@pytest.mark.usefixtures("deepspeed")
def test_doctor_says_not_affected_for_classes_that_never_had_the_bug():
    data = json.loads(_cli("doctor", "--json").stdout)
    assert data["verdicts"]["OneCycle"] == data["verdicts"]["LRRangeTest"] == "not affected"


# which interpreters the switch reaches: asked of the real interpreter, with the job's own flags ------------------

def _reach(data: dict[str, object]) -> dict[str, bool]:
    return {name: entry["reached"] for name, entry in data["interpreters"].items()}  # type: ignore[attr-defined,index]


def test_unset_the_json_says_where_reset_would_reach_and_that_nothing_is_armed():
    # the interpreters are asked with reset where the variable is unset: "reached", never "armed", so the two agree
    data = json.loads(_cli("doctor", "--json").stdout)["activation"]
    assert (data["env"], data["probed_with"], data["active_at_start_up"], data["mode"]) == \
        (None, "reset", False, "not armed")
    assert data["interpreters"]["python"]["reached"] is True
    assert not any("armed" in entry for entry in data["interpreters"].values()), data["interpreters"]


@pytest.mark.parametrize("value, arming, reach", [
    (None, "not armed at start-up; `import accelerate_warmup_patch` first in the script arms it in reset mode",
     "ACCELERATE_WARMUP_PATCH=reset would reach: python, python -I, python -E, python -s; NOT python -S ("),
    ("off", "not armed at start-up; `import accelerate_warmup_patch` first in the script arms nothing "
     "(ACCELERATE_WARMUP_PATCH=off wins)", "ACCELERATE_WARMUP_PATCH=reset would reach: python, "),
    ("reset", "armed at start-up in reset mode, through env var ACCELERATE_WARMUP_PATCH='reset' + "
     "accelerate_warmup_patch.pth", "the switch reaches: python, python -I, python -E, python -s; NOT python -S ("),
])
def test_doctor_says_each_new_process_fact_once(value, arming, reach):
    text = _cli("doctor", env={"ACCELERATE_WARMUP_PATCH": value} if value else {}).stdout
    lines = text.splitlines()
    assert f"A new process (python): {arming}" in lines, text
    assert any(line.startswith(f"Interpreters (each asked): {reach}") for line in lines), text


def test_status_says_which_interpreters_the_switch_reaches():
    proc = _cli("status", "--json", env={"ACCELERATE_WARMUP_PATCH": "reset"})
    assert proc.returncode == 0, proc.stderr
    assert _reach(json.loads(proc.stdout)) == {"python": True, "python -I": True, "python -E": True,
                                               "python -s": True, "python -S": False}
    text = _cli("status", env={"ACCELERATE_WARMUP_PATCH": "reset"}).stdout
    assert "reaches: python, python -I, python -E, python -s" in text, text
    assert "NOT python -S (site.py does not run" in text and "import accelerate_warmup_patch" in text, text


def test_status_with_the_jobs_flags_python_dash_s_is_not_armed():
    # the review's case: python -S train.py with site-packages on PYTHONPATH never reads the .pth
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"ACCELERATE_WARMUP_PATCH": "reset", "PYTHONPATH": site_packages}
    data = json.loads(_cli("status", "--json", "--python-flags=-S", env=env).stdout)
    assert data["python"] == "python -S" and data["armed"] is False, data
    text = _cli("status", "--python-flags=-S", env=env).stdout
    assert "python -S: not armed" in text and "import accelerate_warmup_patch" in text, text
    assert "  armed," not in text


@pytest.mark.usefixtures("deepspeed")
def test_status_live_runs_the_jobs_interpreter_flags():
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"ACCELERATE_WARMUP_PATCH": "reset", "PYTHONPATH": site_packages}
    data = json.loads(_cli("status", "--live", "--json", "--python-flags=-S", env=env).stdout)
    assert data["status"] is None and data["armed"] is False and data["python"] == "python -S", data
    assert data["imported"]["deepspeed"] is True  # it trained: unpatched
    armed = json.loads(_cli("status", "--live", "--json", "--python-flags=-E", env=env).stdout)
    assert armed["armed"] is True and armed["status"]["applied_by"] == [".pth"], armed


@pytest.mark.parametrize("entry", ["absolute", "relative"])
def test_a_target_folder_on_pythonpath_is_not_reached(tmp_path, entry):
    # what `pip install --target DIR` leaves (checked against a real one): the package, its .pth, its dist-info;
    # a venv of its own, so that the package is found only there. A relative entry is the job's, read from the
    # directory it starts in: the command's own (its children run elsewhere)
    target = tmp_path / "target"
    shutil.copytree(ROOT / "accelerate_warmup_patch", target / "accelerate_warmup_patch")
    shutil.copy(ROOT / "accelerate_warmup_patch.pth", target)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(target) if entry == "absolute" else "target",
           "ACCELERATE_WARMUP_PATCH": "reset"}
    # cwd: `python -m` puts the working directory first on sys.path, and pytest's is the checkout itself
    proc = subprocess.run([str(python), "-m", "accelerate_warmup_patch", "status", "--json"], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["armed"] is False and not any(_reach(data).values()), data
    why = data["interpreters"]["python"]["why"]
    assert f"{target}" in why and "not a site folder" in why and "sitecustomize" in why, why


def test_python_flags_that_would_run_something_else_are_a_usage_error():
    for flags in ("-c pass", "train.py", "-m foo"):
        proc = _cli("status", f"--python-flags={flags}")
        assert proc.returncode == 2 and "usage: accelerate-warmup-patch status" in proc.stderr, proc.stderr


# the review's cases: a flag whose value is missing takes the probe's -c as its value, and -c or -m inside a group
# of letters turns the probe's code into -c's own argument; each answered "not armed", exit 0
@pytest.mark.parametrize("flags, why", [
    ("-X", "'-X' needs its value after it (as in -X dev)"),
    ("-S -W", "'-W' needs its value after it (as in -W error)"),
    ("--check-hash-based-pycs", "'--check-hash-based-pycs' needs one of default, always, never after it"),
    ("--check-hash-based-pycs sometimes", "'--check-hash-based-pycs' needs one of default, always, never after it"),
    ("-Ic", "'-Ic': -c runs code of its own instead of the script"),
    ("-bc", "'-bc': -c runs code of its own instead of the script"),
    ("-sm", "'-sm': -m runs a module instead of the script"),
    ("-h", "'-h': -h prints the help and exits"),
    ("-VV", "'-VV': -V prints the version and exits"),
    ("--help", "'--help' is not an option this command passes on"),
    ("-", "'-' is not an interpreter option"),
    ("-J", f"'-J': -J is not an option of Python {sys.version_info[0]}.{sys.version_info[1]}"),
])
def test_python_flags_it_cannot_pass_on_are_a_one_line_error(flags, why):
    for command in ("status", "doctor"):
        proc = _cli(command, f"--python-flags={flags}")
        assert proc.returncode == 2, proc.stdout
        assert proc.stderr.startswith(f"usage: accelerate-warmup-patch {command} "), proc.stderr
        last = proc.stderr.splitlines()[-1]
        assert last.startswith(f"accelerate-warmup-patch {command}: error: --python-flags={flags}: {why}"), last


def test_python_flags_with_values_and_grouped_letters_are_passed_on_as_written():
    for flags in ("-X dev -Wd", "-sEbb -Xdev -W default --check-hash-based-pycs never -i"):
        proc = _cli("status", "--json", f"--python-flags={flags}", env={"ACCELERATE_WARMUP_PATCH": "reset"})
        data = json.loads(proc.stdout)
        assert data["python"] == f"python {flags}" and data["armed"] is True, data


# children run the installed code: the CLI's own package, in a working directory of their own -----------------

@pytest.mark.usefixtures("deepspeed")
def test_doctor_and_status_import_nothing_from_the_working_directory(tmp_path):
    # the review's case: a json.py there ran in 4 of doctor's 6 children, and the verdict became "NOT active"
    work = _trapped(tmp_path / "work")
    on = {"ACCELERATE_WARMUP_PATCH": "reset"}
    doctor = _command("doctor", "--strict", "--json", cwd=work, env=on)
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
    assert json.loads(doctor.stdout)["activation"]["active_at_start_up"] is True
    status = json.loads(_command("status", "--json", cwd=work, env=on).stdout)
    assert _reach(status) == {"python": True, "python -I": True, "python -E": True, "python -s": True,
                              "python -S": False}
    assert "site.py does not run there" in status["interpreters"]["python -S"]["why"]
    live = json.loads(_command("status", "--live", "--json", cwd=work, env=on).stdout)
    assert live["armed"] is True and live["imported"]["deepspeed"] is True, live
    assert _sprung(work) == []


def test_a_child_refuses_a_copy_of_the_package_its_start_up_imported_from_elsewhere(tmp_path):
    # a command loaded from one copy whose environment arms another at start-up: the child says which two, rather
    # than running the command's module with the other copy's package
    shutil.copytree(ROOT / "accelerate_warmup_patch", tmp_path / "copy" / "accelerate_warmup_patch")
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); from accelerate_warmup_patch.cli import child\n"
            "env = {**os.environ, 'ACCELERATE_WARMUP_PATCH': 'off'}\n"
            "got = child.reply(child.start_module('accelerate_warmup_patch.cli.doctor_config', ['{}'], env))\n"
            "print(got.returncode, got.failure())")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "copy")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    installed = Path(accelerate_warmup_patch.__file__).parent.parent
    assert proc.stdout.strip() == (f"1 (exit 1): accelerate_warmup_patch was imported at start-up from {installed}, "
                                   f"not from {tmp_path / 'copy'}, whose command this is: run the command of the "
                                   "installation the environment imports"), proc.stdout + proc.stderr


# a pipe closed early and a typo ------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [("doctor", "--json"), ("status", "--json"), ("doctor",), ("status",)])
def test_output_cut_by_a_closed_pipe_exits_quietly(args):
    read, write = os.pipe()
    os.close(read)  # `| head -1` that has already exited: every write meets EPIPE
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    try:
        proc = subprocess.run([sys.executable, "-m", "accelerate_warmup_patch", *args], stdout=write,
                              stderr=subprocess.PIPE, text=True, env={**env, "ACCELERATE_WARMUP_PATCH": "reset"},
                              timeout=600)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, ""), proc.stderr


@pytest.mark.parametrize("command", ["doctor", "status", "demo"])
def test_a_subcommands_bad_option_prints_that_subcommands_usage(command):
    proc = _cli(command, "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"usage: accelerate-warmup-patch {command} "), proc.stderr
    assert proc.stderr.rstrip().endswith("error: unrecognized arguments: --bogus"), proc.stderr
