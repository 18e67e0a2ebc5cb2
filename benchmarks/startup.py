"""Start-up cost, measured side by side in one run, printed as ratios (never asserted).

    python benchmarks/startup.py [--runs 40]

It makes two fresh venvs of the interpreter running it, identical but for this package (installed
with uv, not editable, as a user gets it): the baseline is `python -c pass` in the one without it.
Every variant runs in the other, interleaved with the baseline, run after run:
1. package installed, env unset (the .pth's one lookup) vs. package absent: goal ratio <= 1.02;
2. env set (armed), no deepspeed/accelerate import: goal <= +1 ms, and wrapt not imported;
3. `import accelerate_warmup_patch` alone: goal <= 2 ms, no torch/deepspeed/accelerate imported.
The package's .pyc files are compiled first, as pip does at install (this machine sets
PYTHONDONTWRITEBYTECODE, which would otherwise make every run compile from source).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = {
    "installed, env unset (one lookup)": ({}, "pass"),
    "installed, env=off (one lookup)": ({"ACCELERATE_WARMUP_PATCH": "off"}, "pass"),
    "armed (env=reset), nothing imported": ({"ACCELERATE_WARMUP_PATCH": "reset"}, "pass"),
    "env unset, import accelerate_warmup_patch": ({}, "import accelerate_warmup_patch"),
}


def _time(env: dict[str, str], code: str, python: str) -> float:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env)
    start = time.perf_counter()
    subprocess.run([python, "-c", code], env=full, check=True)
    return time.perf_counter() - start


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _venv(folder: str, with_package: bool) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    python = os.path.join(folder, "bin", "python")
    if with_package:
        uv = shutil.which("uv") or "uv"
        subprocess.run([uv, "pip", "install", "-q", "--python", python, "--no-deps", ROOT], check=True)
        subprocess.run([python, "-m", "compileall", "-q", os.path.join(folder, "lib")], check=True)
    return python


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        bare = _venv(os.path.join(folder, "bare"), with_package=False)
        installed = _venv(os.path.join(folder, "installed"), with_package=True)
        for _ in range(3):  # warm the page cache
            _time({}, "pass", bare)
            _time({}, "pass", installed)
        samples: dict[str, list[float]] = {name: [] for name in VARIANTS}
        base: list[float] = []
        for _ in range(runs):
            base.append(_time({}, "pass", bare))
            for name, (env, code) in VARIANTS.items():
                samples[name].append(_time(env, code, installed))
        check = "import sys; assert 'wrapt' not in sys.modules, 'wrapt was imported at start-up'"
        _time({"ACCELERATE_WARMUP_PATCH": "reset"}, check, installed)
    base_median = statistics.median(base)
    print(f"baseline: `python -c pass` in a venv without the package: median {base_median * 1e3:.1f} ms, "
          f"{runs} runs")
    for name, values in samples.items():
        ratios = [v / b for v, b in zip(values, base)]
        q = statistics.quantiles(ratios, n=4)
        print(f"  {name:45s} ratio median {statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), "
              f"+{(statistics.median(values) - base_median) * 1e3:.2f} ms")
    print("  armed start-up imports no wrapt: ok")


if __name__ == "__main__":
    main()
