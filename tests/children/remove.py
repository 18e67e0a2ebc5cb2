"""apply() twice wraps once; remove() restores every original exactly (tests/test_core.py)."""

import accelerate.utils.deepspeed as acc
import deepspeed
from deepspeed.runtime import lr_schedules
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
from deepspeed.runtime.engine import DeepSpeedEngine

originals = (deepspeed.initialize, acc.DeepSpeedEngineWrapper.__dict__['backward'],
             lr_schedules.WarmupLR.__dict__['__init__'], DeepSpeedEngine.__dict__['load_checkpoint'],
             DeepSpeedEngine.__dict__['_take_model_step'], DeepSpeedEngine.__dict__['save_checkpoint'],
             TorchCheckpointEngine.__dict__['save'])
import accelerate_warmup_patch as awp

awp.apply()
reset_only = sorted(awp.status()["patched"])
awp.apply(mode="step")
awp.apply()
wrapped = deepspeed.initialize
assert wrapped is not originals[0] and wrapped.__wrapped__ is originals[0], "one wrap, exactly"
from accelerate_warmup_patch import upstream

methods = [f"deepspeed.runtime.lr_schedules.{c}.{m}" for c, m in upstream.methods_to_fix(deepspeed.__version__)]
# nothing per step in reset mode but the scheduler methods this release lacks a formula of; step mode adds its net
assert reset_only == sorted([*methods, "deepspeed.initialize",
                             "deepspeed.runtime.engine.DeepSpeedEngine.load_checkpoint",
                             "deepspeed.runtime.engine.DeepSpeedEngine.save_checkpoint",
                             "deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine."
                             "TorchCheckpointEngine.save"]), reset_only
assert sorted(awp.status()["patched"]) == sorted([
    *reset_only, "deepspeed.runtime.engine.DeepSpeedEngine._take_model_step"]), awp.status()
awp.remove()
assert deepspeed.initialize is originals[0]
assert acc.DeepSpeedEngineWrapper.__dict__['backward'] is originals[1]
assert lr_schedules.WarmupLR.__dict__['__init__'] is originals[2]
assert DeepSpeedEngine.__dict__['load_checkpoint'] is originals[3]
assert DeepSpeedEngine.__dict__['_take_model_step'] is originals[4]
assert DeepSpeedEngine.__dict__['save_checkpoint'] is originals[5]
assert TorchCheckpointEngine.__dict__['save'] is originals[6]
assert awp.status()["patched"] == [] and awp.status()["mode"] == "off"
awp.apply()
assert deepspeed.initialize.__wrapped__ is originals[0]
print("OK")
