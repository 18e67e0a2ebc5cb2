"""doctor as a new user meets it: one verdict line per state, --strict's exit code, and --config's step lrs."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import GOLDEN, installed
from harness import SCHEDULERS, Spec, expected_unpatched_first_step

from accelerate_warmup_patch import releases, settings, upstream
from accelerate_warmup_patch.cli import child, doctor_states

ROOT = Path(__file__).resolve().parent.parent
DEEPSPEED = installed("deepspeed")


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
         python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env or {})
    return subprocess.run([sys.executable, *python, "-m", "accelerate_warmup_patch", *args], env=full,
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def _as_if(tmp_path: Path, version: str) -> dict[str, str]:
    """A fake: DeepSpeed's metadata at ``version``, ahead on the path. No real release older than 0.9 or newer than
    the table installs beside torch 2.13, nor every state's release. doctor probes the code too (probe_build.py):
    where the number is not the installed release's, the fake's deepspeed cannot be imported, so the probe fails and
    the verdicts are the table's for the number (0.15.2's code numbered otherwise is tests/test_builds.py's)."""
    info = tmp_path / f"deepspeed-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: deepspeed\nVersion: {version}\n")
    if version != installed("deepspeed"):
        (tmp_path / "deepspeed").mkdir(exist_ok=True)
        (tmp_path / "deepspeed" / "__init__.py").write_text("raise ImportError('a fake: its metadata alone')\n")
    return {"PYTHONPATH": str(tmp_path)}


ON = {"ACCELERATE_WARMUP_PATCH": "reset"}
NOT_ACTIVE = f"patch NOT active in new processes: set {settings.ENV_MODE}=reset"
ACTIVE = f"patch active in new processes (reset mode, through {settings.ENV_MODE} + the .pth): fixed"
ALL_THREE = "WarmupLR, WarmupDecayLR, WarmupCosineLR"

# state -> (DeepSpeed release as its metadata says, environment, verdict line, --strict's exit code)
STATES = {
    "affected-not-active": ("0.15.2", {}, f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - {NOT_ACTIVE}", 1),
    "affected-active": ("0.15.2", ON, f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - {ACTIVE}", 0),
    "affected-not-active (off)": ("0.17.0", {"ACCELERATE_WARMUP_PATCH": "off"},
                                  "DeepSpeed 0.17.0: AFFECTED (WarmupCosineLR, groups 1+) - patch NOT active in new "
                                  "processes: ACCELERATE_WARMUP_PATCH=off turns it off; set it to reset", 1),
    "backports-not-active": ("0.19.2", {}, "DeepSpeed 0.19.2: fixed upstream; the patch still backports default "
                             "peak (#8171) to WarmupLR; ratio past warmup (#8142), unknown warmup "
                             f"type (#8151) to WarmupCosineLR - {NOT_ACTIVE}", 1),
    "backports-active": ("0.19.3", ON, "DeepSpeed 0.19.3: fixed upstream; the patch still backports default peak "
                         "(#8171) to WarmupLR; unknown warmup type (#8151) to WarmupCosineLR - "
                         f"{ACTIVE}", 0),
    "fixed-upstream": ("0.19.8", {}, "DeepSpeed 0.19.8: fixed upstream, the patch changes nothing (step mode still "
                       "applies if chosen)", 0),
    "untested": ("9.0.0", {}, "DeepSpeed 9.0.0: UNTESTED (newer than 0.19.8) - assumed fixed upstream, the patch "
                 "changes nothing (step mode still applies if chosen)", 0),
    "unsupported": ("0.8.3", ON, "DeepSpeed 0.8.3: UNSUPPORTED (older than 0.9.0) - affected, and the patch does "
                    "nothing on it: upgrade DeepSpeed (0.15.3 fixes the first step, 0.19.4 every change the patch "
                    "backports)", 1),
    "bad-value": ("0.15.2", {"ACCELERATE_WARMUP_PATCH": "rset"}, "ACCELERATE_WARMUP_PATCH='rset' is NOT ACCEPTED - a "
                  f"new process warns and patches nothing: set one of {settings.ACCEPTED}", 1),
    "affected-warn": ("0.15.2", {"ACCELERATE_WARMUP_PATCH": "warn"}, f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - "
                      f"patch in warn mode in new processes (through {settings.ENV_MODE} + the .pth): they run "
                      f"unpatched and warn once per affected scheduler; set {settings.ENV_MODE}=reset to fix them", 0),
    "affected-active (step)": ("0.15.2", {"ACCELERATE_WARMUP_PATCH": "step"}, f"DeepSpeed 0.15.2: AFFECTED "
                               f"({ALL_THREE}) - patch active in new processes (step mode, through "
                               f"{settings.ENV_MODE} + the .pth): fixed", 0),
}


# The command itself on each environment that changes what a new process does (unset, reset, off, warn, a bad
# value), on a release of each kind; the line of every state on every kind of release is decided in
# tests/unit/test_doctor_verdicts.py.
REAL = sorted(state for state, (_, env, _, _) in STATES.items() if env or state == "affected-not-active")


@pytest.mark.parametrize("state", REAL)
def test_each_state_opens_with_its_verdict_line_and_strict_exit_code(tmp_path, state):
    version, env, line, code = STATES[state]
    proc = _cli("doctor", "--strict", env={**env, **_as_if(tmp_path, version)})
    assert proc.stdout.splitlines()[0] == line, proc.stdout
    assert proc.returncode == code, proc.stdout + proc.stderr
    data = json.loads(_cli("doctor", "--json", env={**env, **_as_if(tmp_path, version)}).stdout)
    assert data["state"] == state.split(" ")[0] and data["verdict"] == line
    assert data["strict_fails"] is bool(code) is doctor_states.STATES[data["state"]]


def test_no_deepspeed_says_nothing_to_patch_and_strict_passes(tmp_path):
    # no site-packages at all (-S), only the checkout: no torch, no DeepSpeed, no .pth
    proc = _cli("doctor", "--strict", env={"PYTHONPATH": str(ROOT)}, python=("-S",), cwd=tmp_path)
    assert proc.stdout.splitlines()[0].startswith("DeepSpeed is not installed in this environment: nothing to patch")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_config_without_a_deepspeed_scheduler_is_not_affected(tmp_path):
    (tmp_path / "ds_config.json").write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
    proc = _cli("doctor", "--strict", "--config", "ds_config.json", cwd=tmp_path, env=_as_if(tmp_path, "0.15.2"))
    assert proc.stdout.splitlines()[0].startswith("DeepSpeed 0.15.2, ds_config.json: not affected (no DeepSpeed "
                                                  "scheduler in the config"), proc.stdout
    assert proc.returncode == 0


def test_every_state_is_documented():
    documented = (ROOT / "docs" / "doctor.md").read_text()
    for state, fails in doctor_states.STATES.items():
        assert f"| `{state}` | {'yes' if fails else 'no'} |" in documented, state


# --config: the lrs of steps 0..3 from the installed release's own class --------------------------------------

def _config(tmp_path: Path, scheduler: str, lr: object = 1e-3, name: str = "ds_config.json") -> Path:
    data: dict[str, object] = {"train_micro_batch_size_per_gpu": 2,
                               "optimizer": {"type": "AdamW", "params": {"lr": lr}}}
    if SCHEDULERS[scheduler]:
        data["scheduler"] = SCHEDULERS[scheduler]
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _approx(rows: list[list[float]]) -> list[object]:
    return [pytest.approx(row) for row in rows]


def _lrs(*args: str, cwd: Path) -> dict[str, object]:
    proc = _cli("doctor", "--json", *args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    return data


def _expected(spec: Spec) -> tuple[list[list[float]], list[list[float]]]:
    """What the demo's engines measured: the newest release's trajectory, and this release's unpatched one."""
    newest = GOLDEN["runs"][spec.key][:4]
    return [expected_unpatched_first_step(spec, DEEPSPEED), *newest[1:]], newest


@pytest.mark.parametrize("scheduler, groups", [("WarmupLR-linear", [1e-3]), ("WarmupCosineLR", [1e-3, 5e-4]),
                                               ("OneCycle", [1e-3])])
def test_config_lrs_of_steps_0_to_3_equal_the_engines(tmp_path, scheduler, groups):
    _config(tmp_path, scheduler)
    args = ["--config", "ds_config.json"] + (["--group-lrs", ",".join(map(str, groups))] if len(groups) > 1 else [])
    data = _lrs(*args, cwd=tmp_path)
    unpatched, patched = _expected(Spec(scheduler=scheduler, groups=groups))
    assert data["config"]["lrs"]["unpatched"] == _approx(unpatched)
    assert data["config"]["lrs"]["patched"] == _approx(patched)
    assert data["config"]["lrs"]["deepspeed"] == DEEPSPEED


def test_config_on_the_demo_schedule_prints_the_demos_table(tmp_path):
    _config(tmp_path, "WarmupLR-linear")
    proc = _cli("doctor", "--config", "ds_config.json", cwd=tmp_path)
    fixed = not upstream.lacks("start", "WarmupLR", DEEPSPEED)
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip()[:1].isdigit()]
    # warmup_min_lr 0: step mode's column beside reset's (step k uses lr(k))
    assert rows == [["0", "0" if fixed else "0.001", "0", "0"], ["1", "0", "0", "0.0002"],
                    ["2", "0.0002", "0.0002", "0.0004"], ["3", "0.0004", "0.0004", "0.0006"]], proc.stdout
    assert "steps 0 and 1 both run at 0: step 0 changes nothing" in proc.stdout, proc.stdout
    assert "warmup type linear (the config's)" in proc.stdout, proc.stdout


def test_config_auto_values_are_explained_and_the_rest_asked_for(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}, "scheduler": {
        "type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                                       "warmup_type": "linear"}}}))
    section = _lrs("--config", "ds_config.json", cwd=tmp_path)["config"]
    assert section["lrs"] is None and section["missing"] == ["--lr", "--set warmup_num_steps=N"]
    assert any("TrainingArguments.learning_rate" in line for line in section["auto"]), section["auto"]
    filled = _lrs("--config", "ds_config.json", "--lr", "1e-3", "--set", "warmup_num_steps=5", cwd=tmp_path)["config"]
    unpatched, patched = _expected(Spec())
    assert filled["lrs"]["unpatched"] == _approx(unpatched)
    assert filled["lrs"]["patched"] == _approx(patched)


def test_config_reached_through_training_arguments_and_an_accelerate_yaml(tmp_path):
    _config(tmp_path, "WarmupLR-linear", lr="auto")
    (tmp_path / "args.json").write_text(json.dumps({"output_dir": "out", "learning_rate": 1e-3,
                                                   "deepspeed": "ds_config.json"}))
    (tmp_path / "accelerate.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n"
                                              "  deepspeed_config_file: ds_config.json\n")
    through_args = _lrs("--config", "args.json", cwd=tmp_path)["config"]
    assert through_args["lr"] == 1e-3 and through_args["lrs"]["patched"] == _approx(_expected(Spec())[1])
    through_yaml = _lrs("--config", "accelerate.yaml", cwd=tmp_path)["config"]
    assert "deepspeed_config_file names" in through_yaml["via"] and through_yaml["missing"] == ["--lr"]


def test_config_remove_and_apply_in_one_child_equal_two_fresh_interpreters(tmp_path):
    request = {"scheduler": "WarmupLR", "params": SCHEDULERS["WarmupLR-default-max"]["params"], "lr": 2e-3,
               "group_lrs": [2e-3, 5e-4]}

    def run(env: dict[str, str], **fresh: bool) -> dict[str, object]:
        # the seam: --config's own child; "fresh" (tests only) runs once, armed by the environment alone
        full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
        got = child.reply(child.start_module("accelerate_warmup_patch.cli.doctor_config",
                                             [json.dumps({**request, **fresh})], {**full, **env}))
        assert got.result is not None, got.stderr
        return got.result

    both = run({})
    assert both["unpatched"] == run({"ACCELERATE_WARMUP_PATCH": "off"}, fresh=True)["lrs"]
    assert both["patched"] == run({"ACCELERATE_WARMUP_PATCH": "reset"}, fresh=True)["lrs"]
    newest = GOLDEN["runs"][Spec(scheduler="WarmupLR-default-max", groups=[2e-3, 5e-4]).key][:4]
    assert both["patched"] == _approx(newest)


def test_config_is_not_changed_by_a_test_variable_left_in_the_environment(tmp_path):
    # the review's case: AWP_CONFIG_FRESH=1, read by --config's child, crashed the command (KeyError: 'patched')
    _config(tmp_path, "WarmupLR-linear")
    proc = _cli("doctor", "--json", "--config", "ds_config.json", cwd=tmp_path, env={"AWP_CONFIG_FRESH": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    unpatched, patched = _expected(Spec())
    lrs = json.loads(proc.stdout)["config"]["lrs"]
    assert lrs["unpatched"] == _approx(unpatched) and lrs["patched"] == _approx(patched)


def test_config_runs_the_installed_package_not_a_copy_in_the_working_directory(tmp_path):
    # the review's case: --config's child ran `python -m accelerate_warmup_patch.doctor_config`, so a package
    # folder in the working directory (an older checkout) answered; here the copy leaves a file when imported
    shutil.copytree(ROOT / "accelerate_warmup_patch", tmp_path / "accelerate_warmup_patch")
    init = tmp_path / "accelerate_warmup_patch" / "__init__.py"
    init.write_text(f"open({str(tmp_path / 'sprung')!r}, 'a').close()\n" + init.read_text())
    (tmp_path / "json.py").write_text(f"open({str(tmp_path / 'sprung')!r}, 'a').close()\nraise ImportError\n")
    _config(tmp_path, "WarmupLR-linear")
    script = Path(sys.executable).parent / "accelerate-warmup-patch"  # `python -m` would import the copy itself
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    proc = subprocess.run([str(script), "doctor", "--json", "--config", "ds_config.json"], env=full,
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["config"]["lrs"]["patched"] == _approx(_expected(Spec())[1])
    assert not (tmp_path / "sprung").exists()


# the command's one line and exit code; every kind of loop is tests/unit/test_doctor_config.py's
@pytest.mark.parametrize("files, named", [
    ({"accelerate.yaml": "deepspeed_config:\n  deepspeed_config_file: accelerate.yaml\n"}, "accelerate.yaml"),
])
def test_a_config_that_leads_back_to_itself_is_one_line_and_exit_2(tmp_path, files, named):
    # the review's case: a TrainingArguments JSON naming itself was a RecursionError traceback, exit 1
    for name, content in files.items():
        (tmp_path / name).write_text(content if isinstance(content, str) else json.dumps(content))
    proc = _cli("doctor", "--config", named, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    assert len(proc.stderr.splitlines()) == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith("accelerate-warmup-patch doctor: error: ") and "back to" in proc.stderr, \
        proc.stderr


def test_an_unreadable_config_is_one_line_and_exit_2(tmp_path):
    proc = _cli("doctor", "--config", "missing.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "accelerate-warmup-patch doctor: error: cannot read missing.json: " \
                                  "No such file or directory"


def test_a_json_typo_is_named_alone(tmp_path):
    (tmp_path / "ds_config.json").write_text('{"optimizer": {"params": {"lr": 1e-3}},, "scheduler": {}}')
    proc = _cli("doctor", "--config", "ds_config.json", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stdout
    assert proc.stderr == ("accelerate-warmup-patch doctor: error: ds_config.json is not valid JSON: Expecting "
                           "property name enclosed in double quotes: line 1 column 40 (char 39)\n")


def test_an_accelerate_yaml_under_another_name_is_told_how_it_is_read(tmp_path):
    (tmp_path / "accelerate.cfg").write_text("deepspeed_config:\n  deepspeed_config_file: ds_config.json\n")
    proc = _cli("doctor", "--config", "accelerate.cfg", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.rstrip().endswith("(an accelerate config YAML is read as YAML only when its name ends in "
                                         ".yaml or .yml)"), proc.stderr


def test_config_says_on_stderr_what_it_computes_and_json_stays_json(tmp_path):
    # the child imports torch and DeepSpeed (5-15 s): a line says so before the wait, never on stdout
    _config(tmp_path, "WarmupLR-linear")
    proc = _cli("doctor", "--json", "--config", "ds_config.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["config"]["lrs"] is not None
    lines = proc.stderr.splitlines()
    computing = ("computing the lrs of steps 0-3 with DeepSpeed's own WarmupLR (a new interpreter imports torch and "
                 "DeepSpeed) ...")
    # the build's probe says so too where it runs (the session's cache may hold its answer: tests/test_builds.py)
    probing = f"probing DeepSpeed {installed('deepspeed')}'s scheduler classes (a new interpreter imports torch and " \
              "DeepSpeed) ..."
    assert lines[0] == computing, proc.stderr
    assert all(line in (computing, probing) or line.startswith("  still ") for line in lines), proc.stderr


def test_config_without_warmup_type_says_it_uses_deepspeeds_default_log(tmp_path):
    # the README's table is linear; a block without warmup_type runs DeepSpeed's default, log
    (tmp_path / "ds_config.json").write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                                                         "scheduler": {"type": "WarmupLR", "params": {
                                                             "warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                             "warmup_num_steps": 5}}}))
    proc = _cli("doctor", "--config", "ds_config.json", cwd=tmp_path)
    assert f"warmup type log (DeepSpeed {DEEPSPEED}'s default: the config gives no warmup_type; " \
           "linear needs \"warmup_type\": \"linear\")" in proc.stdout, proc.stdout
    section = _lrs("--config", "ds_config.json", cwd=tmp_path)["config"]
    assert section["warmup_type"] == {"used": "log", "given": None, "default": "log"}
    assert section["lrs"]["patched"][2] == pytest.approx([1e-3 * math.log(2) / math.log(5)])


@pytest.mark.parametrize("value", [0, -1])
def test_config_warns_where_a_newer_deepspeed_refuses_warmup_num_steps(tmp_path, value):
    (tmp_path / "ds_config.json").write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
                                                         "scheduler": {"type": "WarmupLR", "params": {
                                                             "warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                             "warmup_num_steps": value, "warmup_type": "linear"}}}))
    proc = _cli("doctor", "--config", "ds_config.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    warning = (f"warning: warmup_num_steps={value}: DeepSpeed 0.19.3 and newer (#8126) raise ValueError when "
               "building WarmupLR (\"warmup_num_steps must be a positive integer\"): set it to 1 or more")
    assert warning in proc.stdout, proc.stdout
    refused = releases.parse(DEEPSPEED) >= releases.parse("0.19.3")
    section = _lrs("--config", "ds_config.json", cwd=tmp_path)["config"]
    assert any(w.startswith(warning[len("warning: "):]) for w in section["warnings"]), section["warnings"]
    if refused:  # this release is one of them: no lrs, and the release's own words
        assert section["lrs"] is None and "ValueError" in section["lrs_not_computed"], section
    else:
        assert section["lrs"]["unpatched"][0] == [pytest.approx(1e-3)]


def test_config_auto_warmup_num_steps_names_the_fillers_that_pass_0(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "scheduler": {
        "type": "WarmupLR", "params": {"warmup_num_steps": "auto", "warmup_type": "linear"}}}))
    section = _lrs("--config", "ds_config.json", cwd=tmp_path)["config"]
    auto = next(line for line in section["auto"] if line.startswith("warmup_num_steps"))
    assert "accelerate before 1.15" in auto and "transformers before 5.18" in auto and "0.19.3" in auto, auto


@pytest.mark.parametrize("mode", ["reset", "warn"])
def test_strict_fails_where_the_jobs_interpreter_never_reads_the_pth(tmp_path, mode):
    # python -S train.py, site-packages on PYTHONPATH: the .pth is never read, the job trains unpatched (and in warn
    # mode, warns of nothing: the mode chosen cannot act there)
    site_packages = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"ACCELERATE_WARMUP_PATCH": mode,
           "PYTHONPATH": f"{_as_if(tmp_path, '0.15.2')['PYTHONPATH']}{os.pathsep}{site_packages}"}
    proc = _cli("doctor", "--strict", "--python-flags=-S", env=env)
    assert proc.stdout.splitlines()[0] == (
        f"DeepSpeed 0.15.2: AFFECTED ({ALL_THREE}) - patch NOT active in new processes started as `python -S`: "
        "site.py does not run there, so no .pth and no sitecustomize is read: import accelerate_warmup_patch "
        "first in the script"), proc.stdout
    assert proc.returncode == 1
    plain = _cli("doctor", "--strict", env=env)
    assert plain.returncode == 0 and "NOT python -S (site.py does not run there" in plain.stdout, plain.stdout
