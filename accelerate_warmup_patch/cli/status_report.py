"""``status``: what a process started with this environment would do, never what this command's import did.

``would()`` asks child interpreters of this environment (``python``, ``-I``, ``-E``, ``-s``, ``-S`` and the
job's own flags) whether the switch armed them (``arming.py``, as doctor's activation section does), and asks one
more child what the installed build's scheduler classes do (``probe_build.py``, seconds: a number is not the code).
``live()`` starts such a process, lets it import deepspeed and accelerate, and returns its own ``status()`` (or says
that nothing armed it).
"""

from __future__ import annotations

import os
from typing import Any

from .. import releases, settings, upstream
from . import arming, child, job_python, probe_build, probe_cache

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
print({child.RESULT!r} + json.dumps({{"imported": imported, "status": package.status() if package else None}}),
      flush=True)
"""


def would(flags: list[str] | None = None, cache: bool = True) -> dict[str, Any]:
    """The mode and the arming of a new process of this environment (``python FLAGS``, asked of such an
    interpreter, as are the other interpreters); the verdicts of what the build's classes do (the table's where the
    probe failed; the answer kept for this very code where there is one, unless not ``cache``)."""
    active = arming.activation(flags)
    deepspeed = releases.installed("deepspeed")
    armed = bool(active["active_at_start_up"])
    probed = probe_build.installed(deepspeed, cache)
    verdicts = upstream.verdicts(deepspeed) if deepspeed else {}
    return {
        "source": "a new process of this environment (nothing imported)",
        "python": active["python"],
        "interpreter": job_python.describe(),
        "armed": armed,
        "mode": active["mode"],
        "why_not": active["why_not"],
        "through": active["through"],
        "env": active["env"],
        "problem": arming.env_problem(),
        "by_import": active["by_import"],
        "interpreters": active["interpreters"],
        "probed_with": active["probed_with"],
        "reach": arming.reach_line(active),
        "versions": {"deepspeed": deepspeed, "accelerate": releases.installed("accelerate")},
        "verdicts": probed["verdicts"] if probed is not None and "verdicts" in probed else verdicts,
        "probed": probed,
    }


def live(flags: list[str] | None = None) -> dict[str, Any]:
    """Start ``python FLAGS`` with this environment, import deepspeed and accelerate in it, return what it says."""
    flags = list(flags or [])
    doing = f"importing deepspeed and accelerate in a new `{child.label(flags)}` process"
    answer = child.answer(child.start([*flags, "-c", _LIVE], dict(os.environ)), doing=doing)
    source = "a new process of this environment, after importing deepspeed"
    if "error" in answer:
        return {"source": source, "python": child.label(flags), "armed": None, "error": answer["error"]}
    status = answer["status"]
    armed = status is not None and status["mode"] != settings.Mode.OFF
    versions = _versions()
    if status is not None and status.get("probed"):  # what that process saw its build do, not its number
        versions["verdicts"] = status["verdicts"]
    return {"source": source, "python": child.label(flags), "interpreter": job_python.describe(), "armed": armed,
            "mode": status["mode"] if status else "not armed", "imported": answer["imported"], "status": status,
            **versions}


def _versions() -> dict[str, Any]:
    """The installed versions and the table's verdicts, as ``would()`` gives them: printed armed or not."""
    deepspeed = releases.installed("deepspeed")
    return {"versions": {"deepspeed": deepspeed, "accelerate": releases.installed("accelerate")},
            "verdicts": upstream.verdicts(deepspeed) if deepspeed else {}}


def print_text(data: dict[str, Any]) -> None:
    if "error" in data:
        print(f"status: {data['error']}")
        return
    job = "" if data["python"] == child.label([]) else f"{data['python']}, "
    print(f"{job}{data['source']}:")
    if data.get("interpreter"):
        print(f"  Python: {job_python.line(data['interpreter'])}")
    if not data["armed"] and data.get("why_not") and data["mode"] != settings.Mode.OFF:
        print(f"  {data['python']}: not armed: {data['why_not']}")
    elif data["armed"]:
        through = f", through {', '.join(data['through'])}" if data.get("through") else ""
        print(f"  armed, mode {data['mode']}{through}")
    elif data["mode"] == settings.Mode.OFF:
        print(f"  not armed: {settings.ENV_MODE}=off")
    elif data.get("env", os.environ.get(settings.ENV_MODE, "")):  # set, and still nothing armed it
        print(f"  not armed: {settings.ENV_MODE} is set, but nothing imported the package at start-up: import "
              "accelerate_warmup_patch first in the script")
    else:
        print(f"  not armed: runs unpatched unless the script imports accelerate_warmup_patch "
              f"(or set {settings.ENV_MODE}=reset)")
    if data.get("reach"):
        print(f"  {data['reach']}")
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
    probed = data.get("probed") or (status or {}).get("probed")
    deepspeed = versions.get("deepspeed")
    if deepspeed and (not probed or "error" in probed) and releases.deepspeed_support(
            deepspeed) is not releases.Support.UNSUPPORTED:
        number = releases.release_number(deepspeed)
        why = f"probing its scheduler classes failed ({probed['error']})" if probed else "nothing probed it"
        print(f"  DeepSpeed {deepspeed}: {why}: these verdicts are the table's for {number}")
    elif probed and deepspeed and releases.not_the_release(deepspeed) is not None:
        print(f"  DeepSpeed {deepspeed} is {releases.not_the_release(deepspeed)}: these verdicts are what its "
              "scheduler classes were probed to do")
    if probed and "answered" in probed:
        print(f"  the build's classes: {probe_cache.said(probed)}")
    if probed and probed.get("differs_from_table"):
        differs = "; ".join(probed["differs_from_table"])
        print(f"  probed: its scheduler classes do otherwise than the table says of its number: {differs}")
