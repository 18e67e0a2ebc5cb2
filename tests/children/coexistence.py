"""What other tools' wrappers and threads meet in one interpreter that imported the real deepspeed and
accelerate first: ``coexistence.py SCENARIO [TOOL]`` prints one JSON line (tests/test_coexistence.py)."""

from __future__ import annotations

import functools
import json
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

import deepspeed
import torch
import wrapt
from accelerate.utils.deepspeed import DeepSpeedEngineWrapper
from deepspeed.runtime import lr_schedules
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
from deepspeed.runtime.engine import DeepSpeedEngine

OWNERS = [deepspeed, lr_schedules.WarmupLR, lr_schedules.WarmupCosineLR, DeepSpeedEngine, DeepSpeedEngineWrapper,
          TorchCheckpointEngine]
ORIGINALS = [dict(vars(owner)) for owner in OWNERS]

import accelerate_warmup_patch as awp  # deepspeed is imported: this applies at once

said = []
class Keep(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        said.append(record.getMessage())
logging.getLogger("accelerate_warmup_patch").addHandler(Keep())
logging.getLogger("accelerate_warmup_patch").setLevel(logging.INFO)

def attr(owner: Any, name: str) -> Any:
    return vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)

def ours(owner: Any, name: str) -> int:
    count, layer = 0, attr(owner, name)
    while layer is not None:
        count += type(layer).__module__ == "accelerate_warmup_patch.wrapping"
        layer = getattr(layer, "__wrapped__", None)
    return count

def all_layers() -> dict[str, int]:
    return {f"{getattr(o, '__qualname__', o.__name__)}.{n}": ours(o, n)
            for o in OWNERS for n in list(vars(o)) if callable(vars(o)[n]) or n == "initialize"
            if ours(o, n)}

def restored() -> bool:
    return all(vars(owner).get(name) is value for owner, before in zip(OWNERS, ORIGINALS)
               for name, value in before.items())

def first_lr() -> float:
    # a real WarmupLR on a real torch optimizer: the lr its first optimizer step would use
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    lr_schedules.WarmupLR(optimizer, warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=5,
                          warmup_type="linear")
    return float(optimizer.param_groups[0]["lr"])

LABELS = ["deepspeed.initialize", "deepspeed.runtime.lr_schedules.WarmupLR.__init__",
          "accelerate.utils.deepspeed.DeepSpeedEngineWrapper.backward",
          "deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine.TorchCheckpointEngine.save"]
EXPECTED = [int(label in awp.status()["patched"]) for label in LABELS]  # WarmupLR.__init__: buggy releases only
NEEDS_FIX = bool(EXPECTED[1])

# the other tools, as they wrap and unwrap

calls = []
def traced(tag: str) -> Callable[..., Any]:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: Any, kwargs: Any) -> Any:
        calls.append(tag)
        return wrapped(*args, **kwargs)
    return wrapper

def otel_wrap(owner: Any, name: str) -> None:
    wrapt.wrap_function_wrapper(owner, name, traced(name))

def otel_unwrap(owner: Any, name: str) -> None:  # opentelemetry.instrumentation.utils.unwrap, ddtrace's _u
    func = getattr(owner, name)
    setattr(owner, name, func.__wrapped__)

def plain_wrap(owner: Any, name: str) -> Any:
    original = attr(owner, name)
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(*args, **kwargs)
    setattr(owner, name, wrapper)
    return original

TARGETS = [(deepspeed, "initialize"), (lr_schedules.WarmupLR, "__init__"), (DeepSpeedEngineWrapper, "backward"),
           (TorchCheckpointEngine, "save")]


def apply_and_remove_from_two_threads_restore_every_original_and_apply_adds_one_layer() -> None:
    sys.setswitchinterval(1e-6)
    errors = []
    def churn() -> None:
        try:
            for _ in range(300):
                awp.apply()
                awp.remove()
        except Exception as error:
            errors.append(repr(error))
    threads = [threading.Thread(target=churn) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after_remove = restored()
    awp.apply()
    print(json.dumps({"errors": errors, "restored": after_remove, "layers": all_layers(), "said": said,
                      "patched": awp.status()["patched"]}))


def two_threads_applying_at_once_wrap_each_target_once() -> None:
    sys.setswitchinterval(1e-6)
    counts = []
    for _ in range(60):
        awp.remove()
        start = threading.Barrier(2)

        def apply_at_once(start: threading.Barrier = start) -> None:
            start.wait()
            awp.apply()

        threads = [threading.Thread(target=apply_at_once) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        counts.append(max(all_layers().values()))
    print(json.dumps({"max": max(counts), "said": said}))


def remove_takes_out_our_layer_under_a_wrapt_tools_and_apply_adds_one_on_top() -> None:
    for owner, name in TARGETS:
        otel_wrap(owner, name)
    awp.remove()
    out = [ours(owner, name) for owner, name in TARGETS]
    unpatched_lr = first_lr()
    their_calls = calls.count("__init__")
    awp.apply()
    print(json.dumps({"out": out, "unpatched_lr": unpatched_lr, "their_calls": their_calls, "expected": EXPECTED,
                      "after_apply": [ours(owner, name) for owner, name in TARGETS], "on_top": type(attr(
                          lr_schedules.WarmupLR, "__init__")).__module__ == "accelerate_warmup_patch.wrapping",
                      "patched_lr": first_lr(),
                      "calls": calls.count("__init__"), "said": said}))


def a_plain_wrapper_over_ours_keeps_ours_passing_through_and_apply_reuses_it() -> None:
    for owner, name in TARGETS:
        plain_wrap(owner, name)
    awp.remove()
    held = [ours(owner, name) for owner, name in TARGETS]
    removed_lr = first_lr()
    awp.apply()
    print(json.dumps({"held": held, "removed_lr": removed_lr, "needs_fix": NEEDS_FIX, "expected": EXPECTED,
                      "after_apply": [ours(owner, name) for owner, name in TARGETS], "patched_lr": first_lr(),
                      "calls": calls.count("__init__"), "said": said}))


def a_tool_under_ours_keeps_working_after_remove() -> None:
    TOOL = {"otel_wrap": otel_wrap, "plain_wrap": plain_wrap}[sys.argv[2]]
    awp.remove()
    for owner, name in TARGETS:
        TOOL(owner, name)
    awp.apply()
    stacked = [ours(owner, name) for owner, name in TARGETS]
    awp.remove()
    print(json.dumps({"stacked": stacked, "expected": EXPECTED, "after": [ours(owner, name) for owner, name in TARGETS],
                      "theirs_on_top": all(type(attr(o, n)).__module__ != "accelerate_warmup_patch.wrapping"
                                           and hasattr(attr(o, n), "__wrapped__") for o, n in TARGETS),
                      "lr": first_lr(), "calls": calls.count("__init__"), "said": said}))


def a_tool_that_strips_our_layer_is_named_and_the_initialize_net_still_settles() -> None:
    from accelerate_warmup_patch.cli import demo
    awp.remove()
    otel_wrap(lr_schedules.WarmupLR, "__init__")  # a tool wrapped first
    awp.apply()
    otel_unwrap(lr_schedules.WarmupLR, "__init__")  # and un-instruments: setattr to the top's __wrapped__
    lost = awp.status()["lost"]
    model = torch.nn.Linear(4, 4)
    torch.manual_seed(0)
    rows = demo.train_deepspeed(demo.demo_config(), model, list(model.parameters()), 2)
    demo.tear_down()
    awp.remove()
    print(json.dumps({"lost": lost, "needs_fix": NEEDS_FIX, "lrs": [row[0] for row in rows],
                      "newest": demo.reference_lrs(2), "said": said,
                      "left": ours(lr_schedules.WarmupLR, "__init__")}))


globals()[sys.argv[1]]()
