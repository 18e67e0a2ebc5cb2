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
    Spec(scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(scheduler="WarmupLR-linear", zero=2),
    Spec(scheduler="WarmupDecayLR", groups=[1e-3, 5e-4], zero=2, grad_accum=3, steps=4),
    Spec(scheduler="OneCycle"),
]
ACCELERATE = [
    Spec(path="accelerate", scheduler="WarmupLR-linear"),
    Spec(path="accelerate", scheduler="WarmupLR-linear", grad_accum=3, steps=4),
    Spec(path="accelerate", scheduler="WarmupCosineLR", zero=2),
]
ALL = RAW + ACCELERATE
