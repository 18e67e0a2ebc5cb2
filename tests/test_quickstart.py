"""The README's launch lines, line by line: every one is run by a test, as written (a port option aside)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import ports
import pytest
import quickstart
from conftest import HERE, installed
from ports import port

from accelerate_warmup_patch import upstream

installed("deepspeed")  # the README's lines run real engines: without DeepSpeed the module skips

# the ds_config of the HF Trainer's DeepSpeed examples: every number "auto", filled from TrainingArguments
DS_CONFIG = {
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 0},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "torch_adam": True}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto", "warmup_type": "linear"}},
}
# who runs each launch line (tests/test_launchers.py builds its commands from these lines too)
RUN_BY = {
    "torchrun --nproc_per_node 2 train.py --deepspeed ds_config.json":
        "test_quickstart.py::test_the_trainer_line_starts_at_the_warmup_lr",
    "accelerate launch --use_deepspeed --num_processes 2 train.py":
        "test_launchers.py::test_accelerate_launch_two_cpu_ranks",
    "deepspeed --num_gpus 2 train.py": "test_launchers.py::test_deepspeed_launcher_two_cpu_ranks",
    "torchrun --nproc_per_node 2 train.py": "test_launchers.py::test_torchrun_two_cpu_ranks",
    "deepspeed --hostfile hostfile train.py": "test_multinode.py (two nodes over pdsh/ssh, launched.py, its own ports)",
    "srun --export=ALL,ACCELERATE_WARMUP_PATCH=reset python train.py":
        "test_real_launchers.py::test_in_a_job_submitted_with_export_none_only_an_explicit_export_reaches_the_ranks",
}


def test_every_launch_line_is_run_by_a_test():
    programs = ("python", "accelerate", "deepspeed", "torchrun", "srun")
    launch = [x for x in quickstart.lines() if x.split()[0] in programs]
    assert sorted(launch) == sorted(RUN_BY)
    for test in RUN_BY.values():
        if "::" in test:
            file, name = test.split("::")
            assert f"def {name}(" in (HERE / file).read_text(), test
    assert "`srun` under a real one-node Slurm" in " ".join(quickstart.README.read_text().split())


TRAINER = "torchrun --nproc_per_node 2 train.py --deepspeed ds_config.json"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    shutil.copy(HERE / "quickstart_train.py", tmp_path / "train.py")
    for helper in ("launched.py", "rank_end.py"):  # what train.py imports from beside it
        shutil.copy(HERE / helper, tmp_path / helper)
    (tmp_path / "ds_config.json").write_text(json.dumps(DS_CONFIG))
    return tmp_path


def _run(job: Path, line: str, mode: str, port: int) -> list[list[float]]:
    """Both ranks' lrs of optimizer steps 0-3 (they must agree)."""
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": mode, "AWP_LAUNCH_OUT": str(job)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    proc = subprocess.run(quickstart.command(line, "train.py", port), env=env, cwd=job, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((job / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]
    return list(ranks[0])


def test_the_trainer_line_starts_at_the_warmup_lr(job):
    assert quickstart.line("export ACCELERATE_WARMUP_PATCH=reset")
    assert _run(job, TRAINER, "reset", port(ports.QUICKSTART_RESET)) == [[0.0], [0.0], [0.0002], [0.0004]]


def test_the_off_line_leaves_the_release_as_it_is(job):
    mode = quickstart.line("export ACCELERATE_WARMUP_PATCH=off").split("=")[1]
    fixed = not upstream.lacks("start", "WarmupLR", installed("deepspeed"))
    first = 0.0 if fixed else 1e-3  # the Trainer fills warmup_max_lr and the optimizer's lr with learning_rate
    assert _run(job, TRAINER, mode, port(ports.QUICKSTART_MODE)) == [[first], [0.0], [0.0002], [0.0004]]


def test_the_doctor_line_reads_the_config(job):
    line = quickstart.line("accelerate-warmup-patch doctor --config")
    proc = subprocess.run(quickstart.command(line, "train.py"), cwd=job, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"DeepSpeed {installed('deepspeed')}, ds_config.json: ")
    assert "optimizer.params.lr: auto: the HF Trainer fills TrainingArguments.learning_rate" in proc.stdout
