"""Calls per steady optimizer step of real engines, patched minus unpatched, beside the steps benchmark's ratio.

    python benchmarks/calls.py [--check] [--rounds 100] [--steps 200]

A time per step moves with the machine (the steps benchmark's rounds spread about ±5 % on a quiet one); a
count of calls does not. For each warmup scheduler class, on two roads (raw DeepSpeed: ``engine.backward``
and ``engine.step``; accelerate: ``accelerator.backward``, whose ``DeepSpeedEngineWrapper.backward`` the patch
wraps) and in each mode (unpatched, ``reset``, ``step``), one tiny real engine (CPU, gloo, one rank) is built
with the patch in that mode, takes 3 warm-up steps, and then steps 4-13 run under ``sys.setprofile``.

Two kinds of event are counted, each step apart: Python function calls (``call``: a Python function or a
resumed generator) and calls of built-in functions (``c_call``: ``getattr``, ``id``, ``list.append``...).
wrapt's ``FunctionWrapper`` is C code: calling one makes no event of its own, so a wrapper shows as its
wrapper function's call and what that function calls. Each call is named by its function (a built-in one
also by the package function that called it, if one did), so patched minus unpatched names which wrapper
each extra call is; a function the patch calls in place of the release's own (a backported formula) shows
as a minus. A run whose counted steps differ says so: the figures are meant to repeat exactly, run to run
and machine to machine, for one DeepSpeed, accelerate, torch and wrapt. An unpatched engine is built again
after the patched ones, and must count as the first did.

The schedules warm up over 2 steps and decay over 1000, so every counted step is past the warmup and
before the end: the same branch of each formula every step.

``--check`` exits 1 unless every run repeats and, in ``reset`` mode (issue #32's target), every function of
the package entered in a steady step is the wrapper of a per-step fix: a method the guard table says carries
a fix on this release (``upstream.methods_to_fix``) and the unpatched step calls (``get_lr``,
``get_lr_ratio``; a constructor's fix runs once, at the build). Where the table lists no such method for a
scheduler class (0.19.4 and later: none for any), no extra call of either kind is allowed. ``step`` mode is
counted and shown, not checked. Then the steps benchmark runs in the same process (``--rounds 0`` skips it)
and its ratio is printed beside the count of its own configuration.
"""

from __future__ import annotations

import argparse
import collections
import gc
import logging
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

os.environ["ACCELERATE_WARMUP_PATCH"] = "off"  # a .pth armed by the shell patches nothing; each run decides
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness
import steps
import torch

import accelerate_warmup_patch
from accelerate_warmup_patch import upstream

WARM_UP = 3  # steps before counting: the first step's one-time work (the patch's and torch's) is done
COUNTED = 10  # steps 4-13
PACKAGE = "accelerate_warmup_patch"
SCHEDULES: dict[str, dict[str, Any]] = {
    "WarmupLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2},
    "WarmupDecayLR": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2, "total_num_steps": 1000},
    "WarmupCosineLR": {"warmup_min_ratio": 0.1, "warmup_num_steps": 2, "total_num_steps": 1000},
}
ROADS = ("deepspeed", "accelerate")
MODES = ("unpatched", "reset", "step")

Counts = collections.Counter  # function -> calls in one step


@dataclass
class Counted:
    """One engine's counted steps: each step's calls by function, and the package's entry functions."""

    steps: list[Counts[str]]
    entries: dict[str, str] = field(default_factory=dict)  # a package function entered from outside -> what it wraps

    @property
    def identical(self) -> bool:
        return all(step == self.steps[0] for step in self.steps)

    def per_step(self) -> Counts[str]:
        """The calls of one step (a new Counter): the first, when every step is the same (else the mean, rounded
        down)."""
        if self.identical:
            return collections.Counter(self.steps[0])
        total: Counts[str] = collections.Counter()
        for step in self.steps:
            total.update(step)
        return collections.Counter({key: calls // len(self.steps) for key, calls in total.items()})

    def totals(self) -> tuple[int, int]:
        """(Python calls, C calls) of one step."""
        step = self.per_step()
        python = sum(calls for key, calls in step.items() if key.startswith("py "))
        return python, sum(step.values()) - python

    def spread(self) -> str:
        """Each step's (Python, C) totals, for a run whose steps differ."""
        return ", ".join(f"{sum(v for k, v in s.items() if k.startswith('py '))}/"
                         f"{sum(v for k, v in s.items() if k.startswith('C '))}" for s in self.steps)


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "?"))


def _in_package(frame: FrameType | None) -> bool:
    return frame is not None and (_module(frame) == PACKAGE or _module(frame).startswith(PACKAGE + "."))


def _function(frame: FrameType) -> str:
    code = frame.f_code
    return f"{_module(frame)}.{getattr(code, 'co_qualname', code.co_name)}"  # co_qualname: Python 3.11+


def _wraps(frame: FrameType) -> str:
    """What a wrapper function wraps, read from its ``wrapped`` argument (wrapt's calling convention)."""
    wrapped = frame.f_locals.get("wrapped")
    return str(getattr(wrapped, "__qualname__", "")) if wrapped is not None else ""


def count(step: Callable[[], None]) -> Counted:
    """Run ``step`` COUNTED times under sys.setprofile; the calls of each run, by function."""
    steps: list[Counts[str]] = [collections.Counter() for _ in range(COUNTED)]
    entries: dict[str, str] = {}
    sink: Counts[str] = collections.Counter()  # made here: building a Counter is itself a Python call
    current = [sink]  # the step being counted

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            name = _function(frame)
            current[0]["py " + name] += 1
            if _in_package(frame) and not _in_package(frame.f_back) and name not in entries:
                entries[name] = _wraps(frame)
        elif event == "c_call":
            name = getattr(arg, "__qualname__", None) or getattr(arg, "__name__", None) or type(arg).__name__
            caller = f" (called by {_function(frame)})" if _in_package(frame) else ""
            current[0][f"C {name}{caller}"] += 1

    gc.collect()
    gc.disable()  # no collection, and no finalizer it would run, inside a counted step
    try:
        sys.setprofile(profile)
        for counts in steps:
            current[0] = counts
            step()
        current[0] = sink  # the setprofile(None) call below counts in no step
        sys.setprofile(None)
    finally:
        sys.setprofile(None)
        gc.enable()
    return Counted(steps, entries)


# One engine per road --------------------------------------------------------------------------

def _config(scheduler: str) -> dict[str, Any]:
    config = harness.ds_config(harness.Spec(scheduler="none"))  # the tests' engine, without a scheduler
    config["scheduler"] = {"type": scheduler, "params": dict(SCHEDULES[scheduler])}
    return config


def _deepspeed_engine(scheduler: str) -> Callable[[], None]:
    import deepspeed

    harness.demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                           config=_config(scheduler))
    batch = torch.randn(2, 4)

    def step() -> None:
        engine.backward(engine(batch).pow(2).mean())
        engine.step()

    return step


def _accelerate_engine(scheduler: str) -> Callable[[], None]:
    return steps.accelerate_step(_config(scheduler))


BUILDERS: dict[str, Callable[[str], Callable[[], None]]] = {
    "deepspeed": _deepspeed_engine, "accelerate": _accelerate_engine}


def run(scheduler: str, road: str, mode: str) -> Counted:
    """Build one engine with the patch in ``mode`` (applied before the build, as the environment arms it),
    take the warm-up steps, count the next ones."""
    accelerate_warmup_patch.remove()
    gc.collect()  # the last run's engine is gone before apply() looks for live ones
    if mode != "unpatched":
        accelerate_warmup_patch.apply(mode)
    step = BUILDERS[road](scheduler)
    for _ in range(WARM_UP):
        step()
    counted = count(step)
    accelerate_warmup_patch.remove()
    return counted


# What the guard table allows, and the report ---------------------------------------------------

def per_step_fixes(scheduler: str, version: str, unpatched: Counted) -> set[str]:
    """The methods (``WarmupLR.get_lr``) the table says carry a fix on this release and a steady step calls:
    on the scheduler's own class or the one it inherits from, as the step calls them."""
    prefix = "py deepspeed.runtime.lr_schedules."
    called = {key[len(prefix):] for key in unpatched.per_step() if key.startswith(prefix)}
    return {f"{cls}.{method}" for cls, method in upstream.methods_to_fix(version)} & called


def difference(patched: Counted, unpatched: Counted) -> list[tuple[str, int]]:
    """Patched minus unpatched, per function, largest first; only those that differ."""
    diff = patched.per_step()
    diff.subtract(unpatched.per_step())
    return sorted(((key, calls) for key, calls in diff.items() if calls), key=lambda kv: (-abs(kv[1]), kv[0]))


Results = dict[tuple[str, str, str], Counted]  # (scheduler, road, mode) -> its counted steps


def count_all() -> tuple[Results, list[str]]:
    """Every scheduler, road and mode, and the unpatched engine again; what did not repeat, one line each."""
    results: Results = {}
    moved: list[str] = []
    for scheduler in SCHEDULES:
        for road in ROADS:
            for mode in MODES:
                results[scheduler, road, mode] = run(scheduler, road, mode)
                if not results[scheduler, road, mode].identical:
                    moved.append(f"{scheduler}, {road}, {mode}: the counted steps differ (Python/C calls of each: "
                                 f"{results[scheduler, road, mode].spread()})")
            first, again = results[scheduler, road, "unpatched"], run(scheduler, road, "unpatched")
            if again.per_step() != first.per_step():
                moved.append(f"{scheduler}, {road}: an unpatched engine built again counts {again.totals()} "
                             f"(Python, C) calls per step, the first {first.totals()}")
    return results, moved


def report(results: Results, version: str) -> list[str]:
    """Print the table and what each extra call is; where reset mode misses the target, one line each."""
    print(f"\nCalls per steady optimizer step (steps {WARM_UP + 1}-{WARM_UP + COUNTED}, sys.setprofile): "
          "Python calls / C calls; patched minus unpatched")
    print(f"{'scheduler':16s}{'road':12s}{'unpatched':>12s}{'reset':>12s}{'step':>12s}   the table on {version}: "
          "built wrong; per-step fixes")
    missed: list[str] = []
    details: list[str] = []
    for scheduler in SCHEDULES:
        for road in ROADS:
            unpatched = results[scheduler, road, "unpatched"]
            fixes = per_step_fixes(scheduler, version, unpatched)
            cells = ["{}/{}".format(*unpatched.totals())]
            for mode in MODES[1:]:
                patched = results[scheduler, road, mode]
                py, c = extra(patched, unpatched)
                cells.append(f"{_signed(py)}/{_signed(c)}")
                details.append(f"  {scheduler}, {road}, {mode}: {_signed(py)} Python, {_signed(c)} C")
                for key, calls in difference(patched, unpatched):
                    wraps = patched.entries.get(key.split(" ", 1)[1])
                    note = "" if wraps is None else \
                        f"  [wraps {wraps or '?'}{': a per-step fix' if wraps in fixes else ''}]"
                    details.append(f"    {calls:+d} {key}{note}")
                if mode == "reset":
                    missed.extend(_judge(scheduler, road, version, patched, fixes, py, c))
            print(f"{scheduler:16s}{road:12s}" + "".join(f"{cell:>12s}" for cell in cells) +
                  f"   {'yes' if upstream.built_wrong(scheduler, version) else 'no'}; "
                  f"{', '.join(sorted(fixes)) or 'none'}")
    print("\nWhat the extra calls are (Python calls by function; C calls by built-in, and the package function "
          "that made them):")
    print("\n".join(details))
    return missed


def extra(patched: Counted, unpatched: Counted) -> tuple[int, int]:
    """(Python, C) calls per step, patched minus unpatched."""
    (py, c), (base_py, base_c) = patched.totals(), unpatched.totals()
    return py - base_py, c - base_c


def _judge(scheduler: str, road: str, version: str, patched: Counted, fixes: set[str], py: int, c: int) -> list[str]:
    """Where reset mode misses the target for one configuration: a line, or none."""
    where = f"{scheduler}, {road}, reset: {py:+d} Python and {c:+d} C calls per step"
    listed = f"the table lists {', '.join(sorted(fixes)) or 'none'} for {scheduler} on {version}"
    stray = [f"{name} (wraps {wraps or '?'})" for name, wraps in sorted(patched.entries.items()) if wraps not in fixes]
    if stray:
        return [f"{where}; not the wrapper of a per-step fix ({listed}): {', '.join(stray)}"]
    if not fixes and (py or c):
        return [f"{where} ({listed})"]
    return []


def _signed(value: int) -> str:
    return f"{value:+d}" if value else "0"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 unless reset mode meets the issue's targets")
    parser.add_argument("--rounds", type=int, default=100, help="rounds of the steps benchmark (0: skip it)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round of the steps benchmark")
    args = parser.parse_args()
    del os.environ["ACCELERATE_WARMUP_PATCH"]
    import accelerate
    import deepspeed
    import wrapt

    version = str(deepspeed.__version__)
    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)  # 0.15.2 prints each engine's whole config at INFO
    print(f"DeepSpeed {version}, accelerate {accelerate.__version__}, torch {torch.__version__}, "
          f"wrapt {wrapt.__version__}, Python {platform.python_version()}", flush=True)
    results, moved = count_all()
    missed = report(results, version)
    print(f"\nrepeatable: {'no' if moved else 'yes'} (each of the {len(results)} runs' {COUNTED} counted steps "
          "identical, and an unpatched engine built again counts the same)")
    for line in moved:
        print(f"  {line}")
    print("target (reset mode: no extra call where the table lists no per-step fix; elsewhere only the wrappers "
          f"of the per-step fixes): {'NOT MET' if missed else 'met'}")
    for line in missed:
        print(f"  {line}")
    sys.stdout.flush()
    if args.rounds > 0:  # the steps benchmark's engine: WarmupLR through accelerate, reset mode
        py, c = extra(results["WarmupLR", "accelerate", "reset"], results["WarmupLR", "accelerate", "unpatched"])
        print(f"\n{steps.measure(args.rounds, args.steps)}\n  beside it, the count of the same configuration "
              f"(WarmupLR, accelerate, reset): {_signed(py)} Python and {_signed(c)} C calls per step", flush=True)
    harness.demo.tear_down()
    return 1 if args.check and (moved or missed) else 0


if __name__ == "__main__":
    sys.exit(main())
