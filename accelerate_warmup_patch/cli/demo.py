"""A tiny real DeepSpeed training on CPU that records the lr each optimizer step used.

``python -m accelerate_warmup_patch demo`` runs it twice, in separate interpreters, unpatched
and patched, and prints the two trajectories side by side. The test suite drives the same loop.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from .. import releases
from . import child

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

DEMO_PARAMS: dict[str, Any] = {
    "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5, "warmup_type": "linear"}
DEMO_SCHEDULER = {"type": "WarmupLR", "params": DEMO_PARAMS}
DEMO_STEPS = 6
# what DeepSpeed's get_lr() logs before the first step (0.15.2 and 0.19.8 alike), which a patched run asks for
SCHEDULER_WARNING = "Attempting to get learning rate from scheduler before it has started"


class StepLrs:
    """The lr of every group at the moment each real optimizer step runs.

    ZeRO 1/2 steps the torch optimizer once per group, with ``param_groups`` narrowed to that
    group, so the hook collects per group dict and ``flush`` turns one engine step into one row.
    """

    def __init__(self, optimizer: Any) -> None:
        self.groups = list(optimizer.param_groups)
        self.rows: list[list[float | None]] = []
        self._pending: dict[int, float] = {}
        optimizer.register_step_pre_hook(self._note)

    def _note(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        for group in optimizer.param_groups:
            self._pending[id(group)] = float(group["lr"])

    def flush(self) -> None:
        if self._pending:
            self.rows.append([self._pending.get(id(g)) for g in self.groups])
            self._pending.clear()


def torch_optimizer(engine: Any) -> Any:
    """The torch optimizer under DeepSpeed's wrappers (ZeRO, fp16), which really steps."""
    return innermost_optimizer(engine.optimizer)


def innermost_optimizer(optimizer: Any) -> Any:
    """Unwrap accelerate's and DeepSpeed's optimizer wrappers down to the torch optimizer that steps.

    One level is DeepSpeed's own rule (``schedules.torch_optimizer``: a ZeRO or fp16 wrapper holds the torch
    optimizer). The demo also peels accelerate's ``AcceleratedOptimizer``, which is itself a torch optimizer
    holding the real one (``.optimizer``), where that rule stops.
    """
    from .. import schedules  # the patch's module: loaded where an engine is, not by importing the demo

    while True:
        inner = schedules.torch_optimizer(optimizer)
        if inner is optimizer:  # not a DeepSpeed wrapper: accelerate's, or the torch optimizer itself
            inner = getattr(optimizer, "optimizer", None)
        if inner is None:
            return optimizer
        optimizer = inner


def set_up_single_process() -> None:
    """The environment of a one-rank launch, so DeepSpeed runs without a launcher."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def train_deepspeed(config: dict[str, Any], model: Any, params: Any, steps: int,
                    before: Callable[[Any], None] | None = None, after: Callable[[Any], None] | None = None,
                    initialize: Callable[..., Any] | None = None, **kwargs: Any) -> list[Any]:
    """Build a real engine with ``deepspeed.initialize`` and train ``steps`` optimizer steps.

    ``before(engine)`` runs before the first step (a checkpoint load), ``after(engine)`` after the
    last (a checkpoint save); ``initialize`` replaces ``deepspeed.initialize`` (a reference bound
    before the patch was applied).
    """
    import deepspeed
    import torch

    set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    build = initialize or deepspeed.initialize
    engine, _, _, _ = build(model=model, model_parameters=params, config=config, **kwargs)
    if before is not None:
        before(engine)
    seen = StepLrs(torch_optimizer(engine))
    dtype = next(engine.module.parameters()).dtype  # bf16 engines hold bf16 weights
    for _ in range(steps * int(config.get("gradient_accumulation_steps", 1))):
        loss = engine(torch.randn(2, 4, dtype=dtype)).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
        seen.flush()
    if after is not None:
        after(engine)
    return seen.rows


def demo_config() -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "torch_adam": True}},
        "scheduler": DEMO_SCHEDULER,
        "steps_per_print": 10_000,
    }


def run_one() -> None:
    """Child process: train once with whatever activation the environment holds; print the lrs."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    if skip_shared_memory_op():
        print(f"demo: DeepSpeed's CPU shared-memory comm op ({SHM_OP}) is not built: one training process never "
              "uses it", flush=True)
    rows = train_deepspeed(demo_config(), model, list(model.parameters()), DEMO_STEPS)
    import deepspeed

    child.emit({"lrs": [row[0] for row in rows], "deepspeed": deepspeed.__version__})
    tear_down()


SHM_OP = "deepspeed_shm_comm"


def skip_shared_memory_op() -> bool:
    """Tell DeepSpeed that its CPU shared-memory comm op cannot be built here, as it does itself where it cannot.

    On CPU, every ``TorchBackend`` that ``deepspeed.initialize`` creates JIT-compiles this op (1-3 minutes on
    two cores, the demo's whole first run) unless ``deepspeed.ops.__compatible_ops__`` says the op is not
    compatible, the dict DeepSpeed fills at each launch and reads right there (``build_shm_op``; 0.19.8
    keeps it in the module so that edits to it persist). The op serves only the inference all-reduce of
    tensor-parallel layers; one process that trains never calls it, so the lrs are the same with it or
    without it (docs/doctor.md, "demo"). The test suite's engines still build it. Returns whether it was skipped.
    """
    import deepspeed.ops

    compatible = getattr(deepspeed.ops, "__compatible_ops__", None)
    if not isinstance(compatible, dict) or not compatible.get(SHM_OP):
        return False  # a release without the op, or one that cannot build it anyway
    compatible[SHM_OP] = False
    return True


def tear_down() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()  # CPU DeepSpeed can abort at exit without it


def _run(mode: str, verbose: bool, doing: str) -> dict[str, Any]:
    """One run in a fresh interpreter (``run_one()``), armed by the environment in ``mode``."""
    # DS_ACCELERATOR=cpu: the same tiny CPU run on a machine with a GPU (the model and its inputs stay on CPU)
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": mode, "DS_ACCELERATOR": "cpu"}
    env.pop("ACCELERATE_WARMUP_PATCH_STRICT", None)
    got = child.reply(child.start_module("accelerate_warmup_patch.cli.demo", [], env), timeout=None, doing=doing)
    if verbose or got.returncode != 0:
        # DeepSpeed logs to stdout, the patch to stderr; the RESULT line is the parent's alone
        sys.stderr.write("".join(line for line in got.stdout.splitlines(keepends=True)
                                 if not line.startswith(child.RESULT)))
        sys.stderr.write(got.stderr)
        if SCHEDULER_WARNING in got.stdout + got.stderr:
            sys.stderr.write(f"(DeepSpeed's own warning \"{SCHEDULER_WARNING}\" above is expected: the scheduler is "
                             f"asked for its lr when it is built, as DeepSpeed {releases.BEHAVIOR_REFERENCE}'s "
                             "constructor asks, which logs it too.)\n")
    if got.returncode != 0 or got.result is None:
        raise SystemExit(f"the {mode} run failed (exit {got.returncode}); its output is above")
    return got.result


def reference_lrs(steps: int) -> list[float]:
    """The reference release's trajectory for the demo schedule: step 0 at warmup_min_lr, step k at lr(k-1).

    tests/golden.json holds the same numbers measured on that release.
    """
    low, high, warmup = DEMO_PARAMS["warmup_min_lr"], DEMO_PARAMS["warmup_max_lr"], DEMO_PARAMS["warmup_num_steps"]
    return [low + (high - low) * min(max(k - 1, 0) / warmup, 1.0) for k in range(steps)]


def plot(path: str, off: dict[str, Any], on: dict[str, Any]) -> None:
    """Draw the first steps' lrs unpatched and patched, against the reference release's schedule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = range(len(off["lrs"]))
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot(steps, reference_lrs(len(off["lrs"])), "k--", lw=4, alpha=0.25,
              label="newest DeepSpeed (reference)")
    axes.plot(steps, off["lrs"], "o-", color="tab:red", label=f"DeepSpeed {off['deepspeed']}, unpatched")
    axes.plot(steps, on["lrs"], "s-", color="tab:green", label=f"DeepSpeed {on['deepspeed']}, patched")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("lr used by the step")
    axes.set_title("WarmupLR: the lr of the first optimizer steps")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"Plot written to {path}")


def missing_requirement(plot: bool) -> str | None:
    """One line saying what the demo needs and this environment lacks, or None."""
    import importlib.util

    for module, install in (("torch", "pip install torch"), ("deepspeed", "pip install deepspeed")):
        if importlib.util.find_spec(module) is None:
            return f"the demo trains with the installed {module}, and {module} is not installed here: {install}"
    if plot and importlib.util.find_spec("matplotlib") is None:
        return ("--plot needs matplotlib: pip install matplotlib (the package's 'plot' extra: pip install '.[plot]' "
                "in a clone, or the wheel's path followed by [plot])")
    return None


def main(verbose: bool = False, plot_path: str | None = None) -> int:
    """Parent: the unpatched and the patched run, then the table and a one-line verdict."""
    missing = missing_requirement(bool(plot_path))
    if missing is not None:
        print(f"accelerate-warmup-patch demo: {missing}", file=sys.stderr)
        return 2
    print("Training a tiny model on CPU (DS_ACCELERATOR=cpu) with the installed DeepSpeed, twice (unpatched, "
          "patched).", flush=True)
    work = f"(a new interpreter imports torch and DeepSpeed, then trains {DEMO_STEPS} steps)"
    off = _run("off", verbose, f"running the unpatched demo {work}")
    on = _run("reset", verbose, f"running the patched demo {work}")
    params = DEMO_PARAMS
    print(f"\nDeepSpeed {off['deepspeed']}, WarmupLR {params['warmup_type']} "
          f"{params['warmup_min_lr']} -> {params['warmup_max_lr']} over {params['warmup_num_steps']} steps")
    print(f"{'step':>4}  {'unpatched lr':>14}  {'patched lr':>14}")
    for step, (before, after) in enumerate(zip(off["lrs"], on["lrs"])):
        print(f"{step:>4}  {before:>14.6g}  {after:>14.6g}")
    if plot_path:
        plot(plot_path, off, on)
    start = params["warmup_min_lr"]
    if off["lrs"][0] != start and on["lrs"][0] == start:
        print(f"\nVerdict: DeepSpeed {off['deepspeed']} has the bug (step 0 ran at {off['lrs'][0]:g}); "
              f"the patch starts it at {start:g}.")
    elif off["lrs"][0] == start and on["lrs"] == off["lrs"]:
        print(f"\nVerdict: DeepSpeed {off['deepspeed']} is fixed upstream; the patch changes nothing.")
    else:
        print("\nVerdict: unexpected: step 0 did not start at warmup_min_lr with the patch.")
        return 1
    return 0


if __name__ == "__main__":
    run_one()
