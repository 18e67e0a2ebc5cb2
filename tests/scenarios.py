"""The training runs the tests hold against the newest DeepSpeed release, as data."""

from __future__ import annotations

from harness import Spec

RAW = [
    Spec(scheduler="WarmupLR-linear"),
    Spec(scheduler="WarmupLR-log"),
    Spec(scheduler="WarmupDecayLR", steps=9),
    Spec(scheduler="WarmupCosineLR", steps=9),
    Spec(scheduler="WarmupCosineLR", groups=[1e-3, 5e-4]),
    Spec(scheduler="WarmupLR-linear", groups=[1e-3, 5e-4]),
    Spec(scheduler="WarmupLR-default-max", groups=[1e-3, 5e-4]),
    Spec(scheduler="WarmupLR-default-max", groups=[2e-3, 5e-4]),
    Spec(scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(scheduler="WarmupLR-linear", zero=2),
    Spec(scheduler="WarmupDecayLR", groups=[1e-3, 5e-4], zero=2, grad_accum=3, steps=4),
    Spec(scheduler="OneCycle"),
    Spec(scheduler="WarmupLR-linear", zero=1),
    Spec(scheduler="WarmupCosineLR", groups=[1e-3, 5e-4], zero=3),
    Spec(scheduler="WarmupLR-linear", zero=2, bf16=True),
    Spec(scheduler="WarmupLR-linear", zero=3, bf16=True),
    Spec(scheduler="WarmupLR-linear", zero=2, offload=True),
]
ACCELERATE = [
    Spec(path="accelerate", scheduler="WarmupLR-linear"),
    Spec(path="accelerate", scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(path="accelerate", scheduler="WarmupCosineLR", zero=2),
]
TRAINER = [
    Spec(path="trainer", scheduler="WarmupLR-linear"),
    Spec(path="trainer", scheduler="WarmupDecayLR"),
    Spec(path="trainer", scheduler="WarmupLR-linear", torch_scheduler=True),
]
ALL = RAW + ACCELERATE + TRAINER

# The version matrix (tests/matrix.py) runs these on every release: the scheduler classes, param
# groups and gradient accumulation, raw and through accelerate. Scheduler-tier releases (no engine
# on CPU) drive the same schedules without an engine, so only the gradient-accumulation-1 ones.
MATRIX_ENGINE = [s for s in RAW if s.zero == 0 and not s.bf16 and not s.offload] + ACCELERATE[:2]
MATRIX_SCHEDULER = [s for s in RAW if s.zero == 0 and s.grad_accum == 1 and not s.bf16 and not s.offload]
