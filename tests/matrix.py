"""One row of the version matrix: run the scenarios on the installed releases, check the table.

    python tests/matrix.py engine|accelerate|scheduler|era [--results matrix/results.json] [--suggest]

Runs every matrix scenario unpatched and patched (each in a fresh process: tests/fresh_process.py), then checks:
- the guard table: the first optimizer step unpatched, per scheduler class and param group, is what
  ``releases.py`` claims for this release, and so is WarmupLR's default peak lr;
- the patch: the whole patched trajectory equals the newest release's (``golden.json``);
- the probe (probe.py): what it sees the release's scheduler classes lack is what the table says.
Writes one row (release, tier, verdicts, date, torch) into the results file and exits 1 on any
mismatch, naming the release. ``--suggest`` prints the table rows a release newer than the table
would need, from what it observed.

The era tier (``nox -s matrix_era``, stacks in ``tests/eras.py``) runs on the stack of the
release's month: raw engines, accelerate and the HF Trainer where their DeepSpeed path runs on
CPU, then the start-up activation tests (``tests/test_activation.py``) on that Python, and two CPU ranks
(``tests/era_ranks.py``) from DeepSpeed 0.13 on; its row names the whole stack and the package commit
it ran against.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys
from dataclasses import replace
from importlib import metadata
from pathlib import Path

import eras
import harness
import ports
from harness import GOLDEN, HERE, Spec, run_specs
from scenarios import MATRIX_ENGINE, MATRIX_SCHEDULER, TRAINER

from accelerate_warmup_patch import releases


def _golden_key(spec: Spec) -> str:
    return replace(spec, path="deepspeed").key if spec.path == "schedule" else spec.key


def _specs(tier: str, deepspeed: str) -> list[Spec]:
    if tier == "scheduler":
        specs = [replace(s, path="schedule") for s in MATRIX_SCHEDULER]
    elif tier == "accelerate":
        specs = [s for s in MATRIX_ENGINE if s.path == "accelerate"]
    elif tier == "era":
        specs = _era_specs(deepspeed)
    else:
        specs = MATRIX_ENGINE
    # a class the release does not have yet (WarmupCosineLR before 0.12.3) is no scenario for it
    return [s for s in specs if releases.start_fact(s.scheduler.split("-")[0], deepspeed) is not None]


def _era_specs(deepspeed: str) -> list[Spec]:
    """Raw engines (the release's scheduler classes alone where no engine runs on CPU: ``Era.engine``);
    accelerate and the HF Trainer where accelerate's DeepSpeed path runs on CPU."""
    if not _engine_runs(deepspeed):
        return [replace(s, path="schedule") for s in MATRIX_SCHEDULER]
    specs = [s for s in MATRIX_ENGINE if s.path == "deepspeed"]
    if _accelerate_runs():
        specs += [s for s in MATRIX_ENGINE if s.path == "accelerate"]
        if releases.installed("transformers"):
            specs += [s for s in TRAINER if not s.torch_scheduler]
    return specs


def _peak_lrs(rows: list[list[float]], spec: Spec) -> list[float]:
    """WarmupLR's peak per group, read back from step 2 of a linear warmup (lr(1) = min + (peak - min) / n)."""
    params = harness.SCHEDULERS[spec.scheduler]["params"]
    low, steps = params["warmup_min_lr"], params["warmup_num_steps"]
    return [round(low + (lr - low) * steps, 12) for lr in rows[2]]


def _expected_peaks(spec: Spec, deepspeed: str) -> list[float]:
    default = releases.warmup_max_lr_default(deepspeed)
    if default is releases.MaxLrDefault.CONSTANT:
        return [0.001] * len(spec.groups)
    if default is releases.MaxLrDefault.GROUP_0:
        return [spec.groups[0]] * len(spec.groups)
    return list(spec.groups)


def check(tier: str) -> tuple[dict[str, object], list[str]]:
    deepspeed = metadata.version("deepspeed")
    specs = _specs(tier, deepspeed)
    unpatched = run_specs(*specs)
    patched = run_specs(*(replace(s, patch="before") for s in specs))
    problems = []
    buggy = []
    for spec in specs:
        observed = unpatched.lrs[spec.key]
        expected = harness.expected_unpatched_first_step(replace(spec, path="deepspeed")
                                                         if spec.path == "schedule" else spec, deepspeed)
        if observed[0] != expected:
            problems.append(f"table: {spec.key} step 0 unpatched is {observed[0]}, the table says {expected}")
        if observed[0] != GOLDEN["runs"][_golden_key(spec)][0]:
            groups = f" ({len(spec.groups)} groups)" if len(spec.groups) > 1 else ""
            buggy.append(spec.scheduler.split("-")[0] + groups)
        if spec.scheduler == "WarmupLR-default-max" and _peak_lrs(observed, spec) != _expected_peaks(spec, deepspeed):
            problems.append(f"table: {spec.key} default peak is {_peak_lrs(observed, spec)}, the table says "
                            f"{_expected_peaks(spec, deepspeed)}")
        if patched.lrs[spec.key] != GOLDEN["runs"][_golden_key(spec)]:
            problems.append(f"patch: {spec.key} patched differs from DeepSpeed {GOLDEN['deepspeed']}")
    problems += _probe_problems()
    import torch

    row: dict[str, object] = {
        "deepspeed": deepspeed, "accelerate": releases.installed("accelerate"), "tier": tier,
        "unpatched": ("step 0 off the newest release's lr: " + ", ".join(dict.fromkeys(buggy))) if buggy
        else "same start as the newest release",
        "patched": "equals the newest release" if not any(p.startswith("patch") for p in problems) else "DIFFERS",
        "table": "matches" if not any(p.startswith("table") for p in problems) else "MISMATCH",
        "scenarios": len(specs), "date": datetime.date.today().isoformat(), "torch": torch.__version__,
        "package": _package_commit(),
    }
    if tier == "era":
        activation, passed = _activation(deepspeed)
        if not passed:
            problems.append(f"activation: {activation}")
        ranks, ranks_ok = _two_ranks(deepspeed)
        if not ranks_ok:
            problems.append(f"two ranks: {ranks}")
        row.update(_era_stack(specs, deepspeed), activation=activation, two_ranks=ranks)
    return row, problems


def _probe_problems() -> list[str]:
    """The probe (accelerate_warmup_patch/probe.py) on this release finds what the table says it lacks."""
    proc = subprocess.run([sys.executable, str(HERE / "children" / "wrapped.py")], capture_output=True, text=True,
                          cwd=HERE)
    if proc.returncode != 0:
        return [f"table: the probe's child failed: {proc.stderr[-2000:]}"]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])["probe"]
    if seen["probed"] != seen["table"]:
        return [f"table: the probe saw this release lack {seen['probed']}, the table says {seen['table']}"]
    return []


def _engine_runs(deepspeed: str) -> bool:
    """False for an era whose release has no CPU engine (``Era.engine``)."""
    era = eras.BY_ID.get(deepspeed)
    return era is None or era.engine


def _accelerate_runs() -> bool:
    """Whether the installed accelerate's DeepSpeed path runs on CPU."""
    accelerate = releases.installed("accelerate")
    return bool(accelerate) and releases.parse(accelerate) >= releases.parse(releases.ACCELERATE_CPU_FLOOR)


def _era_stack(specs: list[Spec], deepspeed: str) -> dict[str, object]:
    paths = {"deepspeed": "raw engine", "accelerate": "accelerate", "trainer": "HF Trainer",
             "schedule": "scheduler classes (no engine)"}
    era = eras.BY_ID.get(deepspeed)
    return {"python": platform.python_version(), "wrapt": releases.installed("wrapt"),
            "transformers": releases.installed("transformers"),
            "ran": " + ".join(dict.fromkeys(paths[s.path] for s in specs)), "era": era.date if era else None}


def _activation(deepspeed: str) -> tuple[str, bool]:
    """tests/test_activation.py in this venv: the .pth and the env var on this Python; the accelerate
    case only where accelerate's DeepSpeed path runs on CPU, the training cases only where an engine does."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "test_activation.py")]
    skip = []
    if not _accelerate_runs():
        skip.append("import_accelerate")
    if not _engine_runs(deepspeed):
        skip.append("fixes_the_trajectory")  # they train a real engine
    if skip:
        command += ["-k", " and ".join(f"not {name}" for name in skip)]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=HERE.parent)
    summary = (proc.stdout.strip().splitlines() or ["no output"])[-1].strip("= ").split(" in ")[0]
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-6000:] + proc.stderr[-2000:])
    return f"test_activation.py: {summary}", proc.returncode == 0


TWO_RANKS_FROM = "0.13.0"  # before it, DeepSpeed's own reduction rejects CPU tensors (docs/eras.md)


def _two_ranks(deepspeed: str) -> tuple[str, bool]:
    """torchrun, 2 CPU ranks, ZeRO 0 and 2, armed by ACCELERATE_WARMUP_PATCH alone: every rank's lrs are
    the newest release's, the weights agree (the gradients were reduced), one INFO line per job where
    the release needs the fix (rank 0 alone), none where it does not."""
    if not _engine_runs(deepspeed) or releases.parse(deepspeed) < releases.parse(TWO_RANKS_FROM):
        return f"not run: no two-rank CPU engine before DeepSpeed {TWO_RANKS_FROM}", True
    import tempfile

    newest = GOLDEN["runs"][Spec().key][:4]
    fact = releases.start_fact("WarmupLR", deepspeed)
    changes = 0 if fact is not None and fact.value is releases.Start.SETS_EVERY_GROUP else 1  # INFO lines a job prints
    results = []
    for stage in (0, 2):
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                       str(ports.port(ports.ERA_RANKS)), str(HERE / "era_ranks.py"), str(stage), out]
            # TMPDIR: torch's elastic agent leaves a folder there per launch
            env = {**os.environ, "ACCELERATE_WARMUP_PATCH": "reset", "TMPDIR": out}
            proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=HERE, timeout=600)
            ranks = [json.loads(f.read_text()) for f in sorted(Path(out).glob("rank*.json"))]
        infos = sum("[accelerate_warmup_patch] INFO" in line for line in (proc.stdout + proc.stderr).splitlines())
        ok = (proc.returncode == 0 and len(ranks) == 2 and all(r["lrs"] == newest and r["weights_equal"] for r in ranks)
              and infos == changes)
        if not ok:
            sys.stderr.write(f"two ranks, ZeRO {stage}: rc {proc.returncode}, {infos} INFO lines, {ranks}\n"
                             + proc.stderr[-4000:])
        results.append((stage, ok))
    summary = ", ".join(f"ZeRO {stage} {'ok' if ok else 'FAILED'}" for stage, ok in results)
    return f"torchrun 2 ranks: {summary}", all(ok for _, ok in results)


def _package_commit() -> str:
    """The last commit that changed the package, with "+dirty" when its files differ from it (shared work tree)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=HERE.parent).stdout.strip()

    commit = git("log", "-1", "--format=%h", "--", "accelerate_warmup_patch")
    return commit + ("+dirty" if git("status", "--porcelain", "--", "accelerate_warmup_patch") else "")


def suggest(deepspeed: str) -> None:
    """Print the SCHEDULER_STARTS rows that describe what this release was seen doing."""
    specs = _specs("engine", releases.NEWEST_DEEPSPEED)
    unpatched = run_specs(*specs)
    for name in releases.scheduler_classes():
        runs = [s for s in specs if s.scheduler.split("-")[0] == name and s.path == "deepspeed"]
        if not runs:
            continue
        same = all(unpatched.lrs[s.key][0] == GOLDEN["runs"][s.key][0] for s in runs)
        start = "SETS_EVERY_GROUP" if same else "LEAVES_OPTIMIZER_LR  # check: differs from the newest"
        print(f'    Fact("{name}", Span("{deepspeed}", None), Start.{start}, "{_RUN} on {deepspeed}"),')


_RUN = "real engine run, CPU"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("tier", choices=["engine", "accelerate", "scheduler", "era"])
    parser.add_argument("--results", type=Path)
    parser.add_argument("--suggest", action="store_true")
    args = parser.parse_args()
    ports.one_rank_port_by_default()
    if args.suggest:
        suggest(metadata.version("deepspeed"))
        return 0
    row, problems = check(args.tier)
    print(json.dumps(row))
    for problem in problems:
        print(f"DeepSpeed {row['deepspeed']}: {problem}", file=sys.stderr)
    if args.results:
        record(args.results, row)
    return 1 if problems else 0


def record(path: Path, row: dict[str, object]) -> None:
    """Add the row under a lock: matrix sessions may run side by side and share the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(path.read_text()) if path.exists() else {}
        results[f"{row['tier']}:{row['deepspeed']}:{row['accelerate'] or '-'}"] = row
        path.write_text(json.dumps(dict(sorted(results.items())), indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
