"""The differential tier: the real reference release (releases.BEHAVIOR_REFERENCE) is the oracle, over generated
scheduler configurations (tests/scheduler_space.py), at every optimizer step.

- The installed release PATCHED, in each mode that changes lrs, against the reference UNPATCHED: on the classes the
  package says run as the reference (``CLAIMED``) every step's lrs are the reference's, and a tensor lr stays a tensor
  wherever the installed release's own step keeps one (PR #8202, not backported, decides the type after that); on the
  others the patch changes nothing (patched == unpatched). Warn mode changes nothing anywhere.
- A patched run logs no DeepSpeed WARNING the reference does not.
- The package's own model of the reference (reference.step_lrs: the record's ``expected``) gives the reference's lrs
  wherever it gives an answer.

The oracle is the reference's own ``deepspeed/runtime/lr_schedules.py``, loaded by path (never a copy in the project):
from AWP_REFERENCE_DEEPSPEED (a folder holding ``deepspeed/``), else the folder the nox session installs it into
(``<venv>/reference-deepspeed``, noxfile.py), else the installed release where it is the reference. The installed
release unpatched is its own file loaded by path too (the patch wraps only ``deepspeed.runtime.lr_schedules``).

Budget: AWP_DIFFERENTIAL_EXAMPLES configurations per test (default in ``EXAMPLES``; docs/differential.md gives the
seconds), ``nox -s differential`` for a long search. Failures hypothesis finds are shrunk and kept as @example.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import hypothesis  # the sessions that install DeepSpeed install it (noxfile.py's _install_oracle)
import pytest
from conftest import REQUIRE, installed
from hypothesis import HealthCheck, example, given, settings
from scheduler_space import CLASSES, Config, Lr, Trace, configs, deepspeed_warnings, run

from accelerate_warmup_patch import reference as model, releases

DEEPSPEED = installed("deepspeed")
REFERENCE = releases.BEHAVIOR_REFERENCE
EXAMPLES = int(os.environ.get("AWP_DIFFERENTIAL_EXAMPLES", "150"))
SEARCH = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
# the classes the package says run as the reference, patched (README, docs/how-it-works.md)
CLAIMED = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
MODES = ("reset", "step")  # the modes that change lrs; warn changes none
ENV_REFERENCE = "AWP_REFERENCE_DEEPSPEED"
TENSOR_ROUNDING = 1e-6  # a tensor lr holds float32: a release that writes floats differs by its rounding
FLOAT32_EPS = 4 * 2.0 ** -23  # a few float32 roundings, relative to the config's largest lr
LOGGER = logging.getLogger("DeepSpeed")
PACKAGE_LOGGER = logging.getLogger("accelerate_warmup_patch")


# The modules ------------------------------------------------------------------------------------------------------

def _reference_folder() -> Path | None:
    """The folder holding the reference release's ``deepspeed/`` (see the module's docstring), or None."""
    given_folder = os.environ.get(ENV_REFERENCE)
    if given_folder:
        return Path(given_folder)
    beside = Path(sys.prefix) / "reference-deepspeed"
    if (beside / "deepspeed").is_dir():
        return beside
    if DEEPSPEED == REFERENCE:
        import deepspeed

        return Path(deepspeed.__file__).parent.parent
    return None


def _release_of(folder: Path) -> str | None:
    """The release a folder's ``deepspeed/`` is, from its installed metadata or its sdist's version.txt."""
    infos = sorted(folder.glob("deepspeed-*.dist-info"))
    if infos:
        return infos[0].name[len("deepspeed-"):-len(".dist-info")]
    version_txt = folder / "version.txt"
    return version_txt.read_text().strip() if version_txt.is_file() else None


def _by_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _oracle() -> ModuleType:
    folder = _reference_folder()
    if folder is None or not (folder / "deepspeed/runtime/lr_schedules.py").is_file():
        why = (f"no DeepSpeed {REFERENCE} to compare with: set {ENV_REFERENCE} to a folder holding its deepspeed/ "
               f"(pip install --no-deps --target FOLDER deepspeed=={REFERENCE}), or run `nox -s tests`")
        if os.environ.get(REQUIRE, "").strip() not in ("", "0"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why, allow_module_level=True)
    assert _release_of(folder) in (REFERENCE, None), f"{folder} holds DeepSpeed {_release_of(folder)}, not {REFERENCE}"
    return _by_path("awp_reference_lr_schedules", folder / "deepspeed/runtime/lr_schedules.py")


def _unpatched() -> ModuleType:
    import deepspeed

    return _by_path("awp_unpatched_lr_schedules", Path(deepspeed.__file__).parent / "runtime/lr_schedules.py")


ORACLE = _oracle()
UNPATCHED = _unpatched()


@pytest.fixture(scope="module")
def patched_module():
    """The installed ``deepspeed.runtime.lr_schedules``, and a function that arms the patch in a mode (disarmed
    after the module)."""
    from deepspeed.runtime import lr_schedules

    import accelerate_warmup_patch

    def arm(mode: str) -> ModuleType:
        accelerate_warmup_patch.apply(mode)
        return lr_schedules

    yield arm
    accelerate_warmup_patch.remove()


# The comparison ---------------------------------------------------------------------------------------------------

def _same_value(ran: Lr, reference: Lr, scale: float = 0.0) -> bool:
    """Equal, up to float32's rounding where a tensor holds either: relative to the value, and absolute to ``scale``
    (the config's largest lr: min + (max - min) computed in float32 cancels to 0.0 where float64 leaves 1e-13)."""
    if ran.tensor or reference.tensor:
        return math.isclose(ran.value, reference.value, rel_tol=TENSOR_ROUNDING, abs_tol=FLOAT32_EPS * scale + 1e-15)
    return math.isclose(ran.value, reference.value, rel_tol=1e-12, abs_tol=1e-15)


def _scale(config: Config) -> float:
    """The largest lr (or ratio) a config names: the magnitude float32's rounding is relative to."""
    values = [*config.group_lrs, *(config.before_step0 or ())]
    for value in config.params.values():
        values += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, float)]
    return max(abs(v) for v in values)


def _first_difference(ran: Trace, reference: Trace, release: Trace | None = None, scale: float = 0.0,
                      types: bool = True) -> str | None:
    """Where ``ran`` first differs from ``reference``: its error, a step's lrs, or a group's type (a tensor lr or a
    float): the reference's, or where ``release`` is given, the release's own (its step's write, #8202 not
    backported)."""
    if ran.error != reference.error:
        return f"error {ran.error}, the reference {reference.error}"
    typed = release.steps if release is not None else reference.steps
    for step, (lrs, expected, own) in enumerate(zip(ran.steps, reference.steps, typed)):
        if not all(_same_value(a, b, scale) for a, b in zip(lrs, expected)):
            return f"step {step}: lrs {[a.value for a in lrs]}, the reference {[b.value for b in expected]}"
        for group, (a, b, c) in enumerate(zip(lrs, expected, own)):
            if types and a.tensor not in (b.tensor, c.tensor):
                return f"step {step}: group {group}'s lr is {_kind(a)}, the reference's and the release's " \
                       f"{_kind(b)}"
    if len(ran.steps) != len(reference.steps):
        return f"{len(ran.steps)} steps ran, the reference {len(reference.steps)}"
    return None


def _kind(lr: Lr) -> str:
    return "a tensor" if lr.tensor else "a float"


def _refused_by_the_reference(reference: Trace) -> bool:
    """A config the reference's constructor refuses: nothing runs on it, so nothing is compared."""
    return reference.error is not None and reference.error[0] == "construction"


def _warnings_beyond(ran: Trace, reference: Trace) -> list[str]:
    return list((Counter(ran.warnings) - Counter(reference.warnings)).elements())


def _model_at(config: Config):
    """The package's model of the reference as the record asks it at a step (reference.step_lrs), on the scheduler of
    the run where it stands."""
    built_at = config.params.get("last_batch_iteration")

    def observe(scheduler, optimizer):
        lrs = [g["lr"] for g in optimizer.param_groups]
        return model.step_lrs(scheduler, config.scheduler, scheduler.last_batch_iteration, lrs, built_at)

    return observe


# the failures the search found, shrunk (tests/scheduler_space.py's Config), kept so that each is tried on every run
FOUND = (
    # 0.15.2: the patch's start write turned a tensor lr into a float where the release and the reference keep it
    Config("WarmupLR", (0.0,), True, {}, None, None, False, 1),
    # 0.15.2: a WarmupLR built mid-way kept 0.15.2's default peak (0.001), where the reference's is the group's lr
    Config("WarmupLR", (0.0,), False, {"last_batch_iteration": 0}, None, None, False, 2),
    # 0.16.1: group 1's tensor lr came back a float (the release's constructor wrote the patch's get_lr() answer)
    Config("WarmupCosineLR", (0.0, 0.0), True, {"total_num_steps": 1}, None, None, False, 1),
    # 0.16.1: DeepSpeed's "before it has started" WARNING twice (its constructor's get_lr(), then the patch's)
    Config("WarmupCosineLR", (0.0,), False, {"total_num_steps": 1}, None, None, False, 1),
    # 0.15.2 (the test's tolerance): float32 cancels min + (max - min) to 0.0, the model's float64 leaves 2.5e-13
    Config("WarmupLR", (0.0,), True, {"warmup_min_lr": 1e-05, "warmup_num_steps": 1}, None, None, False, 3),
    # 0.19.3: warn mode said nothing of the unknown warmup_type that fails unpatched and that reset repairs (#8151)
    Config("WarmupCosineLR", (1e-3,), False, {"total_num_steps": 4, "warmup_type": "cosine"}, None, None, False, 2),
    # 0.16.1: total == warmup fails unpatched at step 3, reset repairs it, warn mode said nothing of it (#8142)
    Config("WarmupCosineLR", (1e-3,), False, {"total_num_steps": 2, "warmup_num_steps": 2}, None, None, False, 4),
)


def _found(test):
    for config in FOUND:
        test = example(config=config)(test)
    return test


# The tests --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@given(config=configs(CLAIMED))
@_found
@SEARCH
def test_patched_runs_every_step_as_the_reference(patched_module, mode, config: Config):
    reference = run(ORACLE, config, LOGGER)
    hypothesis.assume(not _refused_by_the_reference(reference))
    ran = run(patched_module(mode), config, LOGGER)
    release = run(UNPATCHED, config, LOGGER)
    difference = _first_difference(ran, reference, release, _scale(config))
    assert difference is None, f"{difference}: {config.describe()}"


@pytest.mark.parametrize("mode", MODES)
@given(config=configs(CLAIMED))
@_found
@SEARCH
def test_patched_logs_no_deepspeed_warning_the_reference_does_not(patched_module, mode, config: Config):
    reference = run(ORACLE, config, LOGGER)
    hypothesis.assume(not _refused_by_the_reference(reference))
    ran = run(patched_module(mode), config, LOGGER)
    assert (beyond := _warnings_beyond(ran, reference)) == [], f"{beyond}: {config.describe()}"


@given(config=configs(tuple(c for c in CLASSES if c not in CLAIMED)))
@SEARCH
def test_the_patch_changes_nothing_on_the_classes_it_does_not_claim(patched_module, config: Config):
    ran = run(patched_module("reset"), config, LOGGER)
    difference = _first_difference(ran, run(UNPATCHED, config, LOGGER), scale=_scale(config))
    assert difference is None, f"{difference}: {config.describe()}"


@given(config=configs())
@SEARCH
def test_warn_mode_changes_no_lr(patched_module, config: Config):
    ran = run(patched_module("warn"), config, LOGGER)
    difference = _first_difference(ran, run(UNPATCHED, config, LOGGER), scale=_scale(config))
    assert difference is None, f"{difference}: {config.describe()}"


@given(config=configs(CLAIMED))
@_found
@SEARCH
def test_the_model_of_the_reference_is_the_reference(patched_module, config: Config):
    """The model the record's ``expected`` and the audit use, at every step of a run it speaks of: neither a resume
    (the record hands on the loaded save's step 0) nor a script's write before step 0 (the record checks what ran)."""
    hypothesis.assume(config.resume_after is None and config.before_step0 is None)
    reference = run(ORACLE, config, LOGGER)
    hypothesis.assume(not _refused_by_the_reference(reference))
    ran = run(patched_module("reset"), config, LOGGER, observe=_model_at(config))
    for step, (said, lrs) in enumerate(zip(ran.seen, reference.steps)):
        assert said is not None, f"step {step}: no answer: {config.describe()}"
        assert all(_same_value(Lr(a, False), b, _scale(config)) for a, b in zip(said, lrs)), \
            f"step {step}: the model says {said}, the reference runs {[b.value for b in lrs]}: {config.describe()}"


@given(config=configs(CLAIMED))
@_found
@SEARCH
def test_warn_mode_speaks_wherever_reset_changes_a_run(patched_module, config: Config):
    """Warn mode names what reset would change, at construction: a run whose lrs (or failure) reset changes at any
    step gets the package's WARNING, one whose unknown warmup_type reset repairs names it, and one whose cosine reset
    holds past the warmup names that (#8142's ratio on 0.19.2 and older)."""
    from accelerate_warmup_patch.state import STATE

    reset = run(patched_module("reset"), config, LOGGER)
    release = run(UNPATCHED, config, LOGGER)
    if _first_difference(reset, release, types=False) is None:
        return  # reset changes no lr here (every config on the reference; a tensor kept a tensor): nothing to say
    STATE.warned.clear()  # the one seam: a warning is said once per key, and a key holds id(scheduler), reused here
    with deepspeed_warnings(PACKAGE_LOGGER) as said:
        run(patched_module("warn"), config, LOGGER)
    assert said, f"warn mode said nothing; reset changes {_first_difference(reset, release, types=False)}: " \
                 f"{config.describe()}"
    if release.error is not None and reset.error is None:  # the line names the failure reset repairs
        assert any(" fails " in line for line in said), f"{said}: {config.describe()}"
