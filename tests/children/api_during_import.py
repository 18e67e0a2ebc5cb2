"""Thread A is held inside the finder's find_spec for deepspeed until thread B, using the API for the
first time, has begun importing api.py (tests/test_hooks.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
from types import FrameType
from typing import Any

import accelerate_warmup_patch as awp

a_in_find_spec, b_importing_api = threading.Event(), threading.Event()

def trace_a(frame: FrameType, event: str, arg: Any) -> None:
    if (event == "call" and frame.f_code.co_name == "find_spec" and frame.f_locals.get("fullname") == "deepspeed"
            and frame.f_globals.get("__name__", "").startswith("accelerate_warmup_patch")):
        a_in_find_spec.set()
        b_importing_api.wait(60)

def trace_b(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call" and frame.f_code.co_name == "_find_and_load" and \
            frame.f_locals.get("name") == "accelerate_warmup_patch.api":
        b_importing_api.set()

def a() -> None:
    sys.settrace(trace_a)
    import deepspeed  # noqa: F401  (the import thread A is held in)

def b() -> None:
    a_in_find_spec.wait(60)
    sys.settrace(trace_b)
    awp.status()

threads = [threading.Thread(target=a, daemon=True), threading.Thread(target=b, daemon=True)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(300)
if any(thread.is_alive() for thread in threads):
    print(json.dumps("deadlock"), flush=True)
    os._exit(0)
import deepspeed

print(json.dumps([a_in_find_spec.is_set(), b_importing_api.is_set(), hasattr(deepspeed.initialize, "__wrapped__"),
                  awp.status()["patched"].count("deepspeed.initialize")]))
