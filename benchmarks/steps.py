"""Steady-state optimizer steps of a tiny real DeepSpeed engine through accelerate, patched vs. unpatched.

    python benchmarks/steps.py [--rounds 100] [--steps 200]

(``benchmarks/calls.py`` prints this ratio too, beside its count of calls per step.)

One process, one engine (CPU, gloo, one rank): after 20 warm-up steps, rounds of ``--steps`` steps
alternate between the patch removed and applied (ABBA order, so drift favours neither), and each
round's time per step is compared with its neighbour's. Timing whole processes instead would
measure process-to-process noise (±20% here for a 1 ms step), not the patch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

os.environ["ACCELERATE_WARMUP_PATCH"] = "off"  # built unpatched; rounds apply and remove the patch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import harness
import torch
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler
from harness import Spec

import accelerate_warmup_patch


def _engine() -> Callable[[], None]:
    return accelerate_step(harness.ds_config(Spec()))


def accelerate_step(config: dict[str, object]) -> Callable[[], None]:
    """One training step through a real Accelerator and DeepSpeed engine built from ``config`` (calls.py too)."""
    from accelerate.state import AcceleratorState, GradientState

    harness.demo.set_up_single_process()
    AcceleratorState._reset_state(True)  # one Accelerator per engine, several engines per process
    GradientState._reset_state()
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    optimizer = DummyOptim(list(model.parameters()), lr=1e-3)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, DummyScheduler(optimizer))
    batch = torch.randn(2, 4)

    def step() -> None:
        accelerator.backward(model(batch).pow(2).mean())
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    return step


def _per_step(step: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def measure(rounds: int, steps: int) -> str:
    """The ratio of patched to unpatched time per step (reset mode), as one line; the patch is removed after."""
    accelerate_warmup_patch.remove()
    step = _engine()
    for _ in range(20):
        step()
    unpatched, patched = [], []
    for round_ in range(rounds):
        for patch_on in ((False, True) if round_ % 2 == 0 else (True, False)):
            if patch_on:
                accelerate_warmup_patch.apply()
                step()  # its first call since apply(): the once-per-wrapper work, not steady state
                patched.append(_per_step(step, steps))
            else:
                accelerate_warmup_patch.remove()
                unpatched.append(_per_step(step, steps))
    accelerate_warmup_patch.remove()
    ratios = [p / u for p, u in zip(patched, unpatched)]
    q = statistics.quantiles(ratios, n=4)
    return (f"steady-state step: unpatched median {statistics.median(unpatched) * 1e3:.3f} ms, patched "
            f"{statistics.median(patched) * 1e3:.3f} ms; ratio median {statistics.median(ratios):.3f} "
            f"(IQR {q[0]:.3f}-{q[2]:.3f}), {rounds} rounds of {steps} steps")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    del os.environ["ACCELERATE_WARMUP_PATCH"]
    print(measure(args.rounds, args.steps))
    harness.demo.tear_down()


if __name__ == "__main__":
    main()
