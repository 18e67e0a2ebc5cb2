"""``doctor --config``: the user's scheduler, read from their DeepSpeed config, and the lrs of its first steps.

A ds_config JSON, a TrainingArguments JSON whose ``deepspeed`` names one (or holds it), or an accelerate
config YAML whose ``deepspeed_config.deepspeed_config_file`` names one. The lrs come from the installed
release's own scheduler class on a throwaway optimizer (no model, no engine), driven in the engine's
order, in a child interpreter (this module run as ``__main__``, from this command's own installation:
``child.start_module``) so that this process imports neither torch nor deepspeed: first with the patch
removed, then applied in ``reset`` mode.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..upstream import pr8126
from . import child
from .config_facts import AUTO

STEPS = 4  # optimizer steps 0..3

# what fills an "auto" value, per key (transformers' integrations/deepspeed.py trainer_config_process and
# trainer_config_finalize; accelerate's Accelerator._prepare_deepspeed with a DummyOptim/DummyScheduler)
FILLED_BY: dict[str, str] = {
    "optimizer.params.lr": "the HF Trainer fills TrainingArguments.learning_rate (--learning_rate), accelerate "
                           "the lr of the DummyOptim your script passes: give it with --lr",
    "warmup_min_lr": "the HF Trainer and accelerate both fill 0",
    "warmup_max_lr": "the HF Trainer and accelerate both fill the optimizer's lr",
    "warmup_num_steps": "the HF Trainer fills warmup_steps (or warmup_ratio x the run's steps), accelerate the "
                        "DummyScheduler's warmup_num_steps (default 0); with no warmup asked, accelerate before 1.15 "
                        f"and transformers before 5.18 fill 0, which DeepSpeed {pr8126.RELEASE} and newer refuse "
                        "(ValueError; the newer ones fill at least 1): give it with --set warmup_num_steps=N",
    "total_num_steps": "the HF Trainer fills the run's optimizer steps (max_steps), accelerate the "
                       "DummyScheduler's total_num_steps over the processes: give it with --set total_num_steps=N",
}
FIXED_FILLS = {"warmup_min_lr": 0.0}  # the same number whoever fills it; warmup_max_lr is the optimizer's lr


class ConfigError(ValueError):
    """A config that cannot be read, or names no DeepSpeed config; the message says which and why."""


@dataclass
class Loaded:
    """A DeepSpeed config and how it was reached from the file the user named."""

    named: str
    ds_config: dict[str, Any]
    via: str  # "" when the named file is the ds_config itself
    trainer_lr: float | None = None  # TrainingArguments' learning_rate, when a Trainer args file gave it


@dataclass
class Plan:
    """What the child computes, or why it cannot: the scheduler, its params, the groups' lrs."""

    scheduler: str | None
    params: dict[str, Any] = field(default_factory=dict)
    lr: float | None = None
    group_lrs: list[float] = field(default_factory=list)
    autos: list[str] = field(default_factory=list)  # "key: what fills it"
    missing: list[str] = field(default_factory=list)  # what must be given before the lrs can be computed


def load(path: str, _within: tuple[Path, ...] = ()) -> Loaded:
    """Read ``path``: a ds_config, or a Trainer/accelerate config that names one."""
    file = Path(path)
    _within = (*_within, file.resolve())  # the files that led here: one of them named again is a loop
    try:
        text = file.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    if file.suffix in (".yaml", ".yml"):
        return _from_accelerate_yaml(file, text, _within)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path} is not valid JSON: {error}{_yaml_hint(text)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a JSON {type(data).__name__}, not a config object")
    if "deepspeed" in data and not any(k in data for k in ("optimizer", "scheduler", "zero_optimization")):
        lr = data.get("learning_rate")
        inner = _follow(file, data["deepspeed"], "TrainingArguments' deepspeed", _within)
        inner.trainer_lr = float(lr) if isinstance(lr, (int, float)) else None
        return inner
    return Loaded(path, data, "")


def _yaml_hint(text: str) -> str:
    """A hint only for a file that reads as YAML, not JSON (an accelerate config under another name):
    a JSON object with a typo in it starts with "{" and gets none."""
    if text.lstrip().startswith(("{", "[")):
        return ""
    return " (an accelerate config YAML is read as YAML only when its name ends in .yaml or .yml)"


def _follow(file: Path, target: Any, what: str, within: tuple[Path, ...]) -> Loaded:
    if isinstance(target, dict):
        return Loaded(str(file), target, f"{what} (inline)")
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{file}: {what} is {target!r}, not a path to a DeepSpeed config")
    candidates = [Path(target), file.parent / target]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ConfigError(f"{file}: {what} names {target}, which is not a file here or beside {file.name}")
    if found.resolve() in within:
        raise ConfigError(f"{file}: {what} names {target}, which leads back to a file already read (a loop): "
                          "name the DeepSpeed config itself")
    inner = load(str(found), within)
    return Loaded(str(file), inner.ds_config, f"{what} names {found}")


def _from_accelerate_yaml(file: Path, text: str, within: tuple[Path, ...]) -> Loaded:
    try:
        import yaml  # type: ignore[import-untyped]  # accelerate's own dependency: present wherever an accelerate config is used
    except ImportError:
        raise ConfigError(f"reading {file} needs PyYAML (installed with accelerate)") from None
    data = yaml.safe_load(text) or {}
    deepspeed = data.get("deepspeed_config") if isinstance(data, dict) else None
    if not isinstance(deepspeed, dict):
        raise ConfigError(f"{file} has no deepspeed_config: accelerate does not run DeepSpeed with it")
    if deepspeed.get("deepspeed_config_file"):
        return _follow(file, deepspeed["deepspeed_config_file"], "deepspeed_config.deepspeed_config_file", within)
    # accelerate builds the ds_config from these keys, with no scheduler: the script's own is used
    return Loaded(str(file), {}, "deepspeed_config without a deepspeed_config_file (accelerate builds one "
                  "with no DeepSpeed scheduler)")


def plan(loaded: Loaded, lr: float | None, group_lrs: list[float] | None, sets: dict[str, float]) -> Plan:
    """Resolve the scheduler's params and the optimizer's lr; "auto" values are explained, and filled only
    where every filler fills the same number (or the user gave one)."""
    scheduler = loaded.ds_config.get("scheduler")
    if not isinstance(scheduler, dict) or not scheduler.get("type"):
        return Plan(None)
    result = Plan(str(scheduler["type"]), params=dict(scheduler.get("params") or {}))
    raw_lr = ((loaded.ds_config.get("optimizer") or {}).get("params") or {}).get("lr")
    if lr is not None:
        result.lr = lr
        if raw_lr != lr:
            result.autos.append(f"optimizer.params.lr: {raw_lr if raw_lr is not None else 'none'}: --lr {lr:g}")
    elif raw_lr == AUTO and loaded.trainer_lr is not None:
        result.lr = loaded.trainer_lr
        result.autos.append(f"optimizer.params.lr: {AUTO}: TrainingArguments' learning_rate, {loaded.trainer_lr:g}")
    elif isinstance(raw_lr, (int, float)):
        result.lr = float(raw_lr)
    elif raw_lr == AUTO:
        result.autos.append(f"optimizer.params.lr: {AUTO}: {FILLED_BY['optimizer.params.lr']}")
        result.missing.append("--lr")
    else:
        result.autos.append("optimizer.params.lr: none (the optimizer is built in code): give its lr with --lr")
        result.missing.append("--lr")
    for key, value in list(result.params.items()):
        if key in sets:
            result.params[key] = sets.pop(key)
            result.autos.append(f"{key}: {value}: --set {key}={result.params[key]}")
        elif value == AUTO:
            result.autos.append(f"{key}: {AUTO}: {FILLED_BY.get(key, 'filled by the HF Trainer or accelerate')}")
            if key in FIXED_FILLS:
                result.params[key] = FIXED_FILLS[key]
            elif key == "warmup_max_lr" and result.lr is not None:
                result.params[key] = result.lr
            elif key != "warmup_max_lr":
                result.missing.append(f"--set {key}=N")
    result.params.update(sets)  # a key the config leaves out
    result.group_lrs = list(group_lrs) if group_lrs else ([result.lr] if result.lr is not None else [])
    return result


def compute(scheduler: str, params: dict[str, Any], lr: float, group_lrs: list[float],
            timeout: float = 300) -> dict[str, Any]:
    """The lr of optimizer steps 0..3 per group, unpatched and patched, from the installed release's class."""
    request = json.dumps({"scheduler": scheduler, "params": params, "lr": lr, "group_lrs": group_lrs})
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    doing = (f"computing the lrs of steps 0-{STEPS - 1} with DeepSpeed's own {scheduler} (a new interpreter imports "
             "torch and DeepSpeed)")
    got = child.reply(child.start_module("accelerate_warmup_patch.cli.doctor_config", [request], env), timeout, doing)
    if got.result is None:
        raise ConfigError(f"computing the lrs failed {got.failure()}")
    result = got.result
    if "error" in result:
        raise ConfigError(result["error"])
    return result


# The child ----------------------------------------------------------------------------------

def drive(scheduler: str, params: dict[str, Any], lr: float, group_lrs: list[float],
          step_first: bool = False) -> tuple[list[list[float]], Any]:
    """Build the class on a throwaway optimizer and run the engine's order: an optimizer step at the
    groups' lrs (recorded), then scheduler.step(). ``step_first``: step the scheduler once before the first
    optimizer step, as step mode does to a fresh scheduler. Returns the rows and the scheduler."""
    import torch
    from deepspeed.runtime import lr_schedules

    weights = [torch.nn.Parameter(torch.zeros(1)) for _ in group_lrs]
    optimizer = torch.optim.AdamW([{"params": [w], "lr": g} for w, g in zip(weights, group_lrs)], lr=lr)
    built = getattr(lr_schedules, scheduler)(optimizer, **params)
    if step_first:
        built.step()
    rows = []
    for _ in range(STEPS):
        rows.append([float(group["lr"]) for group in optimizer.param_groups])
        optimizer.step()  # no gradients: the weights stay, as the lrs are all we read
        built.step()
    return rows, built


def _run_request(request: dict[str, Any]) -> dict[str, Any]:
    import accelerate_warmup_patch

    # tests only: one run, armed by the environment as in a new process. Read from the request, which the
    # command builds itself, so that no variable left in the user's environment changes the answer
    fresh = request.get("fresh") is True
    if not fresh:
        accelerate_warmup_patch.remove()  # this child's own import armed it: unpatched first
    import deepspeed
    from deepspeed.runtime import lr_schedules

    scheduler = request["scheduler"]
    cls = getattr(lr_schedules, scheduler, None)
    if not isinstance(cls, type):
        return {"error": f"DeepSpeed {deepspeed.__version__} has no scheduler class {scheduler!r}"}
    args = (scheduler, request["params"], request["lr"], request["group_lrs"])
    # the release's own default, from its signature (log on every release of the table)
    parameter = inspect.signature(cls).parameters.get("warmup_type")
    default = parameter.default if parameter is not None and parameter.default is not inspect.Parameter.empty else None
    try:
        if fresh:
            return {"deepspeed": deepspeed.__version__, "lrs": drive(*args)[0]}
        unpatched = drive(*args)[0]
        accelerate_warmup_patch.apply("reset")
        try:
            patched, built = drive(*args)
            step_mode = drive(*args, step_first=True)[0]  # step mode: stepped once before the first step
        finally:
            accelerate_warmup_patch.remove()
    except Exception as error:  # the release's own constructor refuses these params: its words, not a crash
        return {"deepspeed": deepspeed.__version__, "refused": repr(error)}
    return {"deepspeed": deepspeed.__version__, "unpatched": unpatched, "patched": patched, "step": step_mode,
            "warmup_type": getattr(built, "warmup_type", None), "default_warmup_type": default}


if __name__ == "__main__":
    child.emit(_run_request(json.loads(sys.argv[1])))
