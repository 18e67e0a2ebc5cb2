"""Imports of deepspeed and accelerate in two threads and the API in a third, one of them held inside
the package's _sweep: ``import_race.py WHERE CALLS`` (tests/test_hooks.py)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import accelerate_warmup_patch as awp
from accelerate_warmup_patch import wrapping

API_LOCK = wrapping.lock  # the seam: which thread holds apply()'s lock
WHERE, CALLS = sys.argv[1], sys.argv[2].split(",")
held, release, go = threading.Event(), threading.Event(), threading.Event()
imports_left, count_lock = [2], threading.Lock()
errors, warnings, held_in = [], [], []

class Collect(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            warnings.append(record.getMessage())

logging.getLogger("accelerate_warmup_patch").addHandler(Collect())

def sweep_caller(frame: FrameType | None) -> str | None:
    while frame is not None and frame.f_code.co_name in ("<listcomp>", "<genexpr>"):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "_sweep":
        return None
    caller, names = frame.f_back, []
    assert caller is not None
    if caller.f_code.co_name == "exec_module":
        return "loader:" + str(caller.f_locals["module"].__name__)
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "arming" if caller.f_code.co_name == "apply" and "_arm" in names else None

ready = awp._ready

def ready_after_a_hold(name: str) -> Any:
    if sweep_caller(sys._getframe(1)) == WHERE and not held.is_set():
        held_in.append(threading.current_thread().name)
        held.set()
        go.set()
        # Inside apply() this thread holds the API's lock: C's calls wait for it by design (each call runs as if
        # alone), so the hold lets C start and goes on instead of waiting for a release that cannot come.
        if not API_LOCK._is_owned():  # type: ignore[attr-defined]
            release.wait(120)
    return ready(name)

awp._ready = ready_after_a_hold

def import_ended() -> None:
    with count_lock:
        imports_left[0] -= 1
        if not imports_left[0]:
            go.set()  # C must not wait for a hold that will not come

def importer(name: str) -> Callable[[], None]:
    def run() -> None:
        try:
            __import__(name)
        except BaseException as error:
            errors.append(f"import {name}: {error!r}")
        finally:
            import_ended()
    return run

def api_user() -> None:
    go.wait(120)
    for call in CALLS:
        getattr(awp, call)()
    release.set()

threads = [threading.Thread(target=importer("deepspeed"), name="A", daemon=True),
           threading.Thread(target=importer("accelerate"), name="B", daemon=True),
           threading.Thread(target=api_user, name="C", daemon=True)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(300)
if any(thread.is_alive() for thread in threads):
    print(json.dumps("deadlock"), flush=True)
    os._exit(0)

def facts() -> list[bool]:
    import deepspeed
    status = awp.status()
    return ["deepspeed.initialize" in status["patched"], hasattr(deepspeed.initialize, "__wrapped__"),
            "deepspeed" in status["waiting_for"]]

before = facts()
awp.apply()
print(json.dumps({"held_in": held_in, "errors": errors, "warnings": warnings, "before": before,
                  "after_apply": facts()}))
