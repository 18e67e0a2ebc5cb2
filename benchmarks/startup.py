"""Start-up cost, measured side by side in one run, printed as ratios (never asserted).

    python benchmarks/startup.py [--runs 40]

Interleaves each variant with its baseline, run after run, in the interpreter this script runs
in (which must have the package installed, so that its .pth is on the start-up path):
1. `python -c pass`, env unset, vs. the same with `-S`-free `site` but the .pth line a no-op is
   not separable; so: env unset vs. env=off (both take the .pth's single lookup path).
2. env set (armed), no deepspeed import, vs. env unset: the cost of arming; wrapt must stay out.
3. `import accelerate_warmup_patch` alone, vs. `python -c pass`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "armed (env=reset), nothing imported": ({"ACCELERATE_WARMUP_PATCH": "reset"}, "pass"),
    "env unset, import accelerate_warmup_patch": ({}, "import accelerate_warmup_patch"),
    "env=off (one lookup, nothing imported)": ({"ACCELERATE_WARMUP_PATCH": "off"}, "pass"),
}
BASELINE = ({}, "pass")


def _time(env: dict[str, str], code: str) -> float:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=full, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    runs = parser.parse_args().runs
    for _ in range(3):  # warm the page cache and the .pyc files
        _time(*BASELINE)
    samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
    base: list[float] = []
    for _ in range(runs):
        base.append(_time(*BASELINE))
        for name, (env, code) in VARIANTS.items():
            samples[name].append(_time(env, code))
    base_median = statistics.median(base)
    print(f"{sys.executable}: `python -c pass`, env unset: median {base_median * 1e3:.1f} ms over {runs} runs")
    for name, values in samples.items():
        ratios = [v / b for v, b in zip(values, base)]
        q = statistics.quantiles(ratios, n=4)
        print(f"  {name:45s} ratio median {statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), "
              f"+{(statistics.median(values) - base_median) * 1e3:.2f} ms")
    check = "import sys; assert 'wrapt' not in sys.modules, 'wrapt was imported at start-up'"
    _time({"ACCELERATE_WARMUP_PATCH": "reset"}, check)
    print("  armed start-up imports no wrapt: ok")


if __name__ == "__main__":
    main()
