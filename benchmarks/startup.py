"""Start-up cost, measured side by side in one run, printed as ratios (never asserted).

    python benchmarks/startup.py [--runs 100]

It makes two fresh venvs of the interpreter running it, identical but for this package (installed
with uv, not editable, as a user gets it). All runs are interleaved, run after run, and each figure
is a ratio against its own baseline, pair by pair (the milliseconds added, too, are the median of
the pairs' differences):
1. `python -c pass`, package installed and env unset (the .pth's one lookup) vs. the venv without
   the package: goal ratio <= 1.02 (env=off is shown too);
2. env set (armed), no deepspeed/accelerate import, vs. env unset: goal <= +1 ms and <= +1.0 M
   instructions (issue #17), wrapt not imported;
3. `import accelerate_warmup_patch` vs. `pass`, both env unset: goal <= 2 ms and <= +1.5 M
   instructions, no torch/deepspeed/accelerate imported;
and, beyond the issue's figures, what an armed process that never imports a framework pays on
each later import: about 150 stdlib modules imported, armed vs. env unset (figure 2 included).
The package's .pyc files are compiled first, as pip does at install (this machine sets
PYTHONDONTWRITEBYTECODE, which would otherwise make every run compile from source).

Where valgrind is installed, each variant also runs once under callgrind and its count of executed
instructions is printed: deterministic (PYTHONHASHSEED=0), so it does not move with the load of a
shared machine, and it shows where a fraction of a millisecond goes. Beside each figure, the part
of it inside CPython's cyclic garbage collector: whether one more collection falls in a run this
short depends on the environment (docs/benchmarks.md).
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

BARE = "no package: python -c pass"
UNSET = "installed, env unset: python -c pass"
# about 150 modules, none of them a framework: the armed finder is asked about each
STDLIB = "import json, email.parser, http.client, xml.dom.minidom, argparse, logging, typing, dataclasses, asyncio"
UNSET_STDLIB = "installed, env unset: stdlib imports"
ARMED = {"ACCELERATE_WARMUP_PATCH": "reset"}
# name: (env, code, the baseline it is compared with, if any); all but BARE run in the venv with the package
VARIANTS: dict[str, tuple[dict[str, str], str, str | None]] = {
    UNSET: ({}, "pass", BARE),
    "installed, env=off: python -c pass": ({"ACCELERATE_WARMUP_PATCH": "off"}, "pass", BARE),
    "armed (env=reset): python -c pass": (ARMED, "pass", UNSET),
    "env unset: import accelerate_warmup_patch": ({}, "import accelerate_warmup_patch", UNSET),
    UNSET_STDLIB: ({}, STDLIB, None),
    "armed (env=reset): stdlib imports": (ARMED, STDLIB, UNSET_STDLIB),
}


def _time(env: dict[str, str], code: str, python: str) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one interpreter run.

    The CPU time is what the run itself burned: on a shared machine it moves far less with the
    load around it than the wall time does."""
    full = _environment(env)
    start = time.perf_counter()
    # from a folder of its own: the repository as the working directory would shadow the installed package
    child = subprocess.Popen([python, "-c", code], env=full, cwd=os.path.dirname(os.path.dirname(python)))
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, [python, "-c", code])
    return wall, usage.ru_utime + usage.ru_stime


def _environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its ACCELERATE_WARMUP_PATCH* settings, plus ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    full.update(env)
    return full


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
    parser.add_argument("--runs", type=int, default=100)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        bare = _venv(os.path.join(folder, "bare"), with_package=False)
        installed = _venv(os.path.join(folder, "installed"), with_package=True)
        for _ in range(3):  # warm the page cache
            _time({}, "pass", bare)
            _time({}, "pass", installed)
        samples: dict[str, list[tuple[float, float]]] = {BARE: [], **{name: [] for name in VARIANTS}}
        for _ in range(runs):
            samples[BARE].append(_time({}, "pass", bare))
            for name, (env, code, _) in VARIANTS.items():
                samples[name].append(_time(env, code, installed))
        check = ("import sys; assert not {'wrapt', 'torch', 'deepspeed', 'accelerate'} & set(sys.modules), "
                 "'a framework or wrapt was imported at start-up'")
        _time(ARMED, check, installed)
        counts = _counts(bare, installed) if shutil.which("valgrind") else None
    print(f"{BARE}: {runs} interleaved runs, median wall {_median(samples[BARE], 0) * 1e3:.1f} ms, "
          f"CPU {_median(samples[BARE], 1) * 1e3:.1f} ms")
    for name, baseline in _figures():
        print(f"  {name:42s} vs {baseline!r}:")
        print("    " + "; ".join(_figure(samples[name], samples[baseline], which, label)
                                 for which, label in ((0, "wall"), (1, "CPU"))))
    print("armed start-up imports neither wrapt nor a framework: ok")
    if counts:
        _print_instructions(counts)


def _figures() -> list[tuple[str, str]]:
    """(variant, its baseline) for each variant that has a baseline."""
    return [(name, baseline) for name, (_, _, baseline) in VARIANTS.items() if baseline is not None]


def _counts(bare: str, installed: str) -> dict[str, tuple[int, int]]:
    counts = {BARE: _count({}, "pass", bare)}
    counts.update({name: _count(env, code, installed) for name, (env, code, _) in VARIANTS.items()})
    return counts


def _print_instructions(counts: dict[str, tuple[int, int]]) -> None:
    print(f"instructions (callgrind), {BARE}: {counts[BARE][0] / 1e6:.2f} M; each figure, then the part of it "
          "inside CPython's cyclic garbage collector (gc_collect_main)")
    for name, baseline in _figures():
        (total, in_gc), (base_total, base_in_gc) = counts[name], counts[baseline]
        print(f"  {name:42s} vs {baseline!r}: ratio {total / base_total:.3f}, {(total - base_total) / 1e6:+.2f} M "
              f"(in the collector {(in_gc - base_in_gc) / 1e6:+.2f} M)")


def _count(env: dict[str, str], code: str, python: str) -> tuple[int, int]:
    """Instructions of one run, and of those the ones inside the cyclic GC: a collection runs each time
    the count of new container objects passes a threshold (700 on 3.11), so a few dozen objects more
    can move one into the measured run that a longer program runs anyway."""
    total = _callgrind(env, code, python)
    in_gc = _callgrind(env, code, python, "--collect-atstart=no", "--toggle-collect=gc_collect_main")
    return total, in_gc


def _callgrind(env: dict[str, str], code: str, python: str, *options: str) -> int:
    full = _environment({**env, "PYTHONHASHSEED": "0"})
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *options, python, "-c", code]
    run = subprocess.run(command, env=full, capture_output=True, text=True, check=True, cwd=os.path.dirname(python))
    return int(next(line for line in run.stderr.splitlines() if "Collected :" in line).split()[-1])


def _median(samples: list[tuple[float, float]], which: int) -> float:
    return statistics.median(sample[which] for sample in samples)


def _figure(values: list[tuple[float, float]], base: list[tuple[float, float]], which: int, label: str) -> str:
    # run by run, as the runs were interleaved: a pair shares the load of its moment
    ratios = [v[which] / b[which] for v, b in zip(values, base)]
    q = statistics.quantiles(ratios, n=4)
    added = statistics.median(v[which] - b[which] for v, b in zip(values, base)) * 1e3
    return f"{label} ratio {statistics.median(ratios):.3f} (IQR {q[0]:.3f}-{q[2]:.3f}), {added:+.2f} ms"


if __name__ == "__main__":
    main()
