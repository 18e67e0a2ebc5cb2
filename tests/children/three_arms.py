"""The .pth, an explicit import with apply() and sitecustomize's arming, in one process: one wrap
(tests/test_activation.py)."""

import accelerate_warmup_patch as awp

awp.apply()
awp.arm_from_environment("sitecustomize")
import deepspeed

w = deepspeed.initialize
assert not hasattr(w.__wrapped__, "__wrapped__"), "wrapped twice"
assert awp.status()["patched"].count("deepspeed.initialize") == 1
print(awp.status()["applied_by"])
