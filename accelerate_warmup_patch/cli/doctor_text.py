"""``doctor``'s report as text: the verdict line, what is installed, the activation, the nodes, a config's lrs."""

from __future__ import annotations

from typing import Any

from .. import releases, settings
from . import job_python, probe_cache
from .arming import reach_line


def _armed(active: dict[str, Any]) -> str:
    """Whether a new process is armed at start-up, and otherwise what the script's own import would do."""
    if active["active_at_start_up"]:
        return f"armed at start-up in {active['mode']} mode, through {' and '.join(active['through'])}"
    return f"not armed at start-up; `import accelerate_warmup_patch` first in the script {active['by_import']}"


def _lrs(row: list[float]) -> str:
    return ", ".join(f"{lr:g}" for lr in row)


def print_text(data: dict[str, Any], verbose: bool) -> None:
    """The report ``doctor`` built (``doctor.report``), as the lines a person reads."""
    print(data["verdict"])
    print()
    print(f"Python: {job_python.line(data['interpreter'])}")
    versions = ", ".join(f"{name} {version or 'not installed'}" for name, version in data["versions"].items())
    print(f"Installed: accelerate-warmup-patch {data['package']}, Python {data['python']}, {versions}")
    if data["verdicts"]:
        print(f"DeepSpeed {data['versions']['deepspeed']}, per scheduler class:")
        for name, verdict in data["verdicts"].items():
            print(f"  {name:15s} {verdict}")
    asked = data.get("probed") or {}
    if "answered" in asked:  # what the build's code was seen to do: asked now, or kept for this very file
        print(f"  the build's classes: {probe_cache.said(asked)}")
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
