"""``status``: what a process started with this environment would do, never what this command's import did.

``would()`` reads the environment and the installed files, as doctor's activation section does, and
imports neither torch nor deepspeed. ``live()`` starts such a process, lets it import deepspeed and
accelerate, and returns its own ``status()`` (or says that nothing armed it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from . import doctor, releases, settings

RESULT = "AWP-STATUS-RESULT "
# the child: the package is in it only if the .pth or sitecustomize imported it (never this code)
_LIVE = f"""
import importlib, json, sys
imported = {{}}
for name in ("deepspeed", "accelerate.utils.deepspeed"):
    try:
        importlib.import_module(name)
        imported[name] = True
    except Exception as error:
        imported[name] = repr(error)
package = sys.modules.get("accelerate_warmup_patch")
print({RESULT!r} + json.dumps({{"imported": imported, "status": package.status() if package else None}}),
      flush=True)
"""


def would() -> dict[str, Any]:
    """The mode and the arming of a new process of this environment; the table's verdicts from metadata."""
    active = doctor.activation()
    deepspeed = releases.installed("deepspeed")
    armed = bool(active["active_at_start_up"])
    return {
        "source": "a new process of this environment (nothing imported)",
        "armed": armed,
        "mode": active["mode"] if armed or active["mode"] == settings.Mode.OFF else "not armed",
        "through": active["through"],
        "env": active["env"],
        "problem": doctor.env_problem(),
        "by_import": active["by_import"],
        "versions": {"deepspeed": deepspeed, "accelerate": releases.installed("accelerate")},
        "verdicts": {name: releases.verdict(name, deepspeed) for name in releases.scheduler_classes()}
        if deepspeed else {},
    }


def live() -> dict[str, Any]:
    """Start a process with this environment, import deepspeed and accelerate in it, and return what it says."""
    proc = subprocess.run([sys.executable, "-c", _LIVE], env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    line = next((x for x in proc.stdout.splitlines() if x.startswith(RESULT)), None)
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"source": "a new process of this environment, after importing deepspeed", "armed": None,
                "error": f"the process failed (exit {proc.returncode}): {last}"}
    child = json.loads(line[len(RESULT):])
    status = child["status"]
    armed = status is not None and status["mode"] != settings.Mode.OFF
    return {"source": "a new process of this environment, after importing deepspeed", "armed": armed,
            "mode": status["mode"] if status else "not armed", "imported": child["imported"], "status": status}


def print_text(data: dict[str, Any]) -> None:
    if "error" in data:
        print(f"status: {data['error']}")
        return
    print(f"{data['source']}:")
    if data["armed"]:
        through = f", through {', '.join(data['through'])}" if data.get("through") else ""
        print(f"  armed, mode {data['mode']}{through}")
    elif data["mode"] == settings.Mode.OFF:
        print(f"  not armed: {settings.ENV_MODE}=off")
    else:
        print(f"  not armed: runs unpatched unless the script imports accelerate_warmup_patch "
              f"(or set {settings.ENV_MODE}=reset)")
    if data.get("problem"):
        print(f"  problem: {data['problem']}")
    status = data.get("status")
    if status:
        print(f"  applied by: {', '.join(status['applied_by']) or '-'}; wrapped: {len(status['patched'])} "
              f"functions; waiting for: {', '.join(status['waiting_for']) or '-'}")
    for name, imported in (data.get("imported") or {}).items():
        if imported is not True:
            print(f"  {name}: not imported: {imported}")
    verdicts = data.get("verdicts") or (status or {}).get("verdicts") or {}
    versions = data.get("versions") or (status or {}).get("versions") or {}
    if verdicts:
        print(f"  DeepSpeed {versions.get('deepspeed')}: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()))
