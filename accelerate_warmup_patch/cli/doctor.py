"""``doctor``: what is installed, what the guard table says of it, and whether the patch would run.

Reads package metadata and files, and asks child interpreters whether the switch arms them (a few tenths
of a second): it imports neither torch, deepspeed nor accelerate, so it
is fast enough for an image build step (``doctor --strict``). ``--config`` computes the lrs of a user's
scheduler in a child interpreter (``doctor_config.py``). Opens with one verdict line: the state (``STATES``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

from .. import releases, settings, upstream
from . import child, config_facts, doctor_config, job_python, probe_build

PTH = "accelerate_warmup_patch.pth"
SCHEMA = 3  # doctor --json's layout (docs/doctor.md); a change that removes or renames a key bumps it


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
_PROBE = f"""
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


def probe(flags: list[str] | tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``python FLAGS`` in ``env`` asking it what armed it; ``child.answer`` reads its facts."""
    return child.start([*flags, "-c", _PROBE], env)


def _reached(probe: dict[str, Any]) -> dict[str, Any]:
    """One interpreter's entry: whether the value it was started with armed it (``reached``), in which mode,
    through what, and why not, from the child's facts."""
    if "error" in probe:
        return {"reached": False, "mode": None, "through": [], "why": probe["error"]}
    status = probe["status"]
    armed = status is not None and status["mode"] != settings.Mode.OFF
    entry = {"reached": armed, "mode": status["mode"] if status else None,
             "through": status["applied_by"] if status else [], "why": None}
    if armed or status is not None:
        return entry
    explicit = "import accelerate_warmup_patch first in the script"
    custom = "add a sitecustomize.py there that calls accelerate_warmup_patch.arm_from_environment()"
    folder = probe["location"]
    if not probe["site"]:
        entry["why"] = f"site.py does not run there, so no .pth and no sitecustomize is read: {explicit}"
    elif folder is None:
        entry["why"] = ("accelerate_warmup_patch cannot be imported there (not on that interpreter's path): install "
                        "it into that interpreter's site-packages")
    elif not any((Path(f) / PTH).is_file() for f in probe["site_folders"]) and (Path(folder) / PTH).is_file():
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
    started = [(child.label(f), probe(f, env)) for f in wanted]
    return {name: _reached(child.answer(proc)) for name, proc in started}, value


def activation(flags: list[str] | None = None) -> dict[str, Any]:
    """Through what the patch would be active in a new process of this environment (``python FLAGS``, asked of
    such an interpreter), in which mode, and which other interpreters the switch reaches."""
    flags = list(flags or [])
    raw = os.environ.get(settings.ENV_MODE)
    mode = settings.env_setting()[0]
    pth, custom = pth_installed(), sitecustomize_imports_us()
    table, probed_with = interpreters(flags)
    job = child.label(flags)
    if probed_with == raw:
        seen = table[job]
    elif custom:  # the table is what reset would do; ask what this environment does
        seen = _reached(child.answer(probe(flags, dict(os.environ))))
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
        "python": job, "why_not": table[job]["why"], "interpreters": table, "probed_with": probed_with,
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


def multinode(deepspeed: str | None, active: dict[str, Any]) -> dict[str, Any]:
    """Whether ``deepspeed --hostfile`` would carry the switch to every node, per runner (the guard table's)."""
    if deepspeed is None:
        return {"carries": False, "why": "deepspeed is not installed", "runners": {}}
    level = releases.deepspeed_support(deepspeed)
    facts = releases.runner_facts(deepspeed) if level is not releases.Support.UNSUPPORTED else ()
    runners = {f.value.launcher: f.value.syntax if f.value.carries else f"nothing ({f.source})" for f in facts}
    carries = False
    if level is releases.Support.UNSUPPORTED:
        why = f"DeepSpeed {deepspeed} is older than {releases.DEEPSPEED_FLOOR}: nothing is patched or exported"
    elif active["env"] is not None and settings.env_setting()[0] == settings.Mode.OFF and active["pth"]:
        carries = True  # off patches nothing but the launcher, so that the kill switch reaches every node
        why = (f"{settings.ENV_MODE}=off: nothing is patched, but the deepspeed launcher exports off to every node "
               f"(a line in .deepspeed_env wins over the launching shell)")
    elif not active["active_at_start_up"] or active["env"] is None:
        why = (f"the launching shell must have {settings.ENV_MODE} set (with the .pth) for the launcher to export "
               "it; sitecustomize alone arms the patch but leaves the nodes to their own environment")
    else:
        carries = True
        why = (f"the deepspeed launcher exports {settings.ENV_MODE} (and {settings.ENV_STRICT} and "
               f"{settings.ENV_RECORD} when set) with the launching shell's values")
        if level is releases.Support.UNTESTED:
            why += f"; DeepSpeed {deepspeed} is untested: the runners of {releases.NEWEST_DEEPSPEED} are assumed"
    return {"carries": carries, "why": why, "runners": runners}


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
    scheduler classes were seen to lack (``_probed_build``), which decides instead of its number."""
    lacked = set(probed["lacks"]) if probed is not None and "lacks" in probed else None

    def lacks(key: str, name: str) -> bool:
        if lacked is None:
            return upstream.lacks(key, name, deepspeed)
        owner = upstream.carrier(key, name)
        return owner is not None and f"{owner} {key}" in lacked

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
        for change in config_facts.differences(name, deepspeed, params if config else None):
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


def config_section(path: str, lr: float | None, group_lrs: list[float] | None, sets: dict[str, float],
                   deepspeed: str | None, run: bool = True) -> dict[str, Any]:
    """``--config``: the scheduler it names, its "auto" values explained, and the lrs of steps 0..3."""
    loaded = doctor_config.load(path)
    planned = doctor_config.plan(loaded, lr, group_lrs, sets)
    if planned.scheduler is not None and planned.scheduler not in releases.scheduler_classes():
        raise doctor_config.ConfigError(f"{path}: scheduler type {planned.scheduler!r} is not one of DeepSpeed's: "
                                 f"{', '.join(releases.scheduler_classes())}")
    section: dict[str, Any] = {
        "path": path, "via": loaded.via or None, "scheduler": planned.scheduler, "params": planned.params,
        "lr": planned.lr, "group_lrs": planned.group_lrs, "auto": planned.autos, "missing": planned.missing,
        "lrs": None, "lrs_not_computed": None, "warmup_type": None,
        "warnings": config_facts.refused_later(planned.scheduler, planned.params)}
    if planned.scheduler is None:
        section["lrs_not_computed"] = "no DeepSpeed scheduler: the lrs are the optimizer's and your scheduler's"
    elif deepspeed is None:
        section["lrs_not_computed"] = "DeepSpeed is not installed"
    elif releases.deepspeed_support(deepspeed) is releases.Support.UNSUPPORTED or releases.start_fact(
            planned.scheduler, deepspeed) is None:
        section["lrs_not_computed"] = f"DeepSpeed {deepspeed} has no {planned.scheduler} the table knows"
    elif planned.missing:
        section["lrs_not_computed"] = f"give {' and '.join(planned.missing)} (see the \"auto\" values above)"
    elif run:
        assert planned.lr is not None
        lrs = doctor_config.compute(planned.scheduler, planned.params, planned.lr, planned.group_lrs)
        if "refused" in lrs:
            section["lrs_not_computed"] = (f"DeepSpeed {lrs['deepspeed']}'s {planned.scheduler} refuses these params: "
                                           f"{lrs['refused']}")
        else:
            if lrs.get("default_warmup_type") is not None:
                section["warmup_type"] = {"used": lrs.pop("warmup_type"), "given": planned.params.get("warmup_type"),
                                          "default": lrs.pop("default_warmup_type")}
            section["lrs"] = {k: v for k, v in lrs.items() if k not in ("warmup_type", "default_warmup_type")}
    return section


def report(config_args: dict[str, Any] | None = None, python_flags: list[str] | None = None) -> dict[str, Any]:
    versions = {name: releases.installed(name) for name in ("torch", "deepspeed", "accelerate", "transformers")}
    deepspeed, accelerate = versions["deepspeed"], versions["accelerate"]
    active = activation(python_flags)
    section = config_section(deepspeed=deepspeed, **config_args) if config_args else None
    notes: list[str] = []
    probed = _probed_build(deepspeed, notes)
    state, line = decide(versions, active, section, probed)
    problems = []
    bad_value = env_problem()
    if bad_value is not None:
        problems.append(bad_value)
    if STATES[state] and state != "bad-value":
        problems.append(line)
    if accelerate is not None and releases.accelerate_support(accelerate) is not releases.Support.KNOWN:
        notes.append(f"accelerate {accelerate} is {releases.accelerate_support(accelerate).value} (table: "
                     f"{releases.ACCELERATE_FLOOR} to {releases.NEWEST_ACCELERATE}): the schedulers are still fixed "
                     "where they are built")
    if state == "untested":
        notes.append(f"DeepSpeed {deepspeed} is newer than the table: `nox -s new_release -- {deepspeed}` in a clone "
                     "checks it")
    verdicts = upstream.verdicts(deepspeed) if deepspeed else {}
    if probed is not None and "verdicts" in probed:
        verdicts = probed["verdicts"]
    data = {"schema": SCHEMA, "state": state, "verdict": line, "strict_fails": STATES[state] or bool(problems),
            "versions": versions, "verdicts": verdicts, "activation": active,
            "multinode": multinode(deepspeed, active), "config": section, "problems": problems, "notes": notes,
            "package": releases.installed("accelerate-warmup-patch"), "python": sys.version.split()[0],
            "interpreter": job_python.describe()}  # a key added within schema 3: which Python answered
    if probed is not None:  # a build, not a release: a key added within schema 3
        data["probed"] = probed
    return data


def _probed_build(deepspeed: str | None, notes: list[str]) -> dict[str, Any] | None:
    """On a build that is not a release: what its scheduler classes do (probe_build.py), with a note on it; None on a
    release, whose number the table answers for."""
    what = releases.not_the_release(deepspeed) if deepspeed is not None else None
    if deepspeed is None or what is None:
        return None
    number = ".".join(map(str, releases.parse(deepspeed)))
    probed = probe_build.probe(deepspeed)
    if "error" in probed:
        notes.append(f"DeepSpeed {deepspeed} is {what}, and probing its scheduler classes "
                     f"failed ({probed['error']}): the verdicts are the table's for {number}")
        return probed
    differs = "; ".join(probed["differs_from_table"]) or "nothing"
    notes.append(f"DeepSpeed {deepspeed} is {what}"
                 + (f" ({probed['vendor']})" if probed["vendor"] else "")
                 + f": probed, its scheduler classes lack {', '.join(probed['lacks']) or 'no backported change'}; "
                 f"where they differ from what the table says of {number}: {differs}. A patched process acts on "
                 "what they do; the verdicts below are the probe's")
    return probed


def main(as_json: bool = False, strict: bool = False, verbose: bool = False,
         config_args: dict[str, Any] | None = None, python_flags: list[str] | None = None) -> int:
    try:
        data = report(config_args, python_flags)
    except doctor_config.ConfigError as error:
        print(f"accelerate-warmup-patch doctor: error: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        _print(data, verbose)
    return 1 if strict and data["strict_fails"] else 0


def _armed(active: dict[str, Any]) -> str:
    """Whether a new process is armed at start-up, and otherwise what the script's own import would do."""
    if active["active_at_start_up"]:
        return f"armed at start-up in {active['mode']} mode, through {' and '.join(active['through'])}"
    return f"not armed at start-up; `import accelerate_warmup_patch` first in the script {active['by_import']}"


def _lrs(row: list[float]) -> str:
    return ", ".join(f"{lr:g}" for lr in row)


def _print(data: dict[str, Any], verbose: bool) -> None:
    print(data["verdict"])
    print()
    print(f"Python: {job_python.line(data['interpreter'])}")
    versions = ", ".join(f"{name} {version or 'not installed'}" for name, version in data["versions"].items())
    print(f"Installed: accelerate-warmup-patch {data['package']}, Python {data['python']}, {versions}")
    if data["verdicts"]:
        print(f"DeepSpeed {data['versions']['deepspeed']}, per scheduler class:")
        for name, verdict in data["verdicts"].items():
            print(f"  {name:15s} {verdict}")
    active = data["activation"]
    print(f"A new process ({active['python']}): {_armed(active)}")
    print(f"Interpreters (each asked): {reach_line(active)}")
    nodes = data["multinode"]
    print(f"Multi-node (deepspeed --hostfile): {'carried' if nodes['carries'] else 'not carried'}: {nodes['why']}")
    if verbose and nodes["runners"]:
        print("  runner   what it writes for each exported variable")
        for launcher, how in nodes["runners"].items():
            print(f"  {launcher:8s} {how}")
    if data["config"] is not None:
        _print_config(data["config"], data["versions"]["deepspeed"])
    for problem in data["problems"]:
        if problem != data["verdict"]:  # the first line said it
            print(f"  problem: {problem}")
    for note in data["notes"]:
        print(f"  note: {note}")
    print(f"--strict: {'exit 1' if data['strict_fails'] else 'passes'} (state {data['state']})")


def _print_config(section: dict[str, Any], deepspeed: str | None) -> None:
    via = f" ({section['via']})" if section["via"] else ""
    print(f"Config {section['path']}{via}:")
    if section["scheduler"] is None:
        print("  no DeepSpeed scheduler")
    else:
        params = ", ".join(f"{k}={v}" for k, v in section["params"].items())
        lr = "?" if section["lr"] is None else f"{section['lr']:g}"
        print(f"  scheduler {section['scheduler']}({params}); optimizer lr {lr}; groups' lrs "
              f"{_lrs(section['group_lrs']) or '?'}")
    for auto in section["auto"]:
        print(f"  {auto}")
    for warning in section["warnings"]:
        print(f"  warning: {warning}")
    kind = section["warmup_type"]
    if kind is not None:
        if kind["given"] is None:
            print(f"  warmup type {kind['used']} (DeepSpeed {deepspeed}'s default: the config gives no warmup_type; "
                  f"linear needs \"warmup_type\": \"linear\")")
        elif kind["given"] != kind["used"]:
            print(f"  warmup type {kind['used']} (the config's {kind['given']!r} is not one DeepSpeed knows)")
        else:
            print(f"  warmup type {kind['used']} (the config's)")
    lrs = section["lrs"]
    if lrs is None:
        print(f"  step lrs not computed: {section['lrs_not_computed']}")
        return
    # warmup_min_lr 0 (or warmup_min_ratio 0): reset runs steps 0 and 1 at 0, as the reference release does
    wasted = all(lr == 0 for row in lrs["patched"][:2] for lr in row)
    if wasted:
        print(f"  steps 0 and 1 both run at 0: step 0 changes nothing (as on DeepSpeed {releases.BEHAVIOR_REFERENCE}, "
              f"whose users report it as a wasted step); step mode ({settings.ENV_MODE}=step) runs step k at lr(k): "
              "its column below")
    print(f"The lr each optimizer step uses (DeepSpeed {lrs['deepspeed']}'s own {section['scheduler']} on a "
          "throwaway optimizer, in the engine's order):")
    print(f"  {'step':>4}  {'unpatched':>20}  {'patched (reset)':>20}" + (f"  {'step mode':>20}" if wasted else ""))
    for step, (before, after, stepped) in enumerate(zip(lrs["unpatched"], lrs["patched"], lrs["step"])):
        print(f"  {step:>4}  {_lrs(before):>20}  {_lrs(after):>20}" + (f"  {_lrs(stepped):>20}" if wasted else ""))
