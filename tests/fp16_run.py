"""fp16 with dynamic loss scaling on a real DeepSpeed engine on CPU, with overflowing first steps.

DeepSpeed's CPU accelerator reports fp16 as unsupported (0.15.2: always; 0.19.8: unless oneDNN has fp16
kernels for this CPU), and ``deepspeed.initialize`` then refuses an fp16 config ("Type fp16 is not
supported"). **The seam**: ``Fp16CpuAccelerator``, DeepSpeed's own CPU accelerator with one answer changed,
says fp16 is supported (and lists float16 among the dtypes its gradient reduction accepts). Everything
else is DeepSpeed's own: the fp16 optimizer (``FP16_UnfusedOptimizer`` at ZeRO 0, ``DeepSpeedZeroOptimizer``
at ZeRO 1/2), its dynamic loss scaler, its overflow check, and the engine's skipped step.

The overflows are real: each micro-batch of the first ``overflow_steps`` optimizer steps is a spike (inputs
of magnitude 1e4), whose scaled gradients do not fit in fp16 at any loss scale. DeepSpeed finds the
overflow, lowers the loss scale, skips the optimizer step and does not step the scheduler; the torch
optimizer's step never runs, so the recorder (a step pre-hook on it) records only the steps that update.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SPIKE = 1e4  # fits in fp16 (max 65504); the gradients it makes, once scaled, do not
FP16_CONFIG: dict[str, Any] = {
    # a loss scale that ordinary batches of the tiny model never overflow (2**8), so only the spikes do;
    # every other setting is DeepSpeed's default dynamic loss scaling (loss_scale 0 means dynamic)
    "enabled": True, "loss_scale": 0, "initial_scale_power": 8}


@contextmanager
def fp16_cpu_accelerator() -> Iterator[None]:
    """The seam: DeepSpeed's CPU accelerator, reporting fp16 support, for the length of one run."""
    import torch
    from deepspeed import accelerator
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    class Fp16CpuAccelerator(CPU_Accelerator):  # type: ignore[misc]
        def is_fp16_supported(self) -> bool:
            return True

        def supported_dtypes(self) -> list[Any]:
            return [torch.float, torch.bfloat16, torch.float16]

    before = accelerator.get_accelerator()
    accelerator.set_accelerator(Fp16CpuAccelerator())
    try:
        yield
    finally:
        accelerator.set_accelerator(before)


def train(spec: Any, config: dict[str, Any], model: Any, params: Any) -> list[list[float | None]]:
    """Train ``spec.steps`` optimizer steps in fp16, the first ``spec.overflow_steps`` of them overflowing."""
    import deepspeed
    import torch

    from accelerate_warmup_patch.cli import demo

    demo.set_up_single_process()
    deepspeed.init_distributed(dist_backend="gloo")
    with fp16_cpu_accelerator():
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=params, config=config)
        for _ in range(spec.user_steps):  # the old workaround (harness.Spec.user_steps)
            engine.lr_scheduler.step()
        recorder = demo.StepLrs(demo.torch_optimizer(engine))
        scales = [float(engine.optimizer.loss_scale)]
        for step in range(spec.steps):
            for _ in range(spec.grad_accum):
                batch = torch.randn(2, 4) * (SPIKE if step < spec.overflow_steps else 1.0)
                loss = engine(batch.half()).float().pow(2).mean()
                engine.backward(loss)
                engine.step()
            recorder.flush()
            scales.append(float(engine.optimizer.loss_scale))
    _check_overflows(spec, engine, recorder.rows, scales)
    return recorder.rows


def _check_overflows(spec: Any, engine: Any, rows: list[Any], scales: list[float]) -> None:
    """The run is the case it names: exactly the first ``overflow_steps`` steps skipped, the others updated."""
    skipped = int(engine.skipped_steps)
    updated = len(rows)
    if skipped != spec.overflow_steps or updated != spec.steps - spec.overflow_steps:
        raise RuntimeError(f"fp16 run {spec.key}: {skipped} optimizer steps skipped and {updated} updated, expected "
                           f"{spec.overflow_steps} and {spec.steps - spec.overflow_steps} (loss scales {scales})")
    # the ZeRO optimizer's scaler lowers the scale at the second overflow in a row (hysteresis 2, the default),
    # the ZeRO 0 fp16 optimizers at every overflow
    if spec.overflow_steps >= 2 and not scales[spec.overflow_steps] < scales[0]:
        raise RuntimeError(f"fp16 run {spec.key}: the loss scale did not drop after the overflows ({scales})")
