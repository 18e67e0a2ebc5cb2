"""Start-up activation in real interpreters: the installed .pth, the env var, sitecustomize."""

from __future__ import annotations

import json

from conftest import GOLDEN, Spec, run_python, run_specs

from accelerate_warmup_patch import api

PROBE = ("import sys, json\n"
         "print(json.dumps(sorted(m for m in ('accelerate_warmup_patch', 'accelerate_warmup_patch.api', "
         "'accelerate_warmup_patch.bootstrap', 'accelerate_warmup_patch.settings', 'accelerate_warmup_patch.patch', "
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


def test_a_blank_value_does_not_arm_at_start_up():
    proc = run_python("import accelerate_warmup_patch as awp; print(awp.status()['waiting_for'])",
                      env={"ACCELERATE_WARMUP_PATCH": "  "})
    assert proc.stdout.strip() == "[]", proc.stderr


START_UP = ["accelerate_warmup_patch", "accelerate_warmup_patch.bootstrap"]


def test_armed_start_up_without_deepspeed_imports_the_package_alone():
    # no wrapt, and not even the rest of the package: they load when a framework is imported
    assert _modules({"ACCELERATE_WARMUP_PATCH": "reset"}) == START_UP


FINDER = "[f for f in sys.meta_path if type(f).__module__ == 'accelerate_warmup_patch.bootstrap']"


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


def test_using_the_api_before_any_framework_arms_the_hooks_at_once():
    proc = run_python("import accelerate_warmup_patch as awp, sys\n"
                      "status = awp.status()\n"
                      f"print(status['applied_by'], status['waiting_for'], len({FINDER}))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == f"['import'] {list(api._TARGETS)} 1"


def test_armed_by_the_pth_then_import_deepspeed_fixes_the_trajectory():
    spec = Spec()
    ran = run_specs(spec, env={"ACCELERATE_WARMUP_PATCH": "1"})
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.key]
    assert ran.data["status"]["applied_by"] == [".pth"]


def test_armed_by_the_pth_then_import_accelerate_fixes_the_trajectory():
    spec = Spec(path="accelerate")
    ran = run_specs(spec, env={"ACCELERATE_WARMUP_PATCH": "on"})
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.key]


def test_pth_plus_explicit_import_plus_apply_wraps_once():
    proc = run_python(
        "import accelerate_warmup_patch as awp; awp.apply(); awp.arm_from_environment('sitecustomize')\n"
        "import deepspeed\n"
        "w = deepspeed.initialize\n"
        "assert not hasattr(w.__wrapped__, '__wrapped__'), 'wrapped twice'\n"
        "assert awp.status()['patched'].count('deepspeed.initialize') == 1\n"
        "print(awp.status()['applied_by'])",
        env={"ACCELERATE_WARMUP_PATCH": "reset"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['.pth', 'apply()', 'sitecustomize']"


def test_bad_value_at_start_up_warns_once_and_does_not_crash():
    proc = run_python("import accelerate_warmup_patch as awp; print(awp.status()['mode'])",
                      env={"ACCELERATE_WARMUP_PATCH": "maybe"})
    assert proc.returncode == 0
    assert proc.stdout.strip() == "reset"
    assert sum("ACCELERATE_WARMUP_PATCH='maybe'" in line for line in proc.stderr.splitlines()) == 1
