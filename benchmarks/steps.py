"""End-to-end optimizer steps of a tiny real DeepSpeed engine through accelerate, patched vs. unpatched.

    python benchmarks/steps.py [--pairs 5] [--steps 60]

Each run is a fresh interpreter (ACCELERATE_WARMUP_PATCH=off or reset), runs and pairs alternate,
and only the steady state is timed (steps after the 10th). Prints the ratio patched/unpatched.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CHILD = r"""
import os, sys, time, torch
sys.path.insert(0, {tests!r})
import harness
from harness import Spec
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler
harness.demo.set_up_single_process()
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=harness.ds_config(Spec())))
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
optimizer = DummyOptim(list(model.parameters()), lr=1e-3)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, DummyScheduler(optimizer))
for step in range({steps}):
    if step == 10:
        start = time.perf_counter()
    loss = model(torch.randn(2, 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step(); scheduler.step(); optimizer.zero_grad()
print("SECONDS", (time.perf_counter() - start) / ({steps} - 10))
harness.demo.tear_down()
"""


def _run(mode: str, steps: int) -> float:
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": mode}
    code = CHILD.format(tests=tests, steps=steps)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return float(next(x for x in out.splitlines() if x.startswith("SECONDS")).split()[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    ratios, base = [], []
    for _ in range(args.pairs):
        off, on = _run("off", args.steps), _run("reset", args.steps)
        base.append(off)
        ratios.append(on / off)
    print(f"steady-state step: unpatched median {statistics.median(base) * 1e3:.2f} ms; patched/unpatched ratio "
          f"median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}) over "
          f"{args.pairs} pairs")


if __name__ == "__main__":
    main()
