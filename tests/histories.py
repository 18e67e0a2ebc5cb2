"""Run histories for the audit's rule (#55 item 6): random sequences of real engine runs on CPU, the truth of every
save kept beside them, the rule checked after each step, and a failing history shrunk to the fewest steps that still
fail (tests/test_audit_histories.py runs them; docs/audit.md says what the search covers and what it cannot).

A history is a list of steps, plain data (JSON), each one of:

- ``start``: a new run folder, a fresh engine (2 optimizer steps, saved as ``global_step2``) of a scheduler class
  and a ZeRO stage of its own;
- ``resume``: an engine that loads a folder's newest save (whole, without the optimizer's states, or without the
  scheduler's), takes 1 step and saves into the same folder (the next ``global_stepN``) or into a new one;
- ``rerun``: a fresh engine, of its own class and stage, saved into an existing folder (``global_step2`` and
  ``latest`` written over; a later save of the folder's earlier run stays beside it, and so does a states file of the
  earlier run's stage that this one does not write);
- ``copy``: the folder copied whole (``cp -r``);
- ``delete``: the folder's oldest save removed, where it has two or more.

Each engine runs in a mode: ``off`` (the patch removed), ``reset`` or ``warn``, under ZeRO stage 0, 1 or 2 and one
of the three warmup classes (``SCHEDULERS``), a resume as the save it loads. Each class warms up linearly from 0.0 to
the optimizer's lr 0.001 over 5 steps, so 0.19.8's step 0 is 0.0 for all three (read from 0.19.8's own classes on a
bare optimizer); step 0 is what the truth follows (a later step of WarmupCosineLR may differ on a release without
#8142, which the patch backports; the differential tier holds those).

The truth of a save is its run's step 0, as the optimizer's pre-hook saw it in the process that ran it: a fresh
engine's own first step, or (a resume) the step 0 of the save it loaded, as the audit reads a resume
(tests/test_proof.py does the same). A resume without the scheduler's state builds a fresh scheduler, but the
optimizer's states it loads restore the lr after the constructor set it, on every release: its first step runs at the
restored lr on 0.15.2 and 0.19.8 alike, and starts nothing.

The audit reads only the files in a folder: where a save's run started in a save that is not there (deleted, or in
another folder it resumed from), the documented assumption is that the earliest surviving save's process ran step 0
(docs/audit.md, "What each verdict assumes"), so there a table's ``affected`` for a run whose real start was fixed is
that assumption, not a break of the rule.

The rule, for every folder after every step: never ``not affected`` where a save's step 0 ran at another lr than
0.19.8's (0.0); never ``affected`` where every save's ran at 0.19.8's; ``not affected`` where every save descends from
a reset start and was written by an armed process (each a record bound to it); never ``unreadable``.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("off", "reset", "warn")
LOADS = ("whole", "no-optimizer", "no-scheduler")
REFERENCE_STEP0 = [0.0]  # 0.19.8's step 0 of each class below: warmup_min_lr, warmup_min_ratio times the lr
_WARMUP = {"warmup_num_steps": 5, "warmup_type": "linear"}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "WarmupLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, **_WARMUP},
    "WarmupDecayLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "total_num_steps": 20, **_WARMUP},
    "WarmupCosineLR": {"warmup_min_ratio": 0.0, "cos_min_ratio": 0.1, "total_num_steps": 20, **_WARMUP},
}
STAGES = (0, 1, 2)
# what a step written before classes and stages were searched runs (tests/histories_found.json's older examples)
DEFAULT_RUN = {"scheduler": "WarmupLR", "zero": 0}
Step = dict[str, Any]


# The generator -----------------------------------------------------------------------------------------------------

def history(rng: random.Random, length: int) -> list[Step]:
    """A random history of ``length`` steps over the folders it makes (step 0 always starts one)."""
    steps: list[Step] = [{"op": "start", "mode": rng.choice(MODES), **_run_kind(rng)}]
    folders = 1
    while len(steps) < length:
        op = rng.choice(("start", "resume", "resume", "rerun", "copy", "delete"))
        if op == "start":
            steps.append({"op": op, "mode": rng.choice(MODES), **_run_kind(rng)})
            folders += 1
        elif op == "resume":
            into_new = rng.random() < 0.3
            steps.append({"op": op, "run": rng.randrange(folders), "mode": rng.choice(MODES),
                          "load": rng.choice(LOADS), "into": "new" if into_new else "same"})
            folders += into_new
        elif op == "copy":
            steps.append({"op": op, "run": rng.randrange(folders)})
            folders += 1
        elif op == "rerun":
            steps.append({"op": op, "run": rng.randrange(folders), "mode": rng.choice(MODES), **_run_kind(rng)})
        else:
            steps.append({"op": op, "run": rng.randrange(folders)})
    return steps


def _run_kind(rng: random.Random) -> dict[str, Any]:
    """A fresh engine's scheduler class and ZeRO stage."""
    return {"scheduler": rng.choice(sorted(SCHEDULERS)), "zero": rng.choice(STAGES)}


# The truth, and the runs ---------------------------------------------------------------------------------------------

@dataclass
class Save:
    """What one tag folder holds, as the truth knows it: its run's step 0, and whether a reset start and an armed
    writer at each step stand behind it (then a bound record proves it)."""

    step0: list[float]
    proven: bool
    origin: int = 0  # the fresh start its run began with (each start a number of its own)
    fresh: bool = False  # written by that start itself (not a resume of it)
    scheduler: str = DEFAULT_RUN["scheduler"]  # what a resume of it builds
    zero: int = DEFAULT_RUN["zero"]


@dataclass
class World:
    """The folders a history made, each its saves by step count, under ``root``."""

    root: Path
    folders: list[dict[int, Save]] = field(default_factory=list)
    starts: int = 0  # fresh starts so far

    def path(self, index: int) -> Path:
        return self.root / f"run{index}"


Train = Callable[..., list[list[float]]]  # train(mode, save_dir, resume_from, load, steps, scheduler, zero) -> lrs


def play(step: Step, world: World, train: Train) -> None:
    """One step of a history, on real engines (``train``), and its truth in ``world``; a step that does not apply to
    the folders as they are (a delete of a folder with one save) changes nothing."""
    op = step["op"]
    if op == "start":
        world.folders.append({})
        _fresh(world, len(world.folders) - 1, step, train)
    elif op == "rerun":
        _fresh(world, step["run"] % len(world.folders), step, train)
    elif op == "resume":
        source = step["run"] % len(world.folders)
        if step["into"] == "new":
            world.folders.append({})
            target = len(world.folders) - 1
        else:
            target = source
        _resume(world, source, target, step, train)
    elif op == "copy":
        source = step["run"] % len(world.folders)
        shutil.copytree(world.path(source), world.path(len(world.folders)))
        world.folders.append(dict(world.folders[source]))
    elif op == "delete":
        index = step["run"] % len(world.folders)
        saves = world.folders[index]
        if len(saves) >= 2:
            oldest = min(saves)
            if f"global_step{oldest}" != (world.path(index) / "latest").read_text().strip():
                shutil.rmtree(world.path(index) / f"global_step{oldest}")
                del saves[oldest]


def _fresh(world: World, index: int, step: Step, train: Train) -> None:
    kind = {key: step.get(key, value) for key, value in DEFAULT_RUN.items()}
    lrs = train(mode=step["mode"], save_dir=world.path(index), resume_from=None, load=None, steps=2, **kind)
    world.starts += 1
    world.folders[index][2] = Save(lrs[0], proven=step["mode"] == "reset", origin=world.starts, fresh=True, **kind)


def _resume(world: World, source: int, target: int, step: Step, train: Train) -> None:
    saves = world.folders[source]
    newest = int((world.path(source) / "latest").read_text().strip().removeprefix("global_step"))
    loaded = saves[newest]
    train(mode=step["mode"], save_dir=world.path(target), resume_from=world.path(source), load=step["load"], steps=1,
          scheduler=loaded.scheduler, zero=loaded.zero)
    world.folders[target][newest + 1] = Save(loaded.step0, proven=loaded.proven and step["mode"] != "off",
                                             origin=loaded.origin, scheduler=loaded.scheduler, zero=loaded.zero)


# The rule --------------------------------------------------------------------------------------------------------

def broken(world: World, reports: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each way the audit's reports break the rule, by folder (an empty list: none)."""
    found = []
    for index, saves in enumerate(world.folders):
        if not saves:
            continue
        for report in reports.get(str(world.path(index)), []):
            verdict, why = report["verdict"], report["why"]
            hurt = [tag for tag, save in saves.items() if not _same(save.step0, REFERENCE_STEP0)]
            if verdict == "unreadable":
                found.append(f"run{index}: unreadable ({why})")
            elif hurt and verdict == "not affected":
                found.append(f"run{index}: not affected, but global_step{hurt[0]}'s step 0 ran at "
                             f"{saves[hurt[0]].step0} ({why})")
            elif not hurt and verdict == "affected" and _origins_here(saves):
                found.append(f"run{index}: affected, but every save's step 0 ran at {REFERENCE_STEP0} ({why})")
            elif all(save.proven for save in saves.values()) and verdict != "not affected":
                found.append(f"run{index}: {verdict}, but a bound record proves every save ({why})")
    return found


def _origins_here(saves: dict[int, Save]) -> bool:
    """Whether the start of every save's run is in the folder (its own save, as that start wrote it)."""
    here = {save.origin for save in saves.values() if save.fresh}
    return all(save.origin in here for save in saves.values())


def _same(ran: list[float], reference: list[float]) -> bool:
    return len(ran) == len(reference) and all(abs(a - b) <= 1e-12 for a, b in zip(ran, reference))


# Shrinking -----------------------------------------------------------------------------------------------------

def shrunk(steps: list[Step], fails: Callable[[list[Step]], bool]) -> list[Step]:
    """The fewest steps of a failing history that still fail: each step dropped in turn while the rest still
    fails (the first step, which starts a folder, stays)."""
    kept = list(steps)
    index = len(kept) - 1
    while index >= 1:
        trial = kept[:index] + kept[index + 1:]
        if fails(trial):
            kept = trial
        index -= 1
    return kept


def keep(found: Path, steps: list[Step], problems: list[str]) -> None:
    """A shrunk failing history kept as an example, replayed by every later run of the tests."""
    kept = json.loads(found.read_text()) if found.exists() else []
    kept.append({"steps": steps, "note": "the rule broke: " + "; ".join(problems)})
    found.write_text(json.dumps(kept, indent=1) + "\n")
