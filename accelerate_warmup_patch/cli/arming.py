"""Whether a new process of this environment is armed at start-up, through what, and which interpreters the switch
reaches (``python``, ``-I``, ``-E``, ``-s``, ``-S`` and the job's own flags), each asked in a child interpreter
(a few tenths of a second, started at once): ``doctor``'s activation section and ``status``'s answer. Reads
package metadata and files; imports neither torch, deepspeed nor accelerate.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
from pathlib import Path
from typing import Any

from .. import settings
from . import child

PTH = "accelerate_warmup_patch.pth"


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return dirs


def pth_installed() -> str | None:
    for folder in _site_dirs():
        if (Path(folder) / PTH).is_file():
            return str(Path(folder) / PTH)
    return None


def sitecustomize_imports_us() -> str | None:
    spec = importlib.util.find_spec("sitecustomize")
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        return None
    return spec.origin if "accelerate_warmup_patch" in Path(spec.origin).read_text(errors="replace") else None


def env_problem() -> str | None:
    """What is wrong with ACCELERATE_WARMUP_PATCH's value, in words, or None when nothing is."""
    if settings.env_setting()[1]:
        return None
    raw = os.environ[settings.ENV_MODE]
    return (f"{settings.ENV_MODE}={raw!r} is not one of: {settings.ACCEPTED}; a new process warns and patches "
            f"nothing (with {settings.ENV_STRICT} set, it stops at start-up): set one of these")


# the interpreters every answer covers; the job's own flags (--python-flags) are added to them
INTERPRETERS: tuple[tuple[str, ...], ...] = ((), ("-I",), ("-E",), ("-s",), ("-S",))
# the child: only a .pth or a sitecustomize has imported the package before its first line (never this code)
_ASK = f"""
import json, os, sys
package = sys.modules.get("accelerate_warmup_patch")
status = package.status() if package else None
site_ran, folders, location = "site" in sys.modules, [], None
if site_ran:
    import site
    folders = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
import importlib.util
spec = importlib.util.find_spec("accelerate_warmup_patch") if package is None else package.__spec__
if spec is not None and spec.origin:
    location = os.path.dirname(os.path.dirname(spec.origin))
print({child.RESULT!r} + json.dumps({{"status": status, "site": site_ran, "site_folders": folders,
      "location": location}}), flush=True)
"""


def ask(flags: list[str] | tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``python FLAGS`` in ``env`` asking it what armed it; ``child.answer`` reads its facts."""
    return child.start([*flags, "-c", _ASK], env)


def _reached(answer: dict[str, Any]) -> dict[str, Any]:
    """One interpreter's entry: whether the value it was started with armed it (``reached``), in which mode,
    through what, and why not, from the child's facts."""
    if "error" in answer:
        return {"reached": False, "mode": None, "through": [], "why": answer["error"]}
    status = answer["status"]
    armed = status is not None and status["mode"] != settings.Mode.OFF
    entry = {"reached": armed, "mode": status["mode"] if status else None,
             "through": status["applied_by"] if status else [], "why": None}
    if armed or status is not None:
        return entry
    explicit = "import accelerate_warmup_patch first in the script"
    custom = "add a sitecustomize.py there that calls accelerate_warmup_patch.arm_from_environment()"
    folder = answer["location"]
    if not answer["site"]:
        entry["why"] = f"site.py does not run there, so no .pth and no sitecustomize is read: {explicit}"
    elif folder is None:
        entry["why"] = ("accelerate_warmup_patch cannot be imported there (not on that interpreter's path): install "
                        "it into that interpreter's site-packages")
    elif not any((Path(f) / PTH).is_file() for f in answer["site_folders"]) and (Path(folder) / PTH).is_file():
        entry["why"] = (f"its {PTH} in {folder} is not read: {folder} is not a site folder (a pip --target folder "
                        f"on PYTHONPATH; Python reads .pth files in site-packages only): {explicit}, or {custom}")
    else:
        entry["why"] = f"no {PTH} in that interpreter's site folders was read: {explicit}, or {custom}"
    return entry


def interpreters(flags: list[str]) -> tuple[dict[str, dict[str, Any]], str]:
    """Which interpreters the switch reaches, asked of each (started at once, in parallel), and the value of
    ACCELERATE_WARMUP_PATCH they were started with: the environment's, or reset where it is unset or off."""
    raw = os.environ.get(settings.ENV_MODE, "")
    value = raw if raw.strip() and settings.env_setting()[0] != settings.Mode.OFF else settings.Mode.RESET
    env = {**os.environ, settings.ENV_MODE: value}
    wanted = list(dict.fromkeys([*INTERPRETERS, tuple(flags)]))
    started = [(child.label(f), ask(f, env)) for f in wanted]
    return {name: _reached(child.answer(proc)) for name, proc in started}, value


def activation(flags: list[str] | None = None) -> dict[str, Any]:
    """Through what the patch would be active in a new process of this environment (``python FLAGS``, asked of
    such an interpreter), in which mode, and which other interpreters the switch reaches."""
    flags = list(flags or [])
    raw = os.environ.get(settings.ENV_MODE)
    mode = settings.env_setting()[0]
    pth, custom = pth_installed(), sitecustomize_imports_us()
    table, asked_with = interpreters(flags)
    job = child.label(flags)
    if asked_with == raw:
        seen = table[job]
    elif custom:  # the table is what reset would do; ask what this environment does
        seen = _reached(child.answer(ask(flags, dict(os.environ))))
    else:  # unset, or off: the .pth line imports nothing, or arms nothing
        seen = {"reached": False, "mode": None, "through": [], "why": None}
    through = []
    if seen["reached"] and ".pth" in seen["through"]:
        through.append(f"env var {settings.ENV_MODE}={raw!r} + {PTH}")
    if seen["reached"] and "sitecustomize" in seen["through"]:
        through.append(f"sitecustomize ({custom or 'sitecustomize'})")
    return {
        "env": raw, "mode": seen["mode"] if seen["reached"] else (settings.Mode.OFF if mode == settings.Mode.OFF
                                                                 else "not armed"),
        "pth": pth, "sitecustomize": custom, "active_at_start_up": bool(seen["reached"]), "through": through,
        "by_import": _by_import(mode),
        "python": job, "why_not": table[job]["why"], "interpreters": table, "probed_with": asked_with,
    }


def _by_import(mode: str | None) -> str:
    """What ``import accelerate_warmup_patch`` first in a script does here: apply() in the environment's mode."""
    if mode == settings.Mode.OFF:
        return f"arms nothing ({settings.ENV_MODE}=off wins)"
    return f"arms it in {mode or settings.DEFAULT} mode"


def reach_line(active: dict[str, Any]) -> str:
    """Which interpreters the switch reaches and, for each of the others, why not and what to do; said of the
    value they were asked with, which is the environment's own or, where it arms nothing, reset."""
    table = active["interpreters"]
    yes = [name for name, entry in table.items() if entry["reached"]]
    no = [f"{name} ({entry['why']})" for name, entry in table.items() if not entry["reached"]]
    subject = "the switch reaches" if active["probed_with"] == active["env"] else \
        f"{settings.ENV_MODE}={active['probed_with']} would reach"
    return f"{subject}: {', '.join(yes) or 'no interpreter'}" + (f"; NOT {'; NOT '.join(no)}" if no else "")
