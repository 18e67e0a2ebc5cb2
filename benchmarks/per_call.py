"""Per-call cost of the patched ``DeepSpeedEngineWrapper.backward``, after the first step.

    python benchmarks/per_call.py [--rounds 15] [--number 200000]

The real accelerate class, patched by the real patch, around a trivial engine whose methods do
nothing, so the figure is the patch's own cost: wrapt's dispatch, and the check that this engine's
scheduler was seen before. Each round times ``wrapper.backward(0.0)``, the call accelerate makes,
with the patch removed and then applied again, in one process. Goal: at most 2 us per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit

os.environ["ACCELERATE_WARMUP_PATCH"] = "off"  # import first, patch explicitly below
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

import accelerate_warmup_patch


class Scheduler:
    """Seen by the patch on the first call, like a real scheduler: later calls only find it seen."""


class TrivialEngine:
    lr_scheduler = Scheduler()

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        pass

    def backward(self, loss: object, **kwargs: object) -> None:
        pass

    def step(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    del os.environ["ACCELERATE_WARMUP_PATCH"]
    wrapper = DeepSpeedEngineWrapper(TrivialEngine())

    def call() -> None:
        wrapper.backward(0.0)

    base, patched = [], []
    for _ in range(args.rounds):
        accelerate_warmup_patch.remove()
        base.append(timeit.timeit(call, number=args.number) / args.number)
        accelerate_warmup_patch.apply()
        call()  # the first call does the one-time work
        assert hasattr(type(wrapper).__dict__["backward"], "__wrapped__"), "backward is not patched"
        patched.append(timeit.timeit(call, number=args.number) / args.number)
    print(f"backward() unpatched: median {statistics.median(base) * 1e9:.0f} ns per call, {args.rounds} rounds")
    for name, values in (("patched, after the first call", patched),):
        overhead = [(v - b) * 1e9 for v, b in zip(values, base)]
        ratios = [v / b for v, b in zip(values, base)]
        print(f"  {name:40s} overhead median {statistics.median(overhead):+.0f} ns (min {min(overhead):+.0f}, "
              f"max {max(overhead):+.0f}); ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
