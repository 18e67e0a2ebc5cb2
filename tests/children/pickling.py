"""Every wrapper, patched and removed: signature, doc, names, copy, deepcopy and pickle by reference
(tests/test_wrappers.py)."""

from __future__ import annotations

import copy
import inspect
import json
import pickle
import sys
from typing import Any

import torch

import accelerate_warmup_patch as awp

awp.apply(mode="step")  # every wrapper there is: step mode's net too
# every module the patch wraps in: resolve() finds each wrapper through sys.modules
import accelerate.utils.deepspeed  # noqa: F401
import deepspeed
import deepspeed.launcher.multinode_runner  # noqa: F401
from deepspeed.runtime import lr_schedules


def resolve(label: str) -> Any:
    parts = label.split(".")
    cut = max(i for i in range(1, len(parts)) if ".".join(parts[:i]) in sys.modules)
    found = sys.modules[".".join(parts[:cut])]
    for part in parts[cut:]:
        found = getattr(found, part)
    return found

def optimizer() -> Any:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
instances = {"WarmupLR": lr_schedules.WarmupLR(optimizer(), warmup_num_steps=5),
             "WarmupDecayLR": lr_schedules.WarmupDecayLR(optimizer(), total_num_steps=8, warmup_num_steps=3),
             "WarmupCosineLR": lr_schedules.WarmupCosineLR(optimizer(), total_num_steps=8, warmup_num_steps=3)}
labels = awp.status()["patched"]
assert len(labels) >= 4, labels
def reach() -> dict[str, Any]:
    reached = {label: resolve(label) for label in labels}
    for label in labels:  # a scheduler's own methods, bound to it, as a caller reaches them
        owner, name = label.split(".")[-2:]
        if owner in instances and name != "__init__":
            reached[f"{owner}().{name}"] = getattr(instances[owner], name)
    return reached

def describe(reached: dict[str, Any]) -> dict[str, Any]:
    facts = {}
    for key, found in reached.items():
        bound = getattr(found, "__self__", None) is not None and not isinstance(found.__self__, type(sys))
        deep, shallow = copy.deepcopy(found), copy.copy(found)
        facts[key] = {
            "signature": str(inspect.signature(found)), "doc": found.__doc__, "name": found.__name__,
            "qualname": found.__qualname__, "module": found.__module__,
            "deepcopy": "a copy bound to a copy" if bound and deep.__self__ is not found.__self__
                        and type(deep.__self__) is type(found.__self__) else deep is found,
            "copy": shallow.__self__ is found.__self__ if bound else shallow is found,
            "pickle": {p: pickle.loads(pickle.dumps(found, protocol=p)).__qualname__ for p in range(6)},
        }
    return facts

patched = reach()
assert all(hasattr(found, "__wrapped__") for found in patched.values()), patched
patched_facts = describe(patched)
pickled = {key: pickle.dumps(found) for key, found in patched.items()}
awp.remove()
unpatched = reach()
assert not any(hasattr(found, "__wrapped__") for found in unpatched.values())
unpatched_facts = describe(unpatched)
by_reference = {}
for key, data in pickled.items():  # unpickled where the patch is gone: the original, by its name
    loaded = pickle.loads(data)
    same = loaded is unpatched[key] if "()" not in key else loaded.__func__ is unpatched[key].__func__
    by_reference[key] = same and not hasattr(loaded, "__wrapped__")
awp.apply(mode="step")
again = {key: pickle.loads(data) for key, data in pickled.items()}  # where it is back: what a caller reaches
print("RESULT " + json.dumps([patched_facts, unpatched_facts, by_reference,
                              {key: hasattr(found, "__wrapped__") for key, found in again.items()}]))
