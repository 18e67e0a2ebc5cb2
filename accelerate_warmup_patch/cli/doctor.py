"""``doctor``: what is installed, what its scheduler classes do, and whether the patch would run.

Reads package metadata and files, asks child interpreters whether the switch arms them (a few tenths of a second)
and what the build's scheduler classes do (``probe_build.py``: a number is not the code), asked of a child that
imports torch and DeepSpeed once per build's code, then kept for it (``probe_cache.py``). ``--config`` computes the
lrs of a user's scheduler in a child interpreter (``doctor_config.py``). Opens with one verdict line: the state
(``doctor_states.py``); which interpreters the switch reaches is ``arming.py``'s, the text ``doctor_text.py``'s.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .. import multinode_runners, releases, settings, upstream
from . import config_facts, doctor_config, doctor_text, job_python, probe_build
from .arming import activation, env_problem
from .doctor_states import STATES, decide

SCHEMA = 3  # doctor --json's layout (docs/doctor.md); a change that removes or renames a key bumps it


def multinode(deepspeed: str | None, active: dict[str, Any]) -> dict[str, Any]:
    """Whether ``deepspeed --hostfile`` would carry the switch to every node, per runner (the guard table's)."""
    if deepspeed is None:
        return {"carries": False, "why": "deepspeed is not installed", "runners": {}}
    level = releases.deepspeed_support(deepspeed)
    facts = multinode_runners.runner_facts(deepspeed) if level is not releases.Support.UNSUPPORTED else ()
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


def report(config_args: dict[str, Any] | None = None, python_flags: list[str] | None = None,
           cache: bool = True) -> dict[str, Any]:
    versions = {name: releases.installed(name) for name in ("torch", "deepspeed", "accelerate", "transformers")}
    deepspeed, accelerate = versions["deepspeed"], versions["accelerate"]
    active = activation(python_flags)
    section = config_section(deepspeed=deepspeed, **config_args) if config_args else None
    notes: list[str] = []
    probed = _probed_build(deepspeed, notes, cache)
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
    if probed is not None:  # a key added within schema 3 (on every supported DeepSpeed since 0.8.0)
        data["probed"] = probed
    return data


def _probed_build(deepspeed: str | None, notes: list[str], cache: bool = True) -> dict[str, Any] | None:
    """What the installed build's scheduler classes do (probe_build.py), with a note where that is not what the table
    says of its number; None where nothing is patched (no DeepSpeed, or older than the table). Every build is asked,
    a plain release number too: a tree numbered 0.16.0 may carry another release's code (the answer kept for this
    very code where there is one: probe_cache.py; not without ``cache``)."""
    probed = probe_build.installed(deepspeed, cache)
    if deepspeed is None or probed is None:
        return None
    number = releases.release_number(deepspeed)
    what = releases.not_the_release(deepspeed)
    subject = f"DeepSpeed {deepspeed}" + (f" is {what}" if what else "")
    if "error" in probed:
        notes.append(f"{subject}; probing its scheduler classes failed ({probed['error']}): the verdicts are the "
                     f"table's for {number}")
        return probed
    if what is None and not probed["differs_from_table"]:
        return probed  # a release that does what the table says of it: nothing to add
    differs = "; ".join(probed["differs_from_table"]) or "nothing"
    lacks = ", ".join(probed["lacks_changes"]) or "no backported change"
    notes.append(subject + (f" ({probed['vendor']})" if probed["vendor"] else "")
                 + f": probed, its scheduler classes lack {lacks}; where they differ from what the table says of "
                 f"{number}: {differs}. A patched process acts on what they do; the verdicts below are the probe's")
    return probed


def main(as_json: bool = False, strict: bool = False, verbose: bool = False,
         config_args: dict[str, Any] | None = None, python_flags: list[str] | None = None, cache: bool = True) -> int:
    try:
        data = report(config_args, python_flags, cache)
    except doctor_config.ConfigError as error:
        print(f"accelerate-warmup-patch doctor: error: {error}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        doctor_text.print_text(data, verbose)
    return 1 if strict and data["strict_fails"] else 0
