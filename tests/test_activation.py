"""Start-up activation in real interpreters: the installed .pth, the env var, sitecustomize; strict mode
stops a bad start before the program runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import GOLDEN, Spec, run_child, run_python, run_specs

from accelerate_warmup_patch import WAITS_FOR, settings

REPO = Path(__file__).resolve().parent.parent

PROBE = ("import sys, json\n"
         "print(json.dumps(sorted(m for m in ('accelerate_warmup_patch', 'accelerate_warmup_patch.api', "
         "'accelerate_warmup_patch.settings', 'accelerate_warmup_patch.wrapping', "
         "'wrapt', 'torch', 'deepspeed', 'accelerate') if m in sys.modules)))")


def _modules(env: dict[str, str]) -> list[str]:
    proc = run_python(PROBE, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_env_unset_start_up_imports_nothing():
    assert _modules({}) == []


def test_env_empty_start_up_imports_nothing():
    assert _modules({"ACCELERATE_WARMUP_PATCH": ""}) == []


def test_env_off_start_up_patches_nothing_and_imports_no_wrapt():
    # the .pth only checks that the variable is set; the package reads the value and stands down,
    # but for DeepSpeed's multi-node launcher, which carries off to the other nodes (test_multinode.py)
    proc = run_python("import accelerate_warmup_patch as awp, sys; "
                      "print(awp.status()['mode'], awp.status()['waiting_for'], 'wrapt' in sys.modules)",
                      env={"ACCELERATE_WARMUP_PATCH": "off"})
    assert proc.stdout.strip() == "off ['deepspeed.launcher.multinode_runner'] False", proc.stderr
    assert _modules({"ACCELERATE_WARMUP_PATCH": "off"}) == START_UP


def test_a_blank_value_is_unset_at_start_up_too():
    assert _modules({"ACCELERATE_WARMUP_PATCH": " \t"}) == []


START_UP = ["accelerate_warmup_patch"]


def test_armed_start_up_without_deepspeed_imports_the_package_alone():
    # no wrapt, and not even the rest of the package: they load when a framework is imported (each module
    # on the start-up path costs ~0.4 M instructions: docs/benchmarks.md)
    assert _modules({"ACCELERATE_WARMUP_PATCH": "reset"}) == START_UP


FINDER = "[f for f in sys.meta_path if type(f).__module__ == 'accelerate_warmup_patch']"


@pytest.mark.usefixtures("deepspeed")
def test_armed_start_up_loads_the_rest_of_the_package_at_the_first_deepspeed_import():
    proc = run_python(
        "import json, sys\n"
        f"assert len({FINDER}) == 1, sys.meta_path\n"
        "assert 'accelerate_warmup_patch.api' not in sys.modules\n"
        "import deepspeed\n"
        "assert hasattr(deepspeed.initialize, '__wrapped__'), 'deepspeed.initialize is not wrapped'\n"
        "import accelerate_warmup_patch as awp\n"
        "print(json.dumps(awp.status()))",
        env={"ACCELERATE_WARMUP_PATCH": "reset"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    assert status["applied_by"] == [".pth"] and "deepspeed.initialize" in status["patched"], status


@pytest.mark.usefixtures("deepspeed")
@pytest.mark.parametrize("imports, env", [
    # armed by the .pth: deepspeed's import runs the loader, which calls the hook that apply() registered
    (["deepspeed"], {"ACCELERATE_WARMUP_PATCH": "reset"}),
    # deepspeed first: the package's import arms at once and patches what is loaded
    (["deepspeed", "accelerate_warmup_patch"], {}),
])
def test_from_the_pth_or_an_import_to_patch_deepspeed_in_at_most_four_calls(imports, env):
    proc = run_child("calls_to_patch_deepspeed.py", *imports, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    chains = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(chains) == 1 and 1 <= len(chains[0]) <= 4, chains  # deepspeed is patched once, at most 4 calls in


def test_using_the_api_before_any_framework_arms_the_hooks_at_once():
    proc = run_python("import accelerate_warmup_patch as awp, sys\n"
                      "status = awp.status()\n"
                      f"print(status['applied_by'], status['waiting_for'], len({FINDER}))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"['import'] {list(WAITS_FOR)} 1"


@pytest.mark.usefixtures("deepspeed")
def test_armed_by_the_pth_then_import_deepspeed_fixes_the_trajectory():
    spec = Spec()
    ran = run_specs(spec, env={"ACCELERATE_WARMUP_PATCH": "1"})
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.key]
    assert ran.data["status"]["applied_by"] == [".pth"]


@pytest.mark.transformers  # accelerate's DeepSpeed road reads transformers' version (tests/tiers.py)
@pytest.mark.usefixtures("deepspeed")
def test_armed_by_the_pth_then_import_accelerate_fixes_the_trajectory():
    spec = Spec(path="accelerate")
    ran = run_specs(spec, env={"ACCELERATE_WARMUP_PATCH": "on"})
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.key]


@pytest.mark.usefixtures("deepspeed")
def test_pth_plus_explicit_import_plus_apply_wraps_once():
    proc = run_child("three_arms.py", env={"ACCELERATE_WARMUP_PATCH": "reset"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['.pth', 'apply()', 'sitecustomize']"


# what a process makes of each value: its mode and what it patched once deepspeed is imported
MODE_AND_PATCHED = ("import accelerate_warmup_patch as awp, deepspeed, json\n"
                    "print(json.dumps([awp.status()['mode'], len(awp.status()['patched'])]))")


# one value of each kind in a real process armed by the .pth; every spelling is tests/unit/test_settings.py's
@pytest.mark.usefixtures("deepspeed")
@pytest.mark.parametrize("value", ["o f f"])
def test_a_value_not_accepted_patches_nothing_and_warns_once_naming_the_accepted_ones(value):
    proc = run_python(MODE_AND_PATCHED, env={"ACCELERATE_WARMUP_PATCH": value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["off", 0]
    lines = [line for line in proc.stderr.splitlines() if f"ACCELERATE_WARMUP_PATCH={value!r}" in line]
    assert len(lines) == 1, proc.stderr
    assert settings.ACCEPTED in lines[0] and "nothing is changed by it" in lines[0]


@pytest.mark.usefixtures("deepspeed")
@pytest.mark.parametrize("value", ["  \t "])
def test_a_blank_value_is_unset_and_the_import_arms(value):
    proc = run_python(MODE_AND_PATCHED, env={"ACCELERATE_WARMUP_PATCH": value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    mode, patched = json.loads(proc.stdout.strip().splitlines()[-1])
    assert mode == "reset" and patched > 0
    assert "ACCELERATE_WARMUP_PATCH" not in proc.stderr


@pytest.mark.usefixtures("deepspeed")
@pytest.mark.parametrize(("value", "mode"), [("Enable", "reset"), ("DISABLED", "off")])
def test_the_common_spellings_are_accepted_without_a_warning(value, mode):
    proc = run_python(MODE_AND_PATCHED, env={"ACCELERATE_WARMUP_PATCH": value})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])[0] == mode
    assert "is not one of" not in proc.stderr


@pytest.mark.usefixtures("deepspeed")
def test_apply_with_a_mode_not_accepted_changes_nothing():
    proc = run_python(
        "import accelerate_warmup_patch as awp, deepspeed, json\n"
        "awp.remove(); first = awp.apply('rset'); unarmed = [awp.status()['mode'], len(awp.status()['patched'])]\n"
        "awp.apply('step'); second = awp.apply('bogus')\n"
        "print(json.dumps([first, unarmed, second, awp.status()['mode']]))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["off", ["off", 0], "step", "step"]
    assert sum("apply(mode=...)='rset' is not one of" in line for line in proc.stderr.splitlines()) == 1


@pytest.mark.parametrize("strict", ["0", "false", " ", "no"])
def test_strict_set_to_no_is_as_lazy_as_unset(strict):
    # armed by the .pth: the start-up path alone, the API only once a framework is imported
    code = "import sys; print(sorted(m for m in sys.modules if m.startswith('accelerate_warmup_patch')))"
    unset = run_python(code, env={"ACCELERATE_WARMUP_PATCH": "reset"})
    proc = run_python(code, env={"ACCELERATE_WARMUP_PATCH": "reset", "ACCELERATE_WARMUP_PATCH_STRICT": strict})
    assert proc.returncode == 0 == unset.returncode, proc.stderr[-3000:]
    assert proc.stdout == unset.stdout == "['accelerate_warmup_patch']\n"


def test_bad_value_is_warned_of_once_in_a_process_whose_site_packages_are_processed_twice(tmp_path):
    # a framework imported by an earlier .pth makes the .pth line read the value at start-up; site.py
    # runs a venv's .pth lines twice
    venv = _bare_venv(tmp_path, _fake_deepspeed(tmp_path))
    (venv.site_packages / "ab_import_deepspeed.pth").write_text("import deepspeed\n")
    shutil.copy(REPO / "accelerate_warmup_patch.pth", venv.site_packages)
    proc = venv.run(USER_CODE, env={"ACCELERATE_WARMUP_PATCH": "rset"})
    assert proc.returncode == 0 and proc.stdout.strip() == "user code ran", proc.stderr
    assert sum("ACCELERATE_WARMUP_PATCH='rset'" in line for line in proc.stderr.splitlines()) == 1, proc.stderr


# Strict mode: the job does not run. site.py prints the traceback of an exception from a .pth line and
# goes on, and ignores one from sitecustomize, so each route must stop the interpreter itself.

STRICT = "ACCELERATE_WARMUP_PATCH_STRICT"
USER_CODE = "print('user code ran')"


@dataclass
class BareVenv:
    python: Path
    site_packages: Path

    def run(self, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.python), "-c", code], env={**os.environ, **env}, capture_output=True,
                              text=True, timeout=600, cwd=self.python.parent)


def _bare_venv(folder: Path, *first_paths: Path) -> BareVenv:
    """A fresh venv without this package's .pth: ``first_paths``, this checkout and the suite's
    site-packages on its path (path lines: the .pth files in them do not run)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    python = folder / "venv" / "bin" / "python"
    site_packages = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                   capture_output=True, text=True, check=True).stdout.strip()
    venv = BareVenv(python, Path(site_packages))
    paths = [*first_paths, REPO, Path(sysconfig.get_paths()["purelib"])]
    (venv.site_packages / "a_paths.pth").write_text("".join(f"{path}\n" for path in paths))
    return venv


def _fake_deepspeed(folder: Path) -> Path:
    """Fault injection: a deepspeed whose shape the patch does not know, so patching it fails."""
    (folder / "fake" / "deepspeed").mkdir(parents=True)
    (folder / "fake" / "deepspeed" / "__init__.py").write_text('__version__ = "0.15.2"\n')
    return folder / "fake"


def _the_one_line(proc: subprocess.CompletedProcess[str], error: str) -> str:
    """The process stopped before the program ran, with exit status 2 and one line on stderr."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "user code ran" not in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"accelerate_warmup_patch.{error}: ") and f"{STRICT} is set" in lines[0]
    return lines[0]


def _says_what_is_wrong_and_how_to_fix_it(line: str, value: str) -> None:
    assert f"ACCELERATE_WARMUP_PATCH={value!r} is not one of: {settings.ACCEPTED}" in line, line
    assert "set ACCELERATE_WARMUP_PATCH to one of these" in line, line


@pytest.mark.parametrize("value", ["rset", "of"])
def test_strict_stops_a_bad_value_before_the_program_through_the_pth(value):
    # this suite's venv has the real .pth, and site.py runs its lines twice: one line all the same
    proc = run_python(USER_CODE, env={"ACCELERATE_WARMUP_PATCH": value, STRICT: "1"})
    _says_what_is_wrong_and_how_to_fix_it(_the_one_line(proc, "SettingsError"), value)


@pytest.mark.parametrize("command", [["{bin}/accelerate-warmup-patch"], pytest.param(
    ["{python}", "-m", "accelerate_warmup_patch"], marks=pytest.mark.skipif(
        sys.version_info < (3, 10), reason="Python 3.9 has no sys.orig_argv: site.py cannot see `-m`'s module"))])
def test_strict_with_a_bad_value_still_lets_doctor_run_and_name_it(command):
    python = Path(sys.executable)
    argv = [part.format(bin=python.parent, python=python) for part in command]
    proc = subprocess.run([*argv, "doctor", "--strict"], capture_output=True, text=True, timeout=600,
                          cwd=REPO / "tests", env={**os.environ, "ACCELERATE_WARMUP_PATCH": "rset", STRICT: "1"})
    assert proc.returncode == 1, proc.stderr[-3000:]  # doctor --strict's own verdict, not start-up's exit 2
    assert "ACCELERATE_WARMUP_PATCH='rset' is NOT ACCEPTED" in proc.stdout.splitlines()[0], proc.stdout
    # and any other interpreter of that environment still stops before its program
    assert run_python(USER_CODE, env={"ACCELERATE_WARMUP_PATCH": "rset", STRICT: "1"}).returncode == 2


def test_strict_stops_a_bad_value_before_the_program_through_sitecustomize(tmp_path):
    venv = _bare_venv(tmp_path)
    (venv.site_packages / "sitecustomize.py").write_text("import accelerate_warmup_patch\n")
    proc = venv.run(USER_CODE, env={"ACCELERATE_WARMUP_PATCH": "rset", STRICT: "1"})
    _says_what_is_wrong_and_how_to_fix_it(_the_one_line(proc, "SettingsError"), "rset")


def test_strict_raises_a_bad_value_out_of_a_plain_import_for_the_caller_to_catch(tmp_path):
    proc = _bare_venv(tmp_path).run(
        "try:\n"
        "    import accelerate_warmup_patch\n"
        "except ValueError as error:\n"
        "    print(type(error).__name__, error)\n",
        env={"ACCELERATE_WARMUP_PATCH": "rset", STRICT: "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("SettingsError ")
    _says_what_is_wrong_and_how_to_fix_it(proc.stdout, "rset")


@pytest.mark.parametrize("route", [".pth", "sitecustomize"])
def test_strict_stops_before_the_program_when_patching_fails_at_start_up(tmp_path, route):
    # deepspeed (a fake that patching fails on) is imported by an earlier .pth, so the start-up patches it
    venv = _bare_venv(tmp_path, _fake_deepspeed(tmp_path))
    (venv.site_packages / "ab_import_deepspeed.pth").write_text("import deepspeed\n")
    if route == ".pth":
        shutil.copy(REPO / "accelerate_warmup_patch.pth", venv.site_packages)
    else:
        (venv.site_packages / "sitecustomize.py").write_text("import accelerate_warmup_patch\n")
    proc = venv.run(USER_CODE, env={"ACCELERATE_WARMUP_PATCH": "reset", STRICT: "1"})
    assert "patching deepspeed failed" in _the_one_line(proc, "PatchError")
