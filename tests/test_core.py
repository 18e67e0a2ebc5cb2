"""The core promise, on real engines: every release starts where the newest DeepSpeed starts.

Each test runs against the DeepSpeed and accelerate installed in this venv (nox runs the suite on
the newest release and on buggy ones). ``golden.json`` holds the newest release's unpatched
trajectories; ``test_golden_matches_the_newest_release_unpatched`` keeps it honest.
"""

from __future__ import annotations

from dataclasses import replace

import harness
import pytest
from conftest import GOLDEN, Spec, installed, run_child, run_python, run_specs
from scenarios import ACCELERATE, ALL, RAW, TRAINER

from accelerate_warmup_patch import releases, upstream

DEEPSPEED = installed("deepspeed")
ON_GOLDEN_RELEASE = GOLDEN["deepspeed"] == DEEPSPEED


def expected_unpatched_first_step(spec: Spec) -> list[float]:
    return harness.expected_unpatched_first_step(spec, DEEPSPEED)


@pytest.fixture(scope="session")
def unpatched():
    return run_specs(*ALL)


@pytest.fixture(scope="session")
def patched():
    return run_specs(*(replace(s, patch="before") for s in ALL))


@pytest.mark.skipif(not ON_GOLDEN_RELEASE, reason=f"golden.json is from DeepSpeed {GOLDEN['deepspeed']}")
def test_golden_matches_the_newest_release_unpatched(unpatched):
    assert unpatched.lrs == GOLDEN["runs"]


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.key)
def test_unpatched_first_step_is_what_the_guard_table_says(unpatched, spec):
    assert unpatched.lrs[spec.key][0] == expected_unpatched_first_step(spec)


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.key)
def test_patched_trajectory_equals_the_newest_release_exactly(patched, spec):
    assert patched.lrs[spec.key] == GOLDEN["runs"][spec.key]


def test_bug_is_reproduced_unpatched_and_fixed_patched_on_a_buggy_release(unpatched, patched):
    if releases.start_fact("WarmupLR", DEEPSPEED).value is not releases.Start.LEAVES_OPTIMIZER_LR:
        pytest.skip(f"WarmupLR is fixed upstream on {DEEPSPEED}")
    key = Spec().key
    assert unpatched.lrs[key][0] == [1e-3]  # the peak lr, at step 0
    assert patched.lrs[key][0] == [0.0]


def test_a_normal_patched_run_warns_of_nothing_but_a_changed_peak_lr(patched):
    # a change of a peak lr is a hyperparameter change: announced at WARNING (tests/test_roads.py)
    assert [x for x in patched.patch_lines() if "WARNING" in x and "peak lr" not in x] == []


def test_one_info_line_names_scheduler_groups_and_change(patched):
    lines = [x for x in patched.patch_lines() if "WarmupLR: group 0 lr 0.001 -> 0.0" in x]
    if releases.start_fact("WarmupLR", DEEPSPEED).value is releases.Start.LEAVES_OPTIMIZER_LR:
        assert lines, patched.stderr[-3000:]
        assert f"DeepSpeed {DEEPSPEED} leaves the optimizer's lr" in lines[0]
    else:
        assert not lines  # fixed releases: nothing to change, nothing to say


def test_newest_release_is_left_unchanged(patched):
    if releases.deepspeed_support(DEEPSPEED) is releases.Support.UNTESTED or not ON_GOLDEN_RELEASE:
        pytest.skip("only meaningful on the release the golden file comes from")
    assert patched.data["status"]["fixes_applied"] == 0
    assert patched.lrs == GOLDEN["runs"]


@pytest.mark.parametrize("spec", [RAW[0], RAW[5], ACCELERATE[1]], ids=lambda s: s.key)
def test_import_after_deepspeed_and_accelerate_still_patches(spec):
    ran = run_specs(replace(spec, patch="after"))
    assert ran.lrs[spec.key] == GOLDEN["runs"][spec.key]


def test_step_mode_uses_the_schedule_lr_k_at_step_k():
    specs = [RAW[0], RAW[4], RAW[7], ACCELERATE[1]]
    ran = run_specs(*(replace(s, patch="before", mode="step") for s in specs))
    for spec in specs:
        newest = GOLDEN["runs"][spec.key]
        assert ran.lrs[spec.key][:-1] == newest[1:], spec.key


def test_step_mode_from_the_environment():
    ran = run_specs(replace(RAW[0], patch="before"), env={"ACCELERATE_WARMUP_PATCH": "step"})
    assert ran.lrs[RAW[0].key][:-1] == GOLDEN["runs"][RAW[0].key][1:]
    assert ran.data["status"]["mode"] == "step"


def test_off_in_the_environment_beats_an_explicit_import(unpatched):
    specs = [replace(RAW[0], patch="before"), replace(ACCELERATE[0], patch="before")]
    ran = run_specs(*specs, env={"ACCELERATE_WARMUP_PATCH": "off"})
    assert ran.lrs == {s.key: unpatched.lrs[s.key] for s in specs}
    assert ran.data["status"]["patched"] == []
    assert "wrapt" not in ran.data["modules"]  # nothing was even about to be wrapped


def test_the_trainers_own_scheduler_is_left_alone(unpatched, patched):
    key = TRAINER[2].key
    assert patched.lrs[key] == unpatched.lrs[key] == GOLDEN["runs"][key]


def test_a_torch_scheduler_is_left_alone():
    spec = Spec(scheduler="WarmupLR-linear", torch_scheduler=True, steps=4)
    plain = run_specs(spec)
    ran = run_specs(replace(spec, patch="before"))
    assert ran.lrs == plain.lrs
    assert ran.data["status"]["fixes_applied"] == 0


def test_an_injected_failure_leaves_training_running_unpatched(unpatched):
    specs = [replace(RAW[0], patch="before"), replace(ACCELERATE[0], patch="before")]
    ran = run_specs(*specs, env={"AWP_TEST_INJECT_FAULT": "1"})
    assert ran.lrs == {s.key: unpatched.lrs[s.key] for s in specs}
    warnings = [x for x in ran.patch_lines() if "WARNING" in x and "injected fault" in x]
    assert len(warnings) == 1, ran.stderr[-3000:]
    assert "that scheduler runs exactly as unpatched (this warning is not repeated)" in warnings[0]


def test_strict_mode_raises_on_an_injected_failure():
    ran = run_specs(replace(RAW[0], patch="before"), check=False,
                    env={"AWP_TEST_INJECT_FAULT": "1", "ACCELERATE_WARMUP_PATCH_STRICT": "1"})
    assert ran.returncode != 0
    assert "PatchError" in ran.stderr and "injected fault" in ran.stderr




@pytest.mark.parametrize("strict", ["", "1"], ids=["default", "strict"])
def test_a_failure_while_arming_at_the_first_deepspeed_import_never_breaks_that_import(strict):
    proc = run_child("broken_arming.py", strict, env={"ACCELERATE_WARMUP_PATCH": "reset"})
    assert "injected fault" in proc.stderr
    if strict:
        assert proc.returncode != 0 and "imported" not in proc.stdout
    else:
        assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "imported", proc.stderr[-3000:]
        # deepspeed imports accelerate on the way (through transformers, which swallows what that import
        # raises): arming is tried at each framework's import, and warned of once
        assert proc.stderr.count("failed (RuntimeError('injected fault')); this process runs unpatched") == 1
        assert "arming the patch at the import of" in proc.stderr




def test_apply_twice_wraps_once_and_remove_restores_the_originals_exactly():
    proc = run_child("remove.py")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_remove_then_train_is_unpatched(unpatched):
    code = (
        "import accelerate_warmup_patch as awp, harness, json\n"
        "awp.remove()\n"
        "print('LRS', json.dumps(harness.run(harness.Spec())))\n"
        "harness._tear_down()\n"
    )
    proc = run_python(code)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LRS "))
    assert line == "LRS " + __import__("json").dumps(unpatched.lrs[Spec().key])


def test_importing_the_package_imports_no_framework():
    proc = run_python(
        "import sys, accelerate_warmup_patch\n"
        "print(sorted(m for m in ('torch','deepspeed','accelerate','wrapt','transformers') if m in sys.modules))"
    )
    assert proc.stdout.strip() == "[]", proc.stderr


@pytest.mark.parametrize("value", ["bogus", "yes please"])
def test_a_bad_environment_value_warns_once_and_patches_nothing(value):
    proc = run_python(
        "import accelerate_warmup_patch as awp, accelerate_warmup_patch.settings as s\n"
        "s.env_mode(); s.env_mode()\n"
        "print(awp.status()['mode'])",
        env={"ACCELERATE_WARMUP_PATCH": value},
    )
    warnings = [x for x in proc.stderr.splitlines() if "ACCELERATE_WARMUP_PATCH" in x]
    assert len(warnings) == 1, proc.stderr
    assert repr(value) in warnings[0] and "reset" in warnings[0] and "step" in warnings[0]
    assert proc.stdout.strip() == "off"  # an instruction the package does not understand changes nothing


def test_a_bad_environment_value_raises_in_strict_mode():
    proc = run_python("import accelerate_warmup_patch",
                      env={"ACCELERATE_WARMUP_PATCH": "bogus", "ACCELERATE_WARMUP_PATCH_STRICT": "1"})
    assert proc.returncode != 0 and "SettingsError" in proc.stderr
    assert "using 'reset'" not in proc.stderr, "strict mode raises: it uses nothing"




def test_the_patch_never_writes_into_accelerates_engine_wrapper():
    proc = run_child("untouched.py")
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]




def test_status_lists_only_what_a_caller_reaches_after_a_reload_and_apply_wraps_again():
    proc = run_child("reload.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    unfixed, fixed = proc.stdout.split("LRS ")[1].split()
    assert float(fixed) == 0.0
    lacks = upstream.lacks("start", "WarmupLR", DEEPSPEED)
    assert float(unfixed) == (1e-3 if lacks else 0.0)
