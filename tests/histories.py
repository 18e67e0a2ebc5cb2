"""Run histories for the audit's rule (#55 item 6): random sequences of real engine runs on CPU, the truth of every
save kept beside them, the rule checked after each step, and a failing history shrunk to the fewest steps that still
fail (tests/test_audit_histories.py runs them; docs/audit.md says what the search covers and what it cannot).

A history is a list of steps, plain data (JSON), each one of:

- ``start``: a new run folder, a fresh engine (2 optimizer steps) of a scheduler class, a ZeRO stage, a model and a
  way of naming its saves and of giving its config of its own (``_run_kind``);
- ``resume``: an engine that loads a folder's newest save (whole, without the optimizer's states, without the
  scheduler's, or the module alone: ``load_module_only``, a new run from those weights, its own step 0 and step
  count), takes 1 step and saves into the same folder (the next ``global_stepN``) or into a new one;
- ``rerun``: a fresh engine, of its own kind, saved into an existing folder (its tag and ``latest`` written over
  where the names meet; a later save of the folder's earlier run stays beside it, and so does a states file of the
  earlier run's stage that this one does not write). Of another model, or under custom tags, it is a second engine
  in that folder (a GAN's generator and critic: ``nn.Sequential`` both, alike names, other shapes);
- ``copy``: the folder copied whole (``cp -r``);
- ``delete``: the folder's oldest save removed, where it has two or more;
- ``move``: the folder's oldest save moved into a new folder, ``latest`` there naming it (an archive of an early
  save), where it has two or more;
- ``edit``: the config file of the folder's runs given one by path rewritten after they ran (for the next experiment):
  its scheduler block removed, or its warmup made flat at the peak. The checkpoint's files do not change, nor does
  the truth; a fact read outside them may make a verdict worse, never clear a run;
- ``job``: a fresh job of 1 to 3 ranks (up to AWP_HISTORY_RANKS in a long search; torchrun,
  tests/children/history_job.py), each rank armed in its own mode, through DeepSpeed's engine, accelerate's
  ``save_state`` (the tag ``pytorch_model``) or (a long search's, AWP_HISTORY_TRAINER) the HF Trainer itself (its
  ``checkpoint-N`` with its own files beside DeepSpeed's: trainer_state.json, the weights, each rank's rng state;
  with a warmup class, or with no scheduler block, so that the Trainer builds its own torch scheduler,
  ``TRAINERS_OWN``; given its config as GIVEN says: a dict, "auto" values, a file by path; saving after its last
  step or after each, ``saves``), into a new folder; a long search's job, and its resume, accumulates gradients
  over 1 or 2 micro-batches an optimizer step (``accumulate``: the config's ``gradient_accumulation_steps``, the
  Trainer's argument of that name);
- ``jobresume``: a job that resumes a folder's newest save (as many ranks as its ZeRO partitions, else the step's),
  each rank in its own mode (a mode changed within the run), through accelerate where the save is accelerate's, through
  the Trainer's ``resume_from_checkpoint`` where the Trainer wrote it (the whole save: the Trainer loads nothing less),
  or the folder's universal checkpoint into the step's ranks;
- ``convert``: DeepSpeed's ds_to_universal run on a folder's newest save (``<tag>_universal``, its own engine).

A job, a job's resume and a conversion run on the installed release or, where OTHER_DEEPSPEED names a folder of another
release's code (noxfile.py: 0.19.8's beside 0.15.2, 0.15.2's beside 0.19.8), on that one: a run can start on one
release and resume on the other (a long search's OTHER_DEEPSPEED may name two folders: three releases).

A run names its saves ``global_stepN`` (DeepSpeed's default) or by a custom tag (``epochN`` for model ``a``,
``criticN`` for ``b``), or (a long search's, AWP_HISTORY_TRAINER) saves them as the HF Trainer does: each into a
folder of its own, ``checkpoint-N/global_stepN`` with ``checkpoint-N/latest``, resumed from the highest
``checkpoint-N``, rotated (``delete``, ``move``) a ``checkpoint-N`` at a time, not converted; and gets its config as
a dict, as an absolute path to a JSON file, or as a path relative to the working folder (DeepSpeed's own examples'
``--deepspeed_config``).

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
another folder it resumed from), its ``affected`` assumes that the earliest surviving save's process ran step 0
unpatched (docs/audit.md, "What each verdict assumes": a reason to doubt, never a clearance), so there a table's
``affected`` for a run whose real start was fixed is that assumption, not a break of the rule; its ``not affected``
assumes nothing of the kind (docs/audit.md, "Which release ran step 0"). A module-only resume starts a run of its
own: its step 0 is its own first step.

The rule, for every report of every folder after every step (a report speaks for the folder's saves, for its
``global_stepN`` saves, or for one custom tag, as the audit names its engine; the audit weighs a custom tag's saves of
one model as one engine's, so those join it): never ``not affected`` where a save it speaks for ran step 0 at another
lr than 0.19.8's (0.0); never ``affected`` where every save it weighs ran step 0 at 0.19.8's; ``not affected`` where
every one of those descends from a reset start and was written by a reset process (each a record bound to it: a
``warn`` process applies none of the later backported changes, which a record without the scheduler's params cannot
rule out; and a ZeRO 0 save over an earlier ZeRO 1/2 one leaves that run's optimizer-states file beside it, which its
record does not bind, so the audit holds the record a claim); ``not affected`` where every one of those was written
by the HF Trainer with its own torch scheduler (TRAINERS_OWN: the bug cannot reach it, patched or not, and the saved
scheduler state shows it); never ``unreadable``. Nothing is excused: a save whose
folder cannot tell where its run's step 0 ran (an unpatched resume on another release, into a new folder) must not
read ``not affected`` either.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MODES = ("off", "reset", "warn")
LOADS = ("whole", "no-optimizer", "no-scheduler", "module-only")
MODELS = {"a": 4, "b": 8}  # nn.Sequential(nn.Linear(4, N)): alike parameter names, other shapes
CUSTOM_TAG = {"a": "epoch", "b": "critic"}  # a custom tag's prefix, by model: the step count follows
CONFIGS = ("dict", "absolute", "relative")
EDITS = ("no-scheduler", "flat")
REFERENCE_STEP0 = [0.0]  # 0.19.8's step 0 of each class below: warmup_min_lr, warmup_min_ratio times the lr
_WARMUP = {"warmup_num_steps": 5, "warmup_type": "linear"}
SCHEDULERS: dict[str, dict[str, Any]] = {
    "WarmupLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, **_WARMUP},
    "WarmupDecayLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "total_num_steps": 20, **_WARMUP},
    "WarmupCosineLR": {"warmup_min_ratio": 0.0, "cos_min_ratio": 0.1, "total_num_steps": 20, **_WARMUP},
}
# a Trainer job's own torch scheduler (its config has no scheduler block): linear warmup from 0.0 over 5 steps, so
# step 0 is 0.0 on every release, which the bug cannot reach
TRAINERS_OWN = "trainer's own"
STAGES = (0, 1, 2)
JOB_STAGES = (0, 2)  # a job's: its later ranks write no states file, or each its optimizer partition
# a job's ranks (one: a release change of a one-rank run); a long search may draw jobs of up to AWP_HISTORY_RANKS
# ranks (4 and more cost seconds a job on 2 cores, so CI's draws stay those of 3)
JOB_RANKS = (1, 2, 2, 3, *range(4, int(os.environ.get("AWP_HISTORY_RANKS", "3")) + 1))
# a long search may save some runs as the HF Trainer does (checkpoint-N/global_stepN) and run some jobs through the
# Trainer itself; CI's draws stay without them
TRAINER = os.environ.get("AWP_HISTORY_TRAINER", "") not in ("", "0")
# a job's: DeepSpeed's engine itself, accelerate's save_state, or (TRAINER) the HF Trainer, the commonest of the three
DRIVERS = ("engine", "accelerate", "trainer", "trainer") if TRAINER else ("engine", "engine", "accelerate")
ROUND = "checkpoint-"  # the Trainer's folder of one save: checkpoint-<its step count>
# a step's kinds, as often as drawn; a long search (TRAINER) draws jobs and their resumes twice as often, so that the
# Trainer's jobs, resumed by the Trainer, come up (CI's draws stay as they were)
OPS = ("start", "resume", "resume", "rerun", "copy", "delete", "move", "edit", "job", "jobresume", "convert",
       *(("job", "jobresume") if TRAINER else ()))
# what a step written before classes and stages were searched runs (tests/histories_found.json's older examples)
DEFAULT_RUN = {"scheduler": "WarmupLR", "zero": 0, "model": "a", "tags": "global", "config": "dict"}
Step = dict[str, Any]
# the micro-batches an optimizer step of a job may accumulate: a long search's (TRAINER) draw; CI's draw none (1)
ACCUMULATE = (1, 2) if TRAINER else ()
# how a Trainer's job is given its config: as a dict of the values its arguments hold, as one with "auto" for each
# value the Trainer fills in (its docs' way), or as a path to that (the commonest: ``--deepspeed ds_config.json``)
GIVEN = ("dict", "auto", "auto-path")


# The generator -----------------------------------------------------------------------------------------------------

def history(rng: random.Random, length: int, releases: tuple[str, ...] = ("installed",)) -> list[Step]:
    """A random history of ``length`` steps over the folders it makes (step 0 always starts one); a job or a job's
    resume runs on one of ``releases`` (``other``: another release's code, OTHER_DEEPSPEED)."""
    steps: list[Step] = [{"op": "start", "mode": rng.choice(MODES), **_run_kind(rng)}]
    folders = 1
    trainers: list[int] = []  # the folders a Trainer job made: a Trainer's resume is drawn among them (it needs one)
    while len(steps) < length:
        op = rng.choice(OPS)
        if op == "job":
            steps.append({"op": op, "modes": [rng.choice(MODES) for _ in range(rng.choice(JOB_RANKS))],
                          "scheduler": rng.choice(sorted(SCHEDULERS)), "zero": rng.choice(JOB_STAGES),
                          "release": rng.choice(releases), "driver": rng.choice(DRIVERS)})
            if steps[-1]["driver"] == "trainer":
                trainers.append(folders)
                if rng.random() < 0.3:
                    steps[-1]["scheduler"] = TRAINERS_OWN
            _accumulating(rng, steps[-1])
            _trainers_way(rng, steps[-1])
            folders += 1
        elif op == "jobresume":
            into_new = rng.random() < 0.3
            run = rng.randrange(folders)
            modes = [rng.choice(MODES) for _ in range(max(JOB_RANKS))]  # each rank's, as many as the save's ranks
            steps.append({"op": op, "run": run, "modes": modes,
                          "ranks": rng.choice(JOB_RANKS), "load": rng.choice((*LOADS, "universal")),
                          "into": "new" if into_new else "same", "release": rng.choice(releases),
                          "driver": rng.choice(DRIVERS)})
            if steps[-1]["driver"] == "trainer" and trainers:
                steps[-1]["run"] = rng.choice(trainers)
                trainers.extend([folders] if into_new else [])
            elif steps[-1]["driver"] == "trainer":  # nothing of the Trainer's to resume yet: a Trainer job instead
                steps[-1] = {"op": "job", "modes": modes[:steps[-1]["ranks"]], "scheduler": rng.choice(
                    sorted(SCHEDULERS)), "zero": rng.choice(JOB_STAGES), "release": steps[-1]["release"],
                             "driver": "trainer"}
                trainers.append(folders)
                into_new = True
            _accumulating(rng, steps[-1])
            _trainers_way(rng, steps[-1])
            folders += into_new
        elif op == "start":
            steps.append({"op": op, "mode": rng.choice(MODES), **_run_kind(rng)})
            folders += 1
        elif op == "resume":
            into_new = rng.random() < 0.3
            steps.append({"op": op, "run": rng.randrange(folders), "mode": rng.choice(MODES),
                          "load": rng.choice(LOADS), "into": "new" if into_new else "same"})
            folders += into_new
        elif op in ("copy", "move"):
            steps.append({"op": op, "run": rng.randrange(folders)})
            folders += 1
        elif op == "rerun":
            steps.append({"op": op, "run": rng.randrange(folders), "mode": rng.choice(MODES), **_run_kind(rng)})
        elif op == "edit":
            steps.append({"op": op, "run": rng.randrange(folders), "how": rng.choice(EDITS)})
        elif op == "convert":
            steps.append({"op": op, "run": rng.randrange(folders), "release": rng.choice(releases)})
        else:
            steps.append({"op": op, "run": rng.randrange(folders)})
    return steps


def _accumulating(rng: random.Random, step: Step) -> None:
    """A long search's job or job's resume accumulates gradients over ACCUMULATE's micro-batches (drawn after the
    rest of the step, and none in CI's draws, which stay what they were)."""
    if ACCUMULATE:
        step["accumulate"] = rng.choice(ACCUMULATE)


def _trainers_way(rng: random.Random, step: Step) -> None:
    """How a Trainer's job or resume is given its config (``given``, GIVEN: the values its arguments hold, ``"auto"``
    for each value the Trainer fills in, the same as a file it is given by path), and how often a fresh Trainer job
    saves (``saves``: once at its end, or at each of its 2 steps, ``save_steps=1``): drawn after the rest of the step,
    and only for the Trainer (a long search's), so that every other draw stays what it was."""
    if step["driver"] != "trainer":
        return
    step["given"] = rng.choice(GIVEN)
    if step["op"] == "job":
        step["saves"] = rng.choice((1, 2))


OTHER_DEEPSPEED = "AWP_HISTORY_OTHER_DEEPSPEED"  # folders each holding another release's ``deepspeed`` (os.pathsep)


def _other_folders() -> list[Path]:
    return [Path(folder) for folder in os.environ.get(OTHER_DEEPSPEED, "").split(os.pathsep) if folder]


def releases_here() -> tuple[str, ...]:
    """The releases a history may run its jobs on here: the installed one, and another where a folder of its code is
    given (OTHER_DEEPSPEED: noxfile.py's reference-deepspeed beside 0.15.2, other-deepspeed beside 0.19.8); a long
    search may give two folders, a run on three releases (``other``, ``other2``)."""
    return ("installed", *("other" if index == 0 else f"other{index + 1}" for index in range(len(_other_folders()))))


def in_release(release: str, env: dict[str, str]) -> None:
    """``env`` made to run ``release`` ("other": OTHER_DEEPSPEED's first folder's code first on the path of this very
    Python, "other2" its second's; its CPU ops compiled into a folder of its own: two releases' ops in one folder
    rebuild each other)."""
    if release == "installed":
        return
    folder = _other_folders()[int(release[len("other"):] or "1") - 1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH", "")]))
    env["TORCH_EXTENSIONS_DIR"] = str(folder.with_name(f"{folder.name}-torch_extensions"))


def _run_kind(rng: random.Random) -> dict[str, Any]:
    """A fresh engine's scheduler class, ZeRO stage, model, tags and config (mostly the default model, tags and
    config: the others are the edges; the Trainer's layout only where TRAINER, from the same draw, so that CI's
    histories stay as they were)."""
    scheduler, zero, model, layout = (rng.choice(sorted(SCHEDULERS)), rng.choice(STAGES),
                                      "b" if rng.random() < 0.25 else "a", rng.random())
    tags = "custom" if layout < 0.4 else "trainer" if TRAINER and layout >= 0.75 else "global"
    return {"scheduler": scheduler, "zero": zero, "model": model, "tags": tags, "config": rng.choice(CONFIGS)}


# The truth, and the runs ---------------------------------------------------------------------------------------------

@dataclass
class Save:
    """What one tag folder holds, as the truth knows it: its run's step 0, and whether a reset start and a reset
    writer at each step stand behind it (then a bound record proves it), with what a resume or a rerun of it needs."""

    step0: list[float]
    proven: bool
    origin: int = 0  # the fresh start its run began with (each start a number of its own)
    fresh: bool = False  # written by that start itself (not a resume of it)
    scheduler: str = DEFAULT_RUN["scheduler"]  # what a resume of it builds
    zero: int = DEFAULT_RUN["zero"]
    model: str = DEFAULT_RUN["model"]
    tags: str = DEFAULT_RUN["tags"]
    config: str = DEFAULT_RUN["config"]
    steps: int = 2  # optimizer steps its engine had taken (its tag's number)
    config_file: Path | None = None  # the file its engine was given by path, if any
    optim_files: int = 0  # the ZeRO optimizer-states files its tag folder holds (a rank's each: its own, or earlier)
    ranks: int = 1  # the ranks of the job that wrote it
    release: str = "installed"  # the release that wrote it ("other": OTHER_DEEPSPEED's)
    step0_release: str = "installed"  # the release its run's step 0 ran on
    recorded: bool = True  # its writer (rank 0) was armed: it wrote a record, which carries the run's step 0 on
    source: Save | None = None  # a universal checkpoint's: the save ds_to_universal converted (no record of its own)
    trainer: bool = False  # written by the HF Trainer itself (its trainer_state.json beside it: a Trainer resumes it)

    @property
    def partitions(self) -> int:
        """The ZeRO optimizer-states files its own job wrote into its tag: one a rank, none under ZeRO 0."""
        return self.ranks if self.zero > 0 else 0

    @property
    def beside_others(self) -> bool:
        """Whether its tag holds optimizer-states files of an earlier run beside its own (which its record does not
        bind, and which ds_to_universal fails on)."""
        return self.optim_files > self.partitions


@dataclass
class World:
    """The folders a history made, each its saves by tag name, under ``root`` (the runs' working folder: a relative
    config path is relative to it)."""

    root: Path
    folders: list[dict[str, Save]] = field(default_factory=list)
    starts: int = 0  # fresh starts so far
    configs: int = 0  # config files written so far

    def path(self, index: int) -> Path:
        return self.root / f"run{index}"


# train(mode, save_dir, resume_from, load, steps, scheduler, zero, model, tag, config) -> each step's lrs
Train = Callable[..., list[list[float]]]
# job(modes, save_dir, scheduler, zero, model, tag, resume, release) -> each rank's lrs at its first step
Job = Callable[..., list[list[float]]]
# convert(source_tag_folder, universal_folder, release, may_fail) -> whether ds_to_universal converted the save
Convert = Callable[..., bool]


def play(step: Step, world: World, train: Train, job: Job, convert: Convert) -> None:
    """One step of a history, on real engines (``train``; ``job``: a job of one or more ranks launched by torchrun;
    ``convert``: DeepSpeed's ds_to_universal), and its truth in ``world``; a step that does not apply to the folders
    as they are (a delete of a folder with one save) changes nothing."""
    op = step["op"]
    if op == "job":
        world.folders.append({})
        _job(world, len(world.folders) - 1, step, job)
    elif op == "jobresume":
        _job_resume(world, step["run"] % len(world.folders), step, job)
    elif op == "start":
        world.folders.append({})
        _fresh(world, len(world.folders) - 1, step, train)
    elif op == "rerun":
        _fresh(world, step["run"] % len(world.folders), step, train)
    elif op == "resume":
        _resume(world, step["run"] % len(world.folders), step, train)
    elif op == "copy":
        source = step["run"] % len(world.folders)
        shutil.copytree(world.path(source), world.path(len(world.folders)))
        world.folders.append(dict(world.folders[source]))
    elif op == "delete":
        _delete_oldest(world, step["run"] % len(world.folders))
    elif op == "move":
        _move_oldest(world, step["run"] % len(world.folders))
    elif op == "edit":
        _edit_configs(world, step["run"] % len(world.folders), step["how"])
    elif op == "convert":
        _convert(world, step["run"] % len(world.folders), step, convert)


def tag_name(save: Save) -> str:
    """The tag a save of ``save.steps`` steps is written under (DeepSpeed's default, or the run's custom one)."""
    if save.tags == "accelerate":
        return "pytorch_model"  # accelerate's save_state: one tag, saved over
    if save.tags == "trainer":
        return f"{ROUND}{save.steps}/global_step{save.steps}"  # the Trainer's: the run's folder holds checkpoint-N
    return f"global_step{save.steps}" if save.tags == "global" else f"{CUSTOM_TAG[save.model]}{save.steps}"


def own_tag(save: Save) -> str | None:
    """The tag its engine is given: None for DeepSpeed's own global_stepN (the Trainer's too), else tag_name's."""
    return None if save.tags in ("global", "trainer") else tag_name(save)


def save_dir(world: World, index: int, save: Save) -> Path:
    """The folder an engine saves ``save`` into: the run's, or (the Trainer's) its checkpoint-N in it."""
    if save.tags == "trainer":
        return world.path(index) / f"{ROUND}{save.steps}"
    return world.path(index)


def _fresh(world: World, index: int, step: Step, train: Train) -> None:
    kind = {key: step.get(key, value) for key, value in DEFAULT_RUN.items()}
    save = Save([], proven=step["mode"] == "reset", origin=world.starts + 1, fresh=True,
                recorded=step["mode"] != "off", **kind)
    save.step0 = _train(world, save, train, mode=step["mode"], save_dir=save_dir(world, index, save),
                        resume_from=None, load=None)[0]
    world.starts += 1
    _place(world, index, save)


def _job(world: World, index: int, step: Step, job: Job) -> None:
    """A fresh job, each rank armed in its own mode: its save's step 0 is a rank's that ran it at another lr than
    0.19.8's, if any; proven where every rank ran reset."""
    release = step.get("release", "installed")
    driver = step.get("driver", "engine")
    save = Save([], proven=all(mode == "reset" for mode in step["modes"]), origin=world.starts + 1, fresh=True,
                scheduler=step["scheduler"], zero=step["zero"], ranks=len(step["modes"]), release=release,
                step0_release=release, recorded=step["modes"][0] != "off", trainer=driver == "trainer",
                tags={"accelerate": "accelerate", "trainer": "trainer"}.get(driver, "global"))
    firsts = job(modes=step["modes"], save_dir=save_dir(world, index, save), scheduler=step["scheduler"],
                 zero=step["zero"], release=release, driver=driver, accumulate=step.get("accumulate", 1),
                 **_trainer_only(step))
    save.step0 = next((lrs for lrs in firsts if not _same(lrs, REFERENCE_STEP0)), firsts[0])
    world.starts += 1
    if step.get("saves", 1) == 2:  # the Trainer's save after its first step too: checkpoint-1 beside checkpoint-2
        _place(world, index, dataclasses.replace(save, steps=1))
    _place(world, index, save)


def _trainer_only(step: Step) -> dict[str, Any]:
    """What a job of the Trainer is given beyond any job's (``given``, ``saves``: _trainers_way), where drawn."""
    return {key: step[key] for key in ("given", "saves") if key in step}


def _job_resume(world: World, source: int, step: Step, job: Job) -> None:
    """A job that loads the folder's newest save, each rank armed in its own mode (a mode changed within the run),
    of the save's own ranks where it holds ZeRO partitions (DeepSpeed loads them into as many), else of the step's,
    on the step's release; it takes one step and saves into the same folder or a new one. A ``universal`` load
    reads the universal checkpoint ``latest_universal`` names (``checkpoint.load_universal``) into any number of
    ranks, where the folder has one (else the newest save, whole)."""
    if step.get("driver") == "trainer":
        source = _trainer_written(world, source)
    loaded, load = _universal_named(world, source), step["load"]
    if load != "universal" or loaded is None:
        loaded, load = world.folders[source][newest(world, source)], ("whole" if load == "universal" else load)
    driver = _resume_driver(step.get("driver", "engine"), loaded, load)
    if driver == "trainer":
        load = "whole"  # the Trainer's resume_from_checkpoint loads the whole save
    if load == "module-only" and loaded.zero == 0:
        return  # as _resume's
    ranks = loaded.ranks if loaded.zero > 0 and load != "universal" else step["ranks"]
    modes = step["modes"][:ranks]
    proven = _proven(loaded, world.folders[source])
    target = _target(world, source, step)
    release = step.get("release", "installed")
    tags = loaded.source.tags if loaded.source is not None else loaded.tags
    fresh = load == "module-only"  # a new run from the loaded weights: its ranks' own step 0, 1 step
    if fresh:
        world.starts += 1
    save = Save(loaded.step0, proven=(proven or fresh) and all(mode == "reset" for mode in modes),
                origin=world.starts if fresh else loaded.origin, fresh=fresh, scheduler=loaded.scheduler,
                zero=loaded.zero, model=loaded.model, tags=tags, steps=1 if fresh else loaded.steps + 1, ranks=ranks,
                release=release, step0_release=release if fresh else loaded.step0_release, recorded=modes[0] != "off",
                trainer=driver == "trainer")
    firsts = job(modes=modes, save_dir=save_dir(world, target, save), scheduler=loaded.scheduler, zero=loaded.zero,
                 model=loaded.model, tag=own_tag(save), resume={"from": str(load_dir(world, source)), "load": load},
                 release=release, driver=driver, accumulate=step.get("accumulate", 1), **_trainer_only(step))
    if fresh:
        save.step0 = next((lrs for lrs in firsts if not _same(lrs, REFERENCE_STEP0)), firsts[0])
    _place(world, target, save)


def _trainer_written(world: World, source: int) -> int:
    """The folder a Trainer's resume loads: ``source`` where its newest save is one the Trainer wrote, else the last
    folder whose newest save is (the drawn folder is a hint: the generator cannot tell which folders the steps that
    did not apply left out); else ``source`` (then the engine resumes it)."""
    written = [index for index, saves in enumerate(world.folders) if saves and saves[newest(world, index)].trainer]
    return source if source in written or not written else written[-1]


def _resume_driver(drawn: str, loaded: Save, load: str) -> str:
    """What resumes ``loaded`` for a job drawn with ``drawn``: accelerate's load_state reads the tag pytorch_model (a
    save of accelerate's own; the module alone: the engine's load_checkpoint, which load_state does not offer); the
    Trainer's resume_from_checkpoint a checkpoint-N it wrote itself (its trainer_state.json counts the steps), not a
    universal checkpoint; else the engine's load_checkpoint."""
    if drawn == "trainer":
        return "trainer" if loaded.trainer and load != "universal" else "engine"
    return drawn if loaded.tags == "accelerate" and load != "module-only" else "engine"


def newest(world: World, index: int) -> str:
    """The save a resume loads: the tag the folder's ``latest`` names; where it has none (a Trainer's output), the
    highest ``checkpoint-N``'s, as ``checkpoint-N/<tag>``."""
    folder = world.path(index)
    if (folder / "latest").exists():
        return (folder / "latest").read_text().strip()
    rounds = [int(tag[len(ROUND):].split("/")[0]) for tag in world.folders[index] if tag.startswith(ROUND)]
    highest = f"{ROUND}{max(rounds)}"
    return f"{highest}/{(folder / highest / 'latest').read_text().strip()}"


def load_dir(world: World, index: int) -> Path:
    """The folder a resume of ``index`` hands the engine's load_checkpoint (which reads ``latest`` in it): the run's,
    or the checkpoint-N of its newest save."""
    return world.path(index) / os.path.dirname(newest(world, index))


def _target(world: World, source: int, step: Step) -> int:
    """The folder a resume of ``source`` saves into: the same one, or a new one (``into``)."""
    if step["into"] != "new":
        return source
    world.folders.append({})
    return len(world.folders) - 1


def _universal_named(world: World, index: int) -> Save | None:
    """The universal checkpoint the folder's ``latest_universal`` names, where it holds one (its conversion ran)."""
    named = world.path(index) / "latest_universal"
    return world.folders[index].get(named.read_text().strip()) if named.exists() else None


def _resume(world: World, source: int, step: Step, train: Train) -> None:
    loaded = world.folders[source][newest(world, source)]
    if loaded.ranks > 1 and loaded.zero > 0:
        return  # one rank cannot load several ranks' ZeRO partitions (a jobresume of as many ranks does)
    if step["load"] == "module-only" and loaded.zero == 0:
        return  # 0.15.2's load_module_only calls refresh_fp32_params, which a torch optimizer lacks (ZeRO 0)
    target = _target(world, source, step)
    if step["load"] == "module-only":  # a new run from the loaded weights: its own step 0, 1 step (global_step1)
        world.starts += 1
        save = Save([], proven=step["mode"] == "reset", origin=world.starts, fresh=True, scheduler=loaded.scheduler,
                    zero=loaded.zero, model=loaded.model, tags=loaded.tags, config=loaded.config, steps=1,
                    recorded=step["mode"] != "off")
    else:
        save = Save(loaded.step0, proven=loaded.proven and step["mode"] == "reset", origin=loaded.origin,
                    scheduler=loaded.scheduler, zero=loaded.zero, model=loaded.model, tags=loaded.tags,
                    config=loaded.config, steps=loaded.steps + 1, step0_release=loaded.step0_release,
                    recorded=step["mode"] != "off")
    rows = _train(world, save, train, mode=step["mode"], save_dir=save_dir(world, target, save),
                  resume_from=load_dir(world, source), load=step["load"], steps=1)
    if step["load"] == "module-only":
        save.step0 = rows[0]
    _place(world, target, save)


def _place(world: World, index: int, save: Save) -> None:
    """``save`` written into folder ``index``, over a tag of the same name where there is one: an earlier ZeRO 1/2
    run's optimizer-states files that this one does not write over (all of them under ZeRO 0; rank 1's where one
    rank saves over a two-rank job's) stay beside it, which its record does not bind (the audit keeps the record as
    a claim: it proves nothing, and nor does a record of a later resume of it)."""
    tag = tag_name(save)
    earlier = world.folders[index].get(tag)
    save.optim_files = max(save.partitions, earlier.optim_files if earlier is not None else 0)
    if save.beside_others:
        save.proven = False
    world.folders[index][tag] = save


def _train(world: World, save: Save, train: Train, **run: Any) -> list[list[float]]:
    """``save``'s engine trained (a fresh start: 2 steps; a resume: 1), its config given as its kind says (a file of
    its own where by path); its lrs."""
    config = config_of(save.scheduler, save.zero)
    given: dict[str, Any] | str = config
    if save.config != "dict":
        world.configs += 1
        relative = Path("configs") / f"c{world.configs}.json"
        save.config_file = world.root / relative
        save.config_file.parent.mkdir(exist_ok=True)
        save.config_file.write_text(json.dumps(config))
        given = str(save.config_file if save.config == "absolute" else relative)
    steps = run.pop("steps", 2 if save.fresh else 1)
    return train(steps=steps, scheduler=save.scheduler, zero=save.zero, model=save.model, tag=own_tag(save),
                 config=given, **run)


def config_of(scheduler: str, zero: int) -> dict[str, Any]:
    """A run's ds_config: Adam at 0.001, ``scheduler`` (a class of ``SCHEDULERS``; TRAINERS_OWN: no scheduler block)
    under ZeRO stage ``zero``."""
    config = {"train_micro_batch_size_per_gpu": 2, "steps_per_print": 10_000,
              "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": zero}}
    if scheduler in SCHEDULERS:
        config["scheduler"] = {"type": scheduler, "params": dict(SCHEDULERS[scheduler])}
    return config


def _convert(world: World, index: int, step: Step, convert: Convert) -> None:
    """The folder's newest save converted by ds_to_universal into ``<tag>_universal`` beside it (``latest_universal``
    naming it), where it holds ZeRO 1/2 partitions and its config (ds_to_universal reads both); the copy holds that
    save's model states and no record: proven where that save, itself proven, is still beside it (docs/audit.md,
    "Converted saves")."""
    saves = world.folders[index]
    tag = newest(world, index)
    source = saves[tag]
    if source.zero == 0 or source.config != "dict" or source.tags == "trainer":
        return  # ds_to_universal reads ZeRO partitions, and refuses a ds_config that the engine was given by path
    universal = f"{tag}_universal"
    shutil.rmtree(world.path(index) / universal, ignore_errors=True)  # converted again: the old copy goes
    saves.pop(universal, None)
    # ds_to_universal merges every partition in the tag: another run's left beside this one's (a rerun of fewer
    # ranks over it) makes it fail, its partial output left in place (no model states, no latest_universal)
    if not convert(world.path(index) / tag, world.path(index) / universal, release=step.get("release", "installed"),
                   may_fail=source.beside_others):
        return
    saves[universal] = dataclasses.replace(source, fresh=False, tags="universal", optim_files=0, recorded=False,
                                           source=source)


def _oldest(world: World, index: int) -> str | None:
    """The folder's oldest save (fewest steps), where it has two or more and ``latest`` does not name it."""
    saves = world.folders[index]
    if len(saves) < 2:
        return None
    oldest = min(saves, key=lambda tag: (saves[tag].steps, tag))
    return oldest if oldest != newest(world, index) else None


def _delete_oldest(world: World, index: int) -> None:
    """The folder's oldest save removed (the Trainer's ``save_total_limit``: its whole checkpoint-N)."""
    oldest = _oldest(world, index)
    if oldest is not None:
        shutil.rmtree(world.path(index) / oldest.split("/")[0])
        del world.folders[index][oldest]


def _move_oldest(world: World, index: int) -> None:
    """The folder's oldest save moved into a new folder, ``latest`` there naming it; not a universal checkpoint (a
    resume of the new folder would load it as a save of its own kind)."""
    oldest = _oldest(world, index)
    if oldest is None or world.folders[index][oldest].source is not None:
        return
    target = world.path(len(world.folders))
    target.mkdir()
    moved = oldest.split("/")[0]  # a Trainer's save: its checkpoint-N, ``latest`` in it
    shutil.move(str(world.path(index) / moved), str(target / moved))
    if moved == oldest:
        (target / "latest").write_text(oldest)
    world.folders.append({oldest: world.folders[index].pop(oldest)})


def _edit_configs(world: World, index: int, how: str) -> None:
    """The config files of the folder's runs rewritten after they ran: the scheduler block removed, or the warmup
    made flat at the peak (its start lr is then the optimizer's). What ran does not change."""
    for save in world.folders[index].values():
        if save.config_file is None:
            continue
        config = config_of(save.scheduler, save.zero)
        if how == "no-scheduler":
            del config["scheduler"]
        else:
            params = config["scheduler"]["params"]
            params.update({key: 1e-3 if key.endswith("_lr") else 1.0
                           for key in ("warmup_min_lr", "warmup_min_ratio") if key in params})
        save.config_file.write_text(json.dumps(config))


# The rule --------------------------------------------------------------------------------------------------------

def broken(world: World, reports: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each way the audit's reports break the rule, by folder and engine (an empty list: none)."""
    found = []
    for index, saves in enumerate(world.folders):
        for report in reports.get(str(world.path(index)), []):
            own = _reported(saves, report.get("engine"))
            if own:
                found.extend(f"run{index}{_named(report)}: {problem}" for problem in _judged(saves, own, report))
    return found


def _reported(saves: dict[str, Save], engine: str | None) -> dict[str, Save]:
    """The saves a report speaks for: all of the folder's, the one tag it names (a custom tag, a universal
    checkpoint), or its global_stepN tags (the audit's ``global_step*``)."""
    if engine is None:
        return saves
    if engine in saves:
        return {engine: saves[engine]}
    if engine.startswith("global_step"):
        return {tag: save for tag, save in saves.items() if save.tags in ("global", "trainer")}
    return {tag: save for tag, save in saves.items() if tag == engine}


def _judged(saves: dict[str, Save], own: dict[str, Save], report: dict[str, Any]) -> list[str]:
    """How one report breaks the rule. ``own``: the saves it speaks for; with them, the folder's saves of the same
    model (the audit weighs a custom tag's earlier and later saves of one model as one engine's, whatever their
    names), which may make it worse, or prove it only where all are proven."""
    verdict, why = report["verdict"], report["why"]
    models = {save.model for save in own.values()}
    kin = {tag: save for tag, save in saves.items() if tag in own or save.model in models}
    hurt = [tag for tag, save in own.items() if not _same(save.step0, REFERENCE_STEP0)]
    if verdict == "unreadable":
        return [f"unreadable ({why})"]
    if hurt and verdict == "not affected":
        return [f"not affected, but {hurt[0]}'s step 0 ran at {own[hurt[0]].step0} ({why})"]
    if verdict == "affected" and all(_same(save.step0, REFERENCE_STEP0) for save in kin.values()) \
            and _origins_here(own, kin):
        return [f"affected, but every save's step 0 ran at {REFERENCE_STEP0} ({why})"]
    if all(_proven(save, saves) for save in kin.values()) and verdict != "not affected":
        return [f"{verdict}, but a bound record proves every save ({why})"]
    if all(save.trainer and save.scheduler == TRAINERS_OWN for save in kin.values()) and verdict != "not affected":
        return [f"{verdict}, but every save is the Trainer's, of its own torch scheduler, which the bug cannot reach, "
                f"patched or not ({why})"]
    return []


def _proven(save: Save, saves: dict[str, Save]) -> bool:
    """Whether a bound record proves ``save``: its own, or (a universal checkpoint) that of the very save it was
    converted from, still in the folder."""
    if save.source is None:
        return save.proven
    return any(other is save.source for other in saves.values()) and save.source.proven


def _named(report: dict[str, Any]) -> str:
    return f" ({report['engine']})" if report.get("engine") else ""


def _origins_here(own: dict[str, Save], kin: dict[str, Save]) -> bool:
    """Whether the start of every one of ``own``'s runs is in the folder (its own save, as that start wrote it)."""
    here = {save.origin for save in kin.values() if save.fresh}
    return all(save.origin in here for save in own.values())


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
