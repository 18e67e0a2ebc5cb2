"""What the probe (accelerate_warmup_patch/probe.py) costs a process that imports deepspeed, once.

    python benchmarks/probe.py [--rounds 50]

One process: deepspeed imported with the patch off, its import timed; then the probe run on the release's own
(unwrapped) scheduler classes ``--rounds`` times, each timed. Prints the median and the spread in milliseconds,
and the median as a share of the import of deepspeed the probe follows. Nothing of it runs on an optimizer step.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time

os.environ["ACCELERATE_WARMUP_PATCH"] = "off"  # nothing armed: the probe runs on the release's own classes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=50)
    rounds = parser.parse_args().rounds
    started = time.perf_counter()
    deepspeed = importlib.import_module("deepspeed")
    imported = time.perf_counter() - started
    from accelerate_warmup_patch import probe

    module = sys.modules["deepspeed.runtime.lr_schedules"]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        probe.run(module, deepspeed.__version__)
        times.append(time.perf_counter() - start)
    first, median = times[0] * 1e3, statistics.median(times) * 1e3
    print(f"probe on DeepSpeed {deepspeed.__version__}: first run {first:.2f} ms, median {median:.2f} ms "
          f"(min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f}, {rounds} runs); import deepspeed took "
          f"{imported:.2f} s: the probe adds {first / (imported * 1e3):.2%} once")


if __name__ == "__main__":
    main()
