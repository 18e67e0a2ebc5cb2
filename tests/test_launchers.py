"""Real 2-rank CPU launches (gloo) armed by the environment alone, through each launcher: the README's launch
lines as written (tests/quickstart.py), ``train.py`` being tests/quickstart_train.py, with a port option added."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ports
import pytest
import quickstart
from conftest import HERE, installed
from ports import port

from accelerate_warmup_patch import releases

installed("deepspeed")  # real launches of real engines: without DeepSpeed the module skips

BIN = Path(sys.executable).parent
SCRIPT = str(HERE / "quickstart_train.py")  # the README's train.py: one rank of launched.py
LAUNCHED = str(HERE / "launched.py")


def _launch(command: list[str], port: int, out: Path,
            mode: str = "reset") -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": mode, "MASTER_PORT": str(port), "AWP_LAUNCH_OUT": str(out)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        env.pop(name, None)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=HERE)
    ranks = {path.stem: json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))}
    return proc, ranks


def _check(launched: tuple[subprocess.CompletedProcess[str], dict[str, object]]) -> None:
    proc, ranks = launched
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(ranks) == ["rank0", "rank1"], proc.stdout[-3000:]
    assert ranks["rank0"] == ranks["rank1"]
    assert ranks["rank0"] == [[0.0], [0.0], [0.0002], [0.0004]]  # the newest release's trajectory
    output = proc.stdout + proc.stderr
    info = [x for x in output.splitlines() if "[accelerate_warmup_patch] INFO" in x]
    fixed = releases.start_fact("WarmupLR", installed("deepspeed")).value is releases.Start.SETS_EVERY_GROUP
    assert len(info) == (0 if fixed else 1), output[-3000:]


def test_torchrun_two_cpu_ranks(tmp_path):
    line, at = quickstart.line("torchrun --nproc_per_node 2 train.py"), port(ports.LAUNCH_TORCHRUN)
    _check(_launch(quickstart.command(line, SCRIPT, at), at, tmp_path))


@pytest.mark.transformers  # accelerate's DeepSpeed road reads transformers' version (tests/tiers.py)
def test_accelerate_launch_two_cpu_ranks(tmp_path):
    line, at = quickstart.line("accelerate launch "), port(ports.LAUNCH_ACCELERATE)
    _check(_launch(quickstart.command(line, SCRIPT, at), at, tmp_path))


@pytest.mark.skipif(shutil.which("numactl") is None,
                    reason="DeepSpeed's launcher binds CPU ranks with numactl (Debian package numactl)")
def test_deepspeed_launcher_two_cpu_ranks(tmp_path):
    line, at = quickstart.line("deepspeed --num_gpus"), port(ports.LAUNCH_DEEPSPEED)
    _check(_launch(quickstart.command(line, SCRIPT, at), at, tmp_path))


@pytest.mark.transformers  # accelerate's DeepSpeed road reads transformers' version (tests/tiers.py)
def test_accelerate_launch_in_step_mode_uses_lr_k_at_step_k(tmp_path):
    at = port(ports.LAUNCH_ACCELERATE_STEP)
    proc, ranks = _launch([str(BIN / "accelerate"), "launch", "--use_deepspeed", "--zero_stage", "2",
                           "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                           "--dynamo_backend", "no", "--main_process_port", str(at), LAUNCHED, "--accelerate"],
                          at, tmp_path, mode="step")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert ranks["rank0"] == ranks["rank1"] == [[0.0], [0.0002], [0.0004], [0.0006]]
    info = [x for x in (proc.stdout + proc.stderr).splitlines() if "[accelerate_warmup_patch] INFO" in x]
    assert len([x for x in info if "mode=step" in x]) == 1, info  # rank 0 only
