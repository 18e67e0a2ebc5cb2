"""A wrapper is still the function: the user's errors stay the user's, and what worked on the original
(pickling by reference, deepcopy, ``inspect.signature``, ``__doc__``) works on every wrapper installed.

Each program compares, in one real interpreter, the patched callables with the same names after
``remove()``: the unpatched release is the reference, whatever the release.
"""

from __future__ import annotations

import json

import pytest
from conftest import installed, run_python

installed("deepspeed")  # every test here runs real DeepSpeed: without it the module skips

USER_ERRORS = """
import json, logging, torch
import accelerate_warmup_patch as awp
awp.apply()
import deepspeed, harness
from deepspeed.runtime import lr_schedules
said = []
class Keep(logging.Handler):
    def emit(self, record):
        said.append(record.getMessage())
logging.getLogger("accelerate_warmup_patch").addHandler(Keep())
logging.getLogger("accelerate_warmup_patch").setLevel(logging.DEBUG)
harness.demo.set_up_single_process()
deepspeed.init_distributed(dist_backend="gloo")
model = torch.nn.Linear(4, 4)
engine, *_ = deepspeed.initialize(model=model, model_parameters=list(model.parameters()),
                                  config=harness.ds_config(harness.Spec()))
def optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
cosine = lr_schedules.WarmupCosineLR(optimizer(), warmup_num_steps=3, total_num_steps=8)
warmup = lr_schedules.WarmupLR(optimizer(), warmup_num_steps=5)
calls = {
    "WarmupLR(opt, warmup_steps=10)": lambda: lr_schedules.WarmupLR(optimizer(), warmup_steps=10),
    "WarmupLR()": lambda: lr_schedules.WarmupLR(),
    "WarmupLR(None)": lambda: lr_schedules.WarmupLR(None),
    "WarmupLR(opt, warmup_num_steps='5')": lambda: lr_schedules.WarmupLR(optimizer(), warmup_num_steps="5"),
    "WarmupDecayLR(opt)": lambda: lr_schedules.WarmupDecayLR(optimizer()),
    "WarmupCosineLR(opt, total_steps=8)": lambda: lr_schedules.WarmupCosineLR(optimizer(), total_steps=8),
    "WarmupLR.get_lr(1)": lambda: warmup.get_lr(1),
    "WarmupCosineLR.get_lr_ratio(1)": lambda: cosine.get_lr_ratio(1),
    "engine.load_checkpoint(bogus=1)": lambda: engine.load_checkpoint("/nonexistent", bogus=1),
    "deepspeed.initialize(bogus=1)": lambda: deepspeed.initialize(bogus=1),
}
def outcomes():
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = None
        except Exception as error:
            out[name] = [type(error).__name__, str(error)]
    return out
said.clear()
patched, said_patched = outcomes(), list(said)
awp.remove()
print("RESULT " + json.dumps([patched, outcomes(), said_patched]))
harness._tear_down()
"""


@pytest.mark.parametrize("strict", ["", "1"], ids=["default", "strict"])
def test_a_users_wrong_arguments_raise_the_originals_error_unchanged_and_unannounced(strict):
    proc = run_python(USER_ERRORS, env={"ACCELERATE_WARMUP_PATCH_STRICT": strict})
    assert proc.returncode == 0, proc.stderr[-3000:]
    patched, unpatched, said = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert all(unpatched.values()), unpatched  # every call is a user's error on this release
    assert patched == unpatched
    assert said == []


PICKLING = """
import copy, inspect, json, pickle, sys, torch
import accelerate_warmup_patch as awp
awp.apply(mode="step")  # every wrapper there is: step mode's net too
import deepspeed, deepspeed.launcher.multinode_runner, accelerate.utils.deepspeed
from deepspeed.runtime import lr_schedules

def resolve(label):
    parts = label.split(".")
    cut = max(i for i in range(1, len(parts)) if ".".join(parts[:i]) in sys.modules)
    found = sys.modules[".".join(parts[:cut])]
    for part in parts[cut:]:
        found = getattr(found, part)
    return found

def optimizer():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
instances = {"WarmupLR": lr_schedules.WarmupLR(optimizer(), warmup_num_steps=5),
             "WarmupDecayLR": lr_schedules.WarmupDecayLR(optimizer(), total_num_steps=8, warmup_num_steps=3),
             "WarmupCosineLR": lr_schedules.WarmupCosineLR(optimizer(), total_num_steps=8, warmup_num_steps=3)}
labels = awp.status()["patched"]
assert len(labels) >= 4, labels
def reach():
    reached = {label: resolve(label) for label in labels}
    for label in labels:  # a scheduler's own methods, bound to it, as a caller reaches them
        owner, name = label.split(".")[-2:]
        if owner in instances and name != "__init__":
            reached[f"{owner}().{name}"] = getattr(instances[owner], name)
    return reached

def describe(reached):
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
"""


def test_every_wrapper_pickles_by_reference_copies_and_introspects_as_the_original():
    proc = run_python(PICKLING)
    assert proc.returncode == 0, proc.stderr[-3000:]
    patched, unpatched, by_reference, rewrapped = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert patched == unpatched
    assert by_reference == {key: True for key in patched}
    assert rewrapped == {key: True for key in patched}
