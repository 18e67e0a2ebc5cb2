"""The probe: ask the installed build's warmup scheduler classes what they do, once per process.

Run by ``targets.patch_deepspeed`` when deepspeed is imported, before anything is wrapped, so it meets the build's
own code. Each class is built on a scratch torch optimizer (two groups of different lrs, one-element parameters),
stepped a few times, and compared with DeepSpeed 0.19.8's formulas (reference.py) at the same positions: the start
lr of every group, ``get_lr()`` before the first step, WarmupLR's peak without ``warmup_max_lr``, WarmupCosineLR's
ratio before the first step and past its warmup and total, an unknown ``warmup_type``, and what a step leaves in a
group whose lr is a tensor. What differs is a change of ``releases.UPSTREAM_CHANGES`` the build lacks
(``installed.Probed``). Nothing of it runs on an optimizer step, and nothing at all unless deepspeed is imported.
DeepSpeed's own warnings (get_lr before the first step, an unknown warmup_type) are held back while it runs: they
are about the scratch schedulers, not the user's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from . import installed, log, reference, releases
from .state import STATE

GROUP_LRS = (0.01, 0.02)  # the scratch optimizer's groups: different lrs, so that "group 0's" shows
# warmup_num_steps: the smallest every release runs as given (it runs max(fewest, n) steps)
WARMUP = releases.warmup_length(releases.DEEPSPEED_FLOOR).fewest
TOTAL = 4  # WarmupCosineLR's total_num_steps: past it by PAST steps, where the old cosine swings back up
PAST = 4
MIN_LR = 0.0005  # WarmupLR's warmup_min_lr: no group's own lr, so that "left the optimizer's lr" shows
PEAK = 0.003  # a warmup_max_lr given
COS_MIN = 0.1  # cos_min_ratio: far from the old formula's swing


def run(module: ModuleType, version: str) -> installed.Probed:
    """Probe the classes of ``module`` (deepspeed.runtime.lr_schedules); raises where it cannot."""
    import torch

    warmup, cosine = getattr(module, "WarmupLR", None), getattr(module, "WarmupCosineLR", None)
    if not isinstance(warmup, type):
        raise LookupError(f"{module.__name__} has no WarmupLR class")
    lacks: set[tuple[str, str]] = set()
    starts: dict[str, releases.Start] = {}
    with _quiet(getattr(module, "logger", None)):
        starts["WarmupLR"] = _starts(warmup, "WarmupLR", torch, lacks, warmup_min_lr=MIN_LR, warmup_max_lr=PEAK,
                                     warmup_num_steps=WARMUP, warmup_type="linear")
        peak = _peak(warmup, torch, lacks)
        step_lr = _step_lr(warmup, torch)
        if isinstance(cosine, type):  # from 0.12.3
            starts["WarmupCosineLR"] = _starts(cosine, "WarmupCosineLR", torch, lacks, total_num_steps=TOTAL,
                                               warmup_num_steps=WARMUP, cos_min_ratio=COS_MIN, warmup_type="linear")
            _cosine_later(cosine, torch, lacks)
            _unknown_type(cosine, torch, lacks)
    return installed.Probed(version, frozenset(starts), frozenset(lacks), starts, peak, step_lr)


def _optimizer(torch: Any, lrs: tuple[float, ...] = GROUP_LRS) -> Any:
    """A torch optimizer (the schedulers accept nothing else: get_torch_optimizer) that only holds its groups. Its
    class's constructor is not run: torch's imports torch._dynamo at its first call (2.2 s with torch 2.13 where
    nothing imported it yet, as on DeepSpeed 0.19.8), and the schedulers read and write nothing but param_groups."""
    kind: Any = type("ProbeScratchOptimizer", (torch.optim.Optimizer,), {})
    scratch = kind.__new__(kind)
    scratch.param_groups = [{"params": [], "lr": lr} for lr in lrs]
    scratch.defaults, scratch.state = {"lr": lrs[0]}, {}
    return scratch


def _same(values: list[Any], expected: list[Any]) -> bool:
    """Equal lrs, floats and tensors alike (a tensor lr holds float32: its rounding is allowed)."""
    got = [float(v.item()) if hasattr(v, "item") else float(v) for v in values]
    want = [float(v.item()) if hasattr(v, "item") else float(v) for v in expected]
    return len(got) == len(want) and all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(got, want))


def _lrs(optimizer: Any) -> list[Any]:
    return [group["lr"] for group in optimizer.param_groups]


def _starts(cls: type, name: str, torch: Any, lacks: set[tuple[str, str]], **params: Any) -> releases.Start:
    """The start lr of every group, and get_lr() before the first step, against 0.19.8's (PR #6597, #7969)."""
    optimizer = _optimizer(torch)
    scheduler = cls(optimizer, **params)
    expected = reference.lr_before_start(scheduler, name)
    got = _lrs(optimizer)
    if not _same(got, expected):
        lacks.add((name, "start"))
    if not _same(list(scheduler.get_lr()), expected):
        lacks.add((name, "get_lr_before_start"))
    if name == "WarmupCosineLR" and not _is_number(scheduler.get_lr_ratio(), 0.0):
        lacks.add((name, "ratio_before_start"))
    if _same(got, expected):
        return releases.Start.SETS_EVERY_GROUP
    return releases.Start.SETS_GROUP_0_ONLY if _same(got[:1], expected[:1]) else releases.Start.LEAVES_OPTIMIZER_LR


def _is_number(value: Any, expected: float) -> bool:
    return isinstance(value, (int, float)) and math.isclose(value, expected, abs_tol=1e-12)


def _peak(cls: type, torch: Any, lacks: set[tuple[str, str]]) -> releases.MaxLrDefault | None:
    """WarmupLR without warmup_max_lr, stepped past its warmup: 0.19.8 peaks at each group's own lr (PR #8171)."""
    optimizer = _optimizer(torch)
    scheduler = cls(optimizer, warmup_min_lr=0.0, warmup_num_steps=WARMUP, warmup_type="linear")
    for _ in range(WARMUP + 1):
        scheduler.step()
    peaks = [float(v) for v in _lrs(optimizer)]
    for default, expected in ((releases.MaxLrDefault.EACH_GROUP, list(GROUP_LRS)),
                              (releases.MaxLrDefault.GROUP_0, [GROUP_LRS[0]] * len(GROUP_LRS)),
                              (releases.MaxLrDefault.CONSTANT, [releases.DEFAULT_PEAK] * len(GROUP_LRS))):
        if _same(peaks, expected):
            if default is not releases.MaxLrDefault.EACH_GROUP:
                lacks.add(("WarmupLR", "default_peak"))
            return default
    lacks.add(("WarmupLR", "default_peak"))
    return None


def _step_lr(cls: type, torch: Any) -> str:
    """What a step leaves in a group whose lr is a tensor: a float, a new tensor, or the same tensor filled."""
    optimizer = _optimizer(torch)
    scheduler = cls(optimizer, warmup_min_lr=MIN_LR, warmup_max_lr=PEAK, warmup_num_steps=WARMUP,
                    warmup_type="linear")
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]) if not hasattr(group["lr"], "item") else group["lr"].item())
    held = optimizer.param_groups[0]["lr"]
    scheduler.step()
    now = optimizer.param_groups[0]["lr"]
    if now is held:
        return installed.IN_PLACE
    return installed.NEW_TENSOR if isinstance(now, torch.Tensor) else installed.FLOAT


def _cosine_later(cls: type, torch: Any, lacks: set[tuple[str, str]]) -> None:
    """WarmupCosineLR's ratio at every step past its warmup, to PAST steps beyond its total: 0.19.3's (PR #8142)."""
    scheduler = cls(_optimizer(torch), total_num_steps=TOTAL, warmup_num_steps=WARMUP, cos_min_ratio=COS_MIN,
                    warmup_type="linear")
    try:
        for _ in range(TOTAL + PAST):
            scheduler.step()
            if scheduler.last_batch_iteration >= WARMUP and not _is_number(scheduler.get_lr_ratio(),
                                                                           reference.cosine_ratio(scheduler)):
                lacks.add(("WarmupCosineLR", "ratio_past_warmup"))
                return
    except ArithmeticError:
        lacks.add(("WarmupCosineLR", "ratio_past_warmup"))


def _unknown_type(cls: type, torch: Any, lacks: set[tuple[str, str]]) -> None:
    """An unknown warmup_type: 0.19.4 warns and runs log (PR #8151); before, the first step fails."""
    log_type, unknown = _optimizer(torch), _optimizer(torch)
    cls(log_type, total_num_steps=TOTAL, warmup_num_steps=WARMUP + 1, warmup_type="log").step()
    try:
        cls(unknown, total_num_steps=TOTAL, warmup_num_steps=WARMUP + 1, warmup_type="probe-unknown").step()
    except Exception:  # before 0.19.4: UnboundLocalError at the first step
        lacks.add(("WarmupCosineLR", "unknown_warmup_type"))
        return
    if not _same(_lrs(unknown), _lrs(log_type)):
        lacks.add(("WarmupCosineLR", "unknown_warmup_type"))


class _Hold(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextmanager
def _quiet(logger: Any) -> Iterator[None]:
    """DeepSpeed's logger says nothing about the scratch schedulers while they run."""
    hold = _Hold()
    if isinstance(logger, logging.Logger):
        logger.addFilter(hold)
    try:
        yield
    finally:
        if isinstance(logger, logging.Logger):
            logger.removeFilter(hold)


def ensure(module: ModuleType, version: str, report: Callable[[Exception], None]) -> installed.Probed | None:
    """The probe's answer for this build, run once per process (a reload of deepspeed runs it anew); None where it
    failed (``report`` says so once: the table's answers stand in)."""
    answer = installed.probed()
    if answer is not None and answer.version == version and STATE.probed_module == id(module):
        return answer
    try:
        answer = run(module, version)
    except Exception as error:
        STATE.probed = None
        report(error)
        return None
    STATE.probed, STATE.probed_module = answer, id(module)
    differ = installed.disagreements(answer)
    if differ:
        log.warn_once("probe-differs", "DeepSpeed %s: its scheduler classes do not do what the guard table says of "
                      "the release its number names: %s; the patch follows what they do", version, "; ".join(differ))
    return answer
