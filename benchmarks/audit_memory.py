"""Time and peak memory of ``audit`` on a toy checkpoint and on a 1 GiB one: the tensors are never read.

    python benchmarks/audit_memory.py [--gib 1] [--folder DIR] [--torch-load]

Writes two DeepSpeed-shaped checkpoints with torch (``torch.save`` of a model-states dict, as DeepSpeed's
checkpoint engine saves one; ``latest`` names the tag): a toy one (a 4x4 tensor) and one whose module holds a
float32 tensor of ``--gib`` GiB. Audits each in a fresh ``python -S`` (no site-packages: no torch) and prints
its wall time and peak RSS, taken from ``os.wait4`` of that child alone. ``--torch-load`` also measures
``torch.load(weights_only=False)`` of the big file, what DeepSpeed itself does when it resumes. The files are
written by a child of their own: Linux counts the memory a child's parent held when it started the child
into the child's peak (the exec'd-from memory), so this process stays small and never imports torch.
Measurements, not assertions (docs/audit.md keeps the figures).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_run(run: str, numel: int) -> None:
    import torch

    folder = Path(run)
    tag = folder / "global_step6"
    tag.mkdir(parents=True)
    (folder / "latest").write_text("global_step6")
    state = {
        "module": {"weight": torch.zeros(numel, dtype=torch.float32)},
        "optimizer": None, "param_shapes": [{"weight": torch.Size([numel])}],
        "lr_scheduler": {"last_batch_iteration": 5}, "global_steps": 6, "ds_version": "0.15.2",
        "ds_config": {"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 2},
                      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                                   "warmup_num_steps": 5}}},
    }
    torch.save(state, tag / "mp_rank_00_model_states.pt")


def measure(argv: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS in MiB and exit status of one child."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(ROOT)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    return time.perf_counter() - started, usage.ru_maxrss // 1024, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--folder", help="where to write the checkpoints (default: a temporary folder, removed)")
    parser.add_argument("--torch-load", action="store_true", help="also measure torch.load of the big file")
    args = parser.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="awp-audit-bench-"))
    try:
        write = "import sys; sys.path.insert(0, {!r}); import audit_memory; audit_memory.write_run({!r}, {})"
        here = str(Path(__file__).parent)
        toy, big = folder / "toy", folder / "big"
        for run, numel in ((toy, 16), (big, int(args.gib * 2**30) // 4)):
            subprocess.run([sys.executable, "-c", write.format(here, str(run), numel)], check=True)
        toy, big = (run / "global_step6" / "mp_rank_00_model_states.pt" for run in (toy, big))
        audit = [sys.executable, "-S", "-m", "accelerate_warmup_patch", "audit"]
        for name, file in (("toy", toy), ("big", big)):
            seconds, mib, code = measure([*audit, str(file.parent.parent)])
            print(f"audit {name:3s} ({file.stat().st_size / 2**20:9.1f} MiB file): {seconds:5.2f} s, "
                  f"peak RSS {mib} MiB, exit {code}")
        if args.torch_load:
            load = f"import torch; torch.load({str(big)!r}, weights_only=False)"
            seconds, mib, code = measure([sys.executable, "-c", load])
            print(f"torch.load big: {seconds:5.2f} s, peak RSS {mib} MiB, exit {code}")
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
