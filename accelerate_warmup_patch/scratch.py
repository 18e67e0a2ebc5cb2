"""The probe's scratch kit: the installed build's own scheduler classes on a throwaway torch optimizer, and what
they were seen to do where the guard table describes a release (``releases.SCHEDULER_STARTS``,
``WARMUP_MAX_LR_DEFAULTS``, ``StepLr``), compared with the reference's formulas (reference.py).

probe.py makes one ``Scratch`` per probe and hands it to each upstream change's check (``upstream/``). torch is
imported by the probe, never here: this module is standard library at import.
"""

from __future__ import annotations

import math
from types import MappingProxyType, ModuleType
from typing import Any

from . import reference, releases

GROUP_LRS = (0.01, 0.02)  # the scratch optimizer's groups: different lrs, so that "group 0's" shows
# warmup_num_steps: the smallest every release runs as given (it runs max(fewest, n) steps)
WARMUP = releases.warmup_length(releases.DEEPSPEED_FLOOR).fewest
TOTAL = 4  # WarmupCosineLR's total_num_steps: past it by PAST steps, where the old cosine swings back up
PAST = 4
MIN_LR = 0.0005  # WarmupLR's warmup_min_lr: no group's own lr, so that "left the optimizer's lr" shows
PEAK = 0.003  # a warmup_max_lr given
COS_MIN = 0.1  # cos_min_ratio: far from the old formula's swing
# the classes the probe builds (those a backported change changed; WarmupDecayLR runs WarmupLR's code), each
# with the params it is built with to see where it starts
BUILT_AS: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType({
    "WarmupLR": MappingProxyType({"warmup_min_lr": MIN_LR, "warmup_max_lr": PEAK, "warmup_num_steps": WARMUP,
                                  "warmup_type": "linear"}),
    "WarmupCosineLR": MappingProxyType({"total_num_steps": TOTAL, "warmup_num_steps": WARMUP, "cos_min_ratio": COS_MIN,
                                        "warmup_type": "linear"}),
})
PROBED = tuple(BUILT_AS)


class Scratch:
    """One probe's scratch schedulers of the build's lr_schedules ``module`` (``torch``: the imported torch)."""

    def __init__(self, module: ModuleType, torch: Any) -> None:
        self.module, self.torch = module, torch
        self._built: dict[str, tuple[Any, list[Any]]] = {}
        self._seen: dict[str, Any] = {}  # what each experiment below saw: each runs once per probe

    def has(self, name: str) -> bool:
        """Whether the build has this scheduler class (WarmupCosineLR came in 0.12.3)."""
        return isinstance(getattr(self.module, name, None), type)

    def optimizer(self, lrs: tuple[float, ...] = GROUP_LRS) -> Any:
        """A torch optimizer (the schedulers accept nothing else: get_torch_optimizer) that only holds its groups.
        Its class's constructor is not run: torch's imports torch._dynamo at its first call (2.2 s with torch 2.13
        where nothing imported it yet, as on DeepSpeed 0.19.8), and the schedulers read and write nothing but
        param_groups."""
        kind: Any = type("ProbeScratchOptimizer", (self.torch.optim.Optimizer,), {})
        scratch = kind.__new__(kind)
        scratch.param_groups = [{"params": [], "lr": lr} for lr in lrs]
        scratch.defaults, scratch.state = {"lr": lrs[0]}, {}
        return scratch

    def build(self, name: str, **params: Any) -> Any:
        """A scheduler of the build's class ``name`` on a new scratch optimizer (``.optimizer``)."""
        return getattr(self.module, name)(self.optimizer(), **params)

    def built(self, name: str) -> Any:
        """The scheduler of class ``name`` built as BUILT_AS says, once per probe: the start checks ask it."""
        return self._built_with_lrs(name)[0]

    def start(self, name: str) -> releases.Start:
        """What the class did to the optimizer's lr when built, against where the reference starts it."""
        scheduler, got = self._built_with_lrs(name)
        expected = reference.lr_before_start(scheduler, name)
        if same(got, expected):
            return releases.Start.SETS_EVERY_GROUP
        return releases.Start.SETS_GROUP_0_ONLY if same(got[:1], expected[:1]) else releases.Start.LEAVES_OPTIMIZER_LR

    def _built_with_lrs(self, name: str) -> tuple[Any, list[Any]]:
        if name not in self._built:
            scheduler = self.build(name, **BUILT_AS[name])
            self._built[name] = scheduler, lrs(scheduler.optimizer)  # the groups right after the constructor
        return self._built[name]

    def peak(self) -> releases.MaxLrDefault | None:
        """WarmupLR without warmup_max_lr, stepped past its warmup: where it peaks (None: nowhere the table knows)."""
        if "peak" not in self._seen:
            self._seen["peak"] = self._peak()
        return self._seen["peak"]  # type: ignore[no-any-return]

    def _peak(self) -> releases.MaxLrDefault | None:
        scheduler = self.build("WarmupLR", warmup_min_lr=0.0, warmup_num_steps=WARMUP, warmup_type="linear")
        for _ in range(WARMUP + 1):
            scheduler.step()
        peaks = [float(v) for v in lrs(scheduler.optimizer)]
        for default, expected in ((releases.MaxLrDefault.EACH_GROUP, list(GROUP_LRS)),
                                  (releases.MaxLrDefault.GROUP_0, [GROUP_LRS[0]] * len(GROUP_LRS)),
                                  (releases.MaxLrDefault.CONSTANT, [releases.DEFAULT_PEAK] * len(GROUP_LRS))):
            if same(peaks, expected):
                return default
        return None

    def step_lr(self) -> str:
        """What a WarmupLR step leaves in a group whose lr is a tensor (releases.StepLr): a float, a new tensor, or
        the same tensor filled."""
        if "step_lr" not in self._seen:
            self._seen["step_lr"] = self._step_lr()
        return str(self._seen["step_lr"])

    def _step_lr(self) -> str:
        scheduler = self.build("WarmupLR", warmup_min_lr=MIN_LR, warmup_max_lr=PEAK, warmup_num_steps=WARMUP,
                               warmup_type="linear")
        groups = scheduler.optimizer.param_groups
        for group in groups:
            group["lr"] = self.torch.tensor(float(group["lr"]) if not hasattr(group["lr"], "item")
                                            else group["lr"].item())
        held = groups[0]["lr"]
        scheduler.step()
        now = groups[0]["lr"]
        if now is held:
            return releases.StepLr.IN_PLACE
        return releases.StepLr.NEW_TENSOR if isinstance(now, self.torch.Tensor) else releases.StepLr.FLOAT


def same(values: list[Any], expected: list[Any]) -> bool:
    """Equal lrs, floats and tensors alike (a tensor lr holds float32: its rounding is allowed)."""
    got = [float(v.item()) if hasattr(v, "item") else float(v) for v in values]
    want = [float(v.item()) if hasattr(v, "item") else float(v) for v in expected]
    return len(got) == len(want) and all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(got, want))


def is_number(value: Any, expected: float) -> bool:
    return isinstance(value, (int, float)) and math.isclose(value, expected, abs_tol=1e-12)


def lrs(optimizer: Any) -> list[Any]:
    return [group["lr"] for group in optimizer.param_groups]
