"""One run history played on real engines of the installed DeepSpeed, the audit's rule checked after each step
(tests/test_audit_histories.py; tests/histories.py says what a history is): ``history.py STEPS_JSON ROOT``. Prints
``RESULT`` and the breaks of the rule found (an empty list: none). A child of its own, so that the engines' process
group and its port go with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness and the histories
# A ZeRO 1/2 resume on a release that loads the optimizer's partitions with torch.load's default (0.15.2: a
# LossScaler inside) fails on torch 2.6 and later, whose default is weights_only: its users set this, and so does
# the search (it changes how torch reads the files DeepSpeed loads, not what is in them or what the audit reads)
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
# isort: off
import harness  # first: its shims, and its demo module imported without arming the patch
import histories
import ports
import torch
import accelerate_warmup_patch
from accelerate_warmup_patch.cli.audit import audit
# isort: on


def train(*, mode: str, save_dir: Path, resume_from: Path | None, load: str | None, steps: int, scheduler: str,
          zero: int, model: str, tag: str | None, config: dict[str, Any] | str) -> list[list[float]]:
    """One real engine in ``mode`` of ``scheduler`` (a class of histories.SCHEDULERS) under ZeRO stage ``zero``, of
    ``model`` (histories.MODELS), given ``config`` (histories.config_of's dict, or a path to it): a fresh start or a
    resume of ``resume_from``'s newest save, ``steps`` optimizer steps, saved into ``save_dir`` under ``tag``
    (None: DeepSpeed's own global_stepN); each step's lrs, from the optimizer's pre-hook."""
    if mode == "off":
        accelerate_warmup_patch.remove()
    else:
        accelerate_warmup_patch.apply(mode)
    try:
        torch.manual_seed(0)
        module = torch.nn.Sequential(torch.nn.Linear(4, histories.MODELS[model]))
        given = config

        def initialize(**kwargs: Any) -> Any:
            import deepspeed  # its initialize looked up now: the patched one where the patch is applied

            # the engine is given the config as the run gives it (a path is DeepSpeed's to read); the harness's
            # loop reads its batch size from the dict
            return deepspeed.initialize(**{**kwargs, "config": given})

        def resume(engine: Any) -> None:
            engine.load_checkpoint(str(resume_from), load_optimizer_states=load != "no-optimizer",
                                   load_lr_scheduler_states=load != "no-scheduler",
                                   load_module_only=load == "module-only")

        rows: list[list[float]] = harness.demo.train_deepspeed(
            histories.config_of(scheduler, zero), module, list(module.parameters()), steps,
            before=resume if resume_from is not None else None,
            after=lambda engine: engine.save_checkpoint(str(save_dir), tag=tag), initialize=initialize)
        return rows
    finally:
        accelerate_warmup_patch.remove()


def job(*, modes: list[str], save_dir: Path, scheduler: str, zero: int, model: str = "a", tag: str | None = None,
        resume: dict[str, str] | None = None, release: str = "installed", driver: str = "engine",
        accumulate: int = 1, given: str = "dict", saves: int = 1) -> list[list[float]]:
    """A torchrun job of ``len(modes)`` ranks (tests/children/history_job.py), each rank in its mode of ``modes``, a
    fresh engine or a resume (``resume``: the folder and how it loads), saved into ``save_dir`` (``tag``: None for
    global_stepN), on the installed DeepSpeed or (``release`` "other") on histories.OTHER_DEEPSPEED's, through the
    engine, accelerate or the HF Trainer (``driver``; ``given``, ``saves``: how the Trainer is given its config and
    how often it saves, histories.GIVEN), ``accumulate`` micro-batches an optimizer step; each rank's lrs at its first
    optimizer step."""
    # each rank's lrs beside the run folder, not in it (a Trainer's save_dir is the run folder's checkpoint-N)
    run_folder = save_dir.parent if save_dir.name.startswith(histories.ROUND) else save_dir
    out = run_folder.with_name("-".join(save_dir.relative_to(run_folder.parent).parts) + ".ranks")
    shutil.rmtree(out, ignore_errors=True)  # a later job into the same folder
    out.mkdir()
    # the launcher's own rank variables, not this process's one-rank ones; the patch armed by each rank alone
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
           and not key.startswith("ACCELERATE_WARMUP_PATCH")}
    histories.in_release(release, env)
    run = json.dumps({"modes": modes, "scheduler": scheduler, "zero": zero, "model": model, "tag": tag,
                      "resume": resume, "driver": driver, "accumulate": accumulate, "given": given,
                      "saves": saves})
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(len(modes)),
                           "--master_port", str(ports.port(ports.HISTORY_JOB)),
                           str(Path(__file__).with_name("history_job.py")), str(save_dir), str(out), run],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the job of {len(modes)} ranks failed: {proc.stderr[-3000:]}")
    return [json.loads((out / f"rank{rank}.json").read_text())[0] for rank in range(len(modes))]


def convert(source: Path, universal: Path, release: str = "installed", may_fail: bool = False) -> bool:
    """DeepSpeed's ds_to_universal run on the save ``source`` into ``universal``, on the installed release or on
    histories.OTHER_DEEPSPEED's (``--inject_missing_state``: an engine's own save holds no universal_checkpoint_info,
    which Megatron-DeepSpeed's client adds); whether it converted it (``may_fail``: a failure is expected, else it
    raises)."""
    env = dict(os.environ)
    histories.in_release(release, env)
    proc = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(source),
                           "--output_folder", str(universal), "--inject_missing_state"],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 and not may_fail:
        raise RuntimeError(f"ds_to_universal failed: {proc.stderr[-3000:]}")
    return proc.returncode == 0


def problems(steps: list[histories.Step], root: Path) -> list[str]:
    """Each break of the rule, after each step of the history (played afresh under ``root``)."""
    world = histories.World(root)
    root.mkdir(parents=True)
    os.chdir(root)  # the runs' working folder: a relative config path is relative to it, for the job and the audit
    for number, step in enumerate(steps):
        histories.play(step, world, train, job, convert)
        paths = [str(world.path(index)) for index in range(len(world.folders)) if world.path(index).exists()]
        found, _ = audit(paths)
        by_folder: dict[str, list[dict[str, Any]]] = {}
        for report in found:
            by_folder.setdefault(report["path"], []).append(report)
        broken = histories.broken(world, by_folder)
        if broken:
            return [f"after step {number} ({json.dumps(step)}): {problem}" for problem in broken]
    return []


print("RESULT " + json.dumps(problems(json.loads(sys.argv[1]), Path(sys.argv[2]))), flush=True)
harness._tear_down()
