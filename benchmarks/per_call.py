"""Per-call cost of the wrapped ``DeepSpeedEngineWrapper.backward``, after the first step.

    python benchmarks/per_call.py

The real accelerate class, wrapped by the real patch, around a trivial engine whose methods do
nothing, so the figure is the wrapper's own cost. Original and wrapped are timed alternately in
one process; prints the median overhead in ns per call and the ratio.
"""

from __future__ import annotations

import os
import statistics
import timeit

os.environ["ACCELERATE_WARMUP_PATCH"] = "off"  # import first, patch explicitly below
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper

import accelerate_warmup_patch


class TrivialEngine:
    lr_scheduler = None

    def set_gradient_accumulation_boundary(self, is_boundary: bool) -> None:
        pass

    def backward(self, loss: object, **kwargs: object) -> None:
        pass

    def step(self) -> None:
        pass


def main(rounds: int = 15, number: int = 200_000) -> None:
    wrapper = DeepSpeedEngineWrapper(TrivialEngine())
    original = DeepSpeedEngineWrapper.__dict__["backward"]
    del os.environ["ACCELERATE_WARMUP_PATCH"]
    accelerate_warmup_patch.apply()
    wrapped = DeepSpeedEngineWrapper.__dict__["backward"]
    assert wrapped is not original, "the patch did not wrap backward"
    wrapper.backward(0.0)  # the first call does the one-time work

    def call_original() -> None:
        original(wrapper, 0.0)

    def call_wrapped() -> None:
        wrapper.backward(0.0)

    base, patched = [], []
    for _ in range(rounds):
        base.append(timeit.timeit(call_original, number=number) / number)
        patched.append(timeit.timeit(call_wrapped, number=number) / number)
    overhead = [p - b for p, b in zip(patched, base)]
    ratios = [p / b for p, b in zip(patched, base)]
    print(f"backward(): original {statistics.median(base) * 1e9:.0f} ns, wrapped "
          f"{statistics.median(patched) * 1e9:.0f} ns; overhead median {statistics.median(overhead) * 1e9:.0f} ns "
          f"(min {min(overhead) * 1e9:.0f}, max {max(overhead) * 1e9:.0f}); ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
