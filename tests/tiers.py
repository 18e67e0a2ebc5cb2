"""The releases each nox session installs: the suite's, the version matrix's tiers, CI's subset.

Test tooling, not part of the package (the wheel ships the guard table's facts, not CI's pins).
Standard library and the guard table only: the noxfile imports this module.
"""

from __future__ import annotations

from accelerate_warmup_patch.releases import NEWEST_ACCELERATE, NEWEST_DEEPSPEED


def _series(minor_to_last_patch: dict[str, int]) -> tuple[str, ...]:
    return tuple(f"{minor}.{patch}" for minor, last in minor_to_last_patch.items() for patch in range(last + 1))


# Every release on the package registry in each range (pip index versions deepspeed, 2026-11-29).
# engine tier: a real engine runs on CPU with torch 2.13; scheduler tier: it does not (how-it-works.md#limitations).
# 0.14.0-0.14.3 are scheduler tier: their deepspeed/elasticity/elastic_agent.py imports `log`
# (0.14.0) and `_get_socket_with_port` (0.14.0-0.14.3) from torch.distributed.elastic.agent.server.api,
# which torch 2.13 no longer has (real runs; 0.14.4 dropped both imports).
ENGINE_TIER = _series({"0.14": 5, "0.15": 4, "0.16": 9, "0.17": 6, "0.18": 9, "0.19": 8})[4:]
SCHEDULER_TIER = (*_series({"0.9": 5, "0.10": 3, "0.11": 2, "0.12": 6, "0.13": 5}), "0.14.0", "0.14.1", "0.14.2",
                  "0.14.3")
# installs a release needs beside it that its own metadata does not pin (seen in real runs)
SCHEDULER_TIER_EXTRAS = {"0.9.0": ("pydantic<2",)}  # 0.9.0 uses pydantic 1's FieldInfo.required
SCHEDULER_TIER_TORCH = "2.1.2"  # a torch of their time (a CUDA build from the registry; runs on CPU)
# the newest patch of every accelerate minor whose DeepSpeed path runs on CPU
ACCELERATE_TIER = ("0.29.3", "0.30.1", "0.31.0", "0.32.1", "0.33.0", "0.34.2", "1.0.1", "1.1.1", "1.2.1",
                   "1.3.0", "1.4.0", "1.5.2", "1.6.0", "1.7.0", "1.8.1", "1.9.0", "1.10.1", "1.11.0",
                   "1.12.0", "1.13.0", "1.14.0", "1.15.0", "1.16.0")
ACCELERATE_TIER_DEEPSPEED = ("0.14.4", NEWEST_DEEPSPEED)  # one buggy, one fixed
# what CI runs on top of the full suite (TEST_DEEPSPEED): the releases where behavior changes
CI_ENGINE = (ENGINE_TIER[0], "0.15.3", "0.18.9", "0.19.0", "0.19.3", "0.19.4")
CI_ACCELERATE = (ACCELERATE_TIER[0], ACCELERATE_TIER[-1])
CI_SCHEDULER = ("0.12.6",)
# releases that start WarmupLR right but lack its newest default peak: one per range of the table
# (releases.WARMUP_MAX_LR_DEFAULTS): the peak of a scheduler built before the patch stays the release's
DEFAULT_PEAK_RANGES = ("0.15.3", "0.18.9")

# The releases `nox -s tests` runs the suite on: the newest (no-op expected) and a buggy one.
TEST_DEEPSPEED = ("0.15.2", NEWEST_DEEPSPEED)
# Modules whose promises are about the package's own machinery, which runs the same code on every release: `nox -s
# tests` runs them on the buggy release alone (TEST_DEEPSPEED[0]), where the patch wraps the most (the newest
# release's targets are a subset of its). Every module that asserts an lr, a verdict or a doctor state of the
# installed release runs on both.
ONE_RELEASE_TESTS = {
    "tests/test_hooks.py": "the post-import hook, the finder and the failure policy: no lr, no release fact",
    "tests/test_logging.py": "the package's log lines against the program's logging configuration",
    "tests/test_fresh_process.py": "the suite's own forked runs against new interpreters",
    "tests/test_wrappers.py": "each installed wrapper pickles, copies and introspects as its original (0.15.2 "
                              "installs every wrapper 0.19.8 does, and the scheduler methods' besides)",
    "tests/test_cli.py": "the command line's arguments, output shapes and child processes (doctor's states and "
                         "answers per release are tests/test_doctor.py's, on both)",
    "tests/test_layout.py": "the package's import structure",
    "tests/test_deploy.py": "the deployment files: the modules arm or disarm the package under Lmod and Environment "
                            "Modules, and the checks answer for the jobs' Python (the module's real job asserts the "
                            "lr of an affected release)",
    "tests/test_builds.py": "builds that are not releases, made from 0.15.2's own code (tests/builds.py)",
    "tests/test_coexistence.py": "apply() and remove() from threads, beside other tools' wrappers: the wrapping's "
                                 "machinery, on 0.15.2's targets (every one 0.19.8 has, and the scheduler methods)",
    "tests/test_audit_store.py": "the audit's reading of a bucket against the same folders on disk: the reading is "
                                 "the release's own files either way (tests/test_audit.py judges both releases)",
}
# Modules whose every test needs transformers (the HF Trainer, or accelerate's DeepSpeed road: accelerate 1.16's
# DeepSpeed plugin reads transformers' version and raises PackageNotFoundError without it, a real run shows); a test
# elsewhere that needs it carries the `transformers` marker itself. `nox -s tests` runs them in a second pass, once it
# has installed transformers into the session's venv; the first pass runs every other test in that venv without it,
# as a raw DeepSpeed user's venv is. Why: DeepSpeed 0.15.2 imports transformers at its top wherever it is installed
# (1.5 s of the 4.5 s CPU of `import deepspeed`), and the first pass starts about 270 interpreters that import it.
TRANSFORMERS_TESTS = {
    "tests/test_core.py": "the Trainer's own scheduler; accelerate's road; deepspeed imports accelerate through "
                          "transformers",
    "tests/test_training.py": "the Trainer's step mode and resume",
    "tests/test_warn_mode.py": "warn mode on every road, the Trainer's and accelerate's among them",
    "tests/test_step_mode.py": "step mode on every road, the Trainer's and accelerate's among them",
    "tests/test_mark.py": "the Trainer's and accelerate's saves and resumes carry record 1",
    "tests/test_audit.py": "the audit of the Trainer's and accelerate's checkpoints",
    "tests/test_audit_store.py": "a bucket holding a Trainer's run",
    "tests/test_quickstart.py": "the README's Trainer line",
    "tests/test_fresh_process.py": "the forked runs' server has imported torch and transformers",
    "tests/test_audit_histories.py": "a history's jobs through accelerate, whose DeepSpeed plugin reads transformers' "
                                     "version",
}
TEST_ACCELERATE = NEWEST_ACCELERATE
TEST_TORCH = "2.13.0"
TEST_TRANSFORMERS = "5.24.0"  # accelerate 1.x imports transformers when present; pinned, not floated
TEST_TRANSFORMERS_OLD_ACCELERATE = "4.57.6"  # transformers 5.x requires accelerate >= 1.1
DEMO_DEEPSPEED = "0.15.2"  # `nox -s demo` shows the bug and its fix on this release by default
# the real MPI and Slurm launches CI runs (nox -s launchers): the buggy release, where a missed rank shows
CI_LAUNCHERS = ("0.15.2",)
# what `nox -s quick` runs on each TEST_DEEPSPEED release: the core promises, on real engines
QUICK_TESTS = ("tests/test_core.py",)
