"""``doctor``: what is installed, what the guard table says of it, and whether the patch would run.

Reads package metadata and files only: it imports neither torch, deepspeed nor accelerate, so it
is fast enough for an image build step (``doctor --strict``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import sys
from pathlib import Path
from typing import Any

from . import releases, settings

PTH = "accelerate_warmup_patch.pth"
SCHEMA = 1  # doctor --json's layout (docs/doctor.md); a change that removes or renames a key bumps it


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


def env_mode() -> str | None:
    """The mode a new process takes from ACCELERATE_WARMUP_PATCH (None when unset or blank), read without
    the warning or the strict-mode error that settings.env_mode() gives a value it does not accept: a new
    process falls back to the default then, and ``env_problem`` says so."""
    raw = os.environ.get(settings.ENV_MODE, "")
    if not raw.strip():
        return None
    return settings.lookup(raw) or settings.DEFAULT


def env_problem() -> str | None:
    """What is wrong with ACCELERATE_WARMUP_PATCH's value, in words, or None when nothing is."""
    raw = os.environ.get(settings.ENV_MODE, "")
    if not raw.strip() or settings.lookup(raw) is not None:
        return None
    return (f"{settings.ENV_MODE}={raw!r} is not one of: {settings.ACCEPTED}; a new process warns and runs in "
            f"{settings.DEFAULT} mode (with {settings.ENV_STRICT} set, it stops at start-up): set one of these")


def activation() -> dict[str, Any]:
    """Through what the patch would be active in a new process of this environment, and in which mode."""
    raw = os.environ.get(settings.ENV_MODE)
    mode = env_mode()
    pth, custom = pth_installed(), sitecustomize_imports_us()
    through = []
    if mode not in (None, settings.Mode.OFF) and pth:
        through.append(f"env var {settings.ENV_MODE}={raw!r} + {PTH}")
    if custom and mode != settings.Mode.OFF:
        through.append(f"sitecustomize ({custom})")
    return {
        "env": raw, "mode": mode or (settings.DEFAULT if custom else "not armed"),
        "pth": pth, "sitecustomize": custom, "active_at_start_up": bool(through), "through": through,
        "by_import": "off (the env var wins)" if mode == settings.Mode.OFF else "yes: import accelerate_warmup_patch",
    }


def multinode(deepspeed: str | None, active: dict[str, Any]) -> dict[str, Any]:
    """Whether ``deepspeed --hostfile`` would carry the switch to every node, per runner (the guard table's)."""
    if deepspeed is None:
        return {"carries": False, "why": "deepspeed is not installed", "runners": {}}
    level = releases.deepspeed_support(deepspeed)
    facts = releases.runner_facts(deepspeed) if level is not releases.Support.UNSUPPORTED else ()
    runners = {f.launcher: f.syntax if f.carries else f"nothing ({f.source})" for f in facts}
    carries = False
    if level is releases.Support.UNSUPPORTED:
        why = f"DeepSpeed {deepspeed} is older than {releases.DEEPSPEED_FLOOR}: nothing is patched or exported"
    elif active["env"] is not None and env_mode() == settings.Mode.OFF and active["pth"]:
        carries = True  # off patches nothing but the launcher, so that the kill switch reaches every node
        why = (f"{settings.ENV_MODE}=off: nothing is patched, but the deepspeed launcher exports off to every node "
               f"(a line in .deepspeed_env wins over the launching shell)")
    elif not active["active_at_start_up"] or active["env"] is None:
        why = (f"the launching shell must have {settings.ENV_MODE} set (with the .pth) for the launcher to export "
               "it; sitecustomize alone arms the patch but leaves the nodes to their own environment")
    else:
        carries = True
        why = (f"the deepspeed launcher exports {settings.ENV_MODE} (and {settings.ENV_STRICT} when set) with the "
               "launching shell's values")
        if level is releases.Support.UNTESTED:
            why += f"; DeepSpeed {deepspeed} is untested: the runners of {releases.NEWEST_DEEPSPEED} are assumed"
    return {"carries": carries, "why": why, "runners": runners}


def report() -> dict[str, Any]:
    versions = {name: releases.installed(name) for name in ("torch", "deepspeed", "accelerate", "transformers")}
    deepspeed, accelerate = versions["deepspeed"], versions["accelerate"]
    problems = []
    if deepspeed is None:
        problems.append("deepspeed is not installed")
    else:
        level = releases.deepspeed_support(deepspeed)
        if level is not releases.Support.KNOWN:
            problems.append(f"DeepSpeed {deepspeed} is {level.value} (table: {releases.DEEPSPEED_FLOOR} to "
                            f"{releases.NEWEST_DEEPSPEED})")
    if accelerate is not None and releases.accelerate_support(accelerate) is not releases.Support.KNOWN:
        problems.append(f"accelerate {accelerate} is {releases.accelerate_support(accelerate).value} (table: "
                        f"{releases.ACCELERATE_FLOOR} to {releases.NEWEST_ACCELERATE})")
    active = activation()
    bad_value = env_problem()
    if bad_value is not None:
        problems.append(bad_value)
    if not active["active_at_start_up"]:
        problems.append(f"the patch would not be active at start-up (set {settings.ENV_MODE}=reset)")
    verdicts = {name: releases.verdict(name, deepspeed) for name in releases.scheduler_classes()} if deepspeed else {}
    return {"schema": SCHEMA, "versions": versions, "verdicts": verdicts, "activation": active,
            "multinode": multinode(deepspeed, active), "problems": problems,
            "package": releases.installed("accelerate-warmup-patch"), "python": sys.version.split()[0]}


def main(as_json: bool, strict: bool) -> int:
    data = report()
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print(data)
    return 1 if strict and data["problems"] else 0


def _print(data: dict[str, Any]) -> None:
    print(f"accelerate-warmup-patch {data['package']} on Python {data['python']}")
    for name, version in data["versions"].items():
        print(f"  {name:13s} {version or 'not installed'}")
    if data["verdicts"]:
        print(f"DeepSpeed {data['versions']['deepspeed']}, per scheduler class:")
        for name, verdict in data["verdicts"].items():
            print(f"  {name:15s} {verdict}")
    active = data["activation"]
    print(f"Activation: mode {active['mode']}; at start-up: "
          f"{', '.join(active['through']) if active['through'] else 'no'}; by import: {active['by_import']}")
    nodes = data["multinode"]
    print(f"Multi-node (deepspeed --hostfile): {'carried' if nodes['carries'] else 'not carried'}: {nodes['why']}")
    if nodes["runners"]:
        print("  runner   what it writes for each exported variable")
    for launcher, how in nodes["runners"].items():
        print(f"  {launcher:8s} {how}")
    for problem in data["problems"]:
        print(f"  problem: {problem}")
    if not data["problems"]:
        print("OK")
