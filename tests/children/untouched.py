"""accelerate's engine wrapper is never written into, nor its backward wrapped (tests/test_core.py)."""

import sys
from pathlib import Path

import torch

# the import arms the patch; imported before the harness, which leaves an armed package armed
import accelerate_warmup_patch  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the harness
import harness
from accelerate import Accelerator
from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler

harness.demo.set_up_single_process()
accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=harness.ds_config(harness.Spec())))
model = torch.nn.Linear(4, 4)
optimizer = DummyOptim(list(model.parameters()), lr=1e-3)
model, optimizer, scheduler = accelerator.prepare(model, optimizer, DummyScheduler(optimizer))
wrapper = accelerator.deepspeed_engine_wrapped
attributes = dict(vars(wrapper))
for _ in range(3):
    accelerator.backward(model(torch.randn(2, 4)).pow(2).mean())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
assert vars(wrapper) == attributes, set(vars(wrapper)) ^ set(attributes)
import wrapt

assert not isinstance(type(wrapper).__dict__["backward"], wrapt.FunctionWrapper)  # accelerate's code is not wrapped
print("OK")
harness._tear_down()
