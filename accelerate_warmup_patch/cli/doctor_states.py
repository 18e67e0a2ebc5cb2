"""``doctor``'s state (``STATES``) and the one verdict line its report opens with (``decide``): from the release's
number (or what a build's scheduler classes were seen to do), the activation a new process finds and, with
``--config``, the config's scheduler. Asks the upstream changes and ``installed``; derives nothing of them again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import installed, releases, settings, upstream
from . import child, config_facts
from .arming import PTH, env_problem

# Every state doctor can find, in the order they are decided, and whether ``--strict`` fails on it: exactly the
# states where the mode chosen cannot act on an affected job (not armed at start-up, off, a release older than the
# table) or the value is not accepted (docs/doctor.md lists them with their lines). Warn mode acts as chosen, by
# warning: an image built for a roll-out's first step passes its check.
STATES: dict[str, bool] = {
    "bad-value": True,  # ACCELERATE_WARMUP_PATCH holds a value the package does not accept
    "no-deepspeed": False,  # nothing to patch in this environment
    "unsupported": True,  # older than the table: the bug is there and the patch does nothing
    "untested": False,  # newer than the table: assumed to carry every change the patch backports
    "not-affected": False,  # --config: the scheduler never had the bug, or the config names none
    "fixed-upstream": False,  # the release lacks nothing the patch backports
    "affected-active": False,  # the first-step bug, and a new process runs patched
    "affected-not-active": True,
    "backports-active": False,  # the first step is fixed upstream; the patch still backports a later change
    "backports-not-active": True,
    "affected-warn": False,  # warn mode: a new process runs unpatched and names each affected scheduler
    "backports-warn": False,
}
_STEP_NOTE = " (step mode still applies if chosen)"


def _through(active: dict[str, Any]) -> str:
    ways = []
    if any(t.startswith("env var") for t in active["through"]):
        ways.append(f"{settings.ENV_MODE} + the .pth")
    if active["sitecustomize"] and active["mode"] != settings.Mode.OFF:
        ways.append("sitecustomize")
    return " and ".join(ways)


def _activity(active: dict[str, Any]) -> str:
    """The verdict line's second half: whether a new process of this environment (``python FLAGS``) runs patched."""
    where = "new processes" + (f" started as `{active['python']}`" if active["python"] != child.label([]) else "")
    if active["active_at_start_up"] and active["mode"] == settings.Mode.WARN:
        return (f"patch in warn mode in {where} (through {_through(active)}): they run unpatched and warn once per "
                f"affected scheduler; set {settings.ENV_MODE}=reset to fix them")
    if active["active_at_start_up"]:
        return f"patch active in {where} ({active['mode']} mode, through {_through(active)}): fixed"
    if active["mode"] == settings.Mode.OFF:
        return f"patch NOT active in {where}: {settings.ENV_MODE}=off turns it off; set it to reset"
    if active["why_not"] is not None:  # asked of that interpreter: setting the variable would not reach it
        return f"patch NOT active in {where}: {active['why_not']}"
    if active["env"] is not None and active["pth"] is None:
        return (f"patch NOT active in {where}: {settings.ENV_MODE} is set but {PTH} is not installed in "
                "this environment: pip install the package here")
    return f"patch NOT active in {where}: set {settings.ENV_MODE}=reset"


def _mode_note(active: dict[str, Any]) -> str:
    if active["active_at_start_up"] and active["mode"] == settings.Mode.STEP:
        return " in reset mode (step mode, set here, still steps each scheduler once before the first optimizer step)"
    return _STEP_NOTE


def _scope(deepspeed: str, config: dict[str, Any] | None,
           probed: dict[str, Any] | None = None) -> tuple[str, list[str], dict[str, list[str]]]:
    """"not-affected", "affected", "backports" or "fixed-upstream" for a known release, with the affected
    classes' labels and, per backported change still missing, the classes it concerns. ``probed``: what a build's
    scheduler classes were seen to lack (``doctor._probed_build``), which decides instead of its number."""
    seen = probed.get("lacks") if probed is not None else None

    def lacks(key: str, name: str) -> bool:
        return installed.lacks(key, name, deepspeed, seen=seen)

    if config is not None:
        name = config["scheduler"]
        if name is None or upstream.never_affected(name):
            return "not-affected", [], {}
        classes = {name: config["params"]}
    else:
        classes = {name: {} for name in releases.scheduler_classes() if not upstream.never_affected(name)}
    affected: list[str] = []
    backports: dict[str, list[str]] = {}
    for name, params in classes.items():
        fact = releases.start_fact(name, deepspeed)
        if fact is None:
            continue  # no such class on this release (WarmupCosineLR before 0.12.3)
        if lacks(upstream.START, name):
            affected.append(f"{name}, groups 1+" if fact.value is releases.Start.SETS_GROUP_0_ONLY else name)
            continue
        for change in config_facts.candidates(name, params if config else None):
            if lacks(change.key, name):
                backports.setdefault(config_facts.label(change), []).append(name)
    if affected:
        return "affected", affected, backports
    return ("backports" if backports else "fixed-upstream"), [], backports


def decide(versions: dict[str, str | None], active: dict[str, Any],
           config: dict[str, Any] | None = None, probed: dict[str, Any] | None = None) -> tuple[str, str]:
    """The state and its one verdict line."""
    deepspeed = versions["deepspeed"]
    raw = os.environ.get(settings.ENV_MODE, "")
    if env_problem() is not None:
        return "bad-value", (f"{settings.ENV_MODE}={raw!r} is NOT ACCEPTED - a new process warns and patches "
                             f"nothing: set one of {settings.ACCEPTED}")
    if deepspeed is None:
        return "no-deepspeed", ("DeepSpeed is not installed in this environment: nothing to patch (run doctor in "
                                "the environment the training job runs in)")
    level = releases.deepspeed_support(deepspeed)
    if level is releases.Support.UNSUPPORTED:
        return "unsupported", (f"DeepSpeed {deepspeed}: UNSUPPORTED (older than {releases.DEEPSPEED_FLOOR}) - "
                               f"affected, and the patch does nothing on it: upgrade DeepSpeed "
                               f"({upstream.first_release(upstream.START)} fixes the first step, "
                               f"{upstream.fixed_release()} every change the patch backports)")
    if level is releases.Support.UNTESTED:
        return "untested", (f"DeepSpeed {deepspeed}: UNTESTED (newer than {releases.NEWEST_DEEPSPEED}) - assumed "
                            f"fixed upstream, the patch changes nothing{_STEP_NOTE}")
    subject = f"DeepSpeed {deepspeed}" + (f", {Path(config['path']).name}" if config else "")
    kind, affected, backports = _scope(deepspeed, config, probed)
    active_now = active["active_at_start_up"]
    if kind == "not-affected":
        name = config["scheduler"] if config else None
        why = (f"{name} sets the lr when built, on every release" if name else
               "no DeepSpeed scheduler in the config; a WarmupLR, WarmupDecayLR or WarmupCosineLR built in code "
               "would be, the HF Trainer's own lr_scheduler_type is not")
        unclaimed = upstream.unclaimed_for(name, deepspeed, config.get("params") or {}) if name and config else ()
        if unclaimed:  # its start is not the bug, but these later steps run as this release runs them
            why += "; but " + "; ".join(f"DeepSpeed {deepspeed} lacks {change.key.replace('_', ' ')} ({change.pr}), "
                                        f"which the patch does not backport: those steps run as DeepSpeed {deepspeed} "
                                        f"runs them, not as {releases.BEHAVIOR_REFERENCE}" for change in unclaimed)
        return kind, f"{subject}: not affected ({why}) - the patch changes nothing{_mode_note(active)}"
    if kind == "fixed-upstream":
        return kind, f"{subject}: fixed upstream, the patch changes nothing{_mode_note(active)}"
    by_classes: dict[tuple[str, ...], list[str]] = {}  # changes that concern the same classes, said once
    for change, names in backports.items():
        by_classes.setdefault(tuple(names), []).append(change)
    what = "; ".join(f"{', '.join(changes)} to {', '.join(names)}" for names, changes in by_classes.items())
    activity = "not-active" if not active_now else "warn" if active["mode"] == settings.Mode.WARN else "active"
    if kind == "affected":
        return f"affected-{activity}", f"{subject}: AFFECTED ({', '.join(affected)}) - {_activity(active)}"
    state = f"backports-{activity}"
    return state, f"{subject}: fixed upstream; the patch still backports {what} - {_activity(active)}"
