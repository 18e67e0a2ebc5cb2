"""What the patch wraps in deepspeed on this release, each right after its module's import.

``PATCHERS`` maps each module api.py waits for to the function that patches it: deepspeed's hook reaches
its submodules itself (deepspeed/__init__.py has imported them by then, and only then is
deepspeed.__version__, which decides what is wrapped, set). Below a table's floor nothing is wrapped, and
that is said once; above its newest release, that is said once too. Nothing runs on a steady optimizer step
unless it acts there: the scheduler methods the build lacks a formula of (``installed.methods_to_fix``, from what
``probe.py`` saw the build do), and step mode's net; accelerate's own code is not wrapped (it builds its engine
through ``deepspeed.initialize``).
What is wrapped on which release and in which mode is ``wrapped_targets.WRAPPED``; here is how each row is wrapped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType

from . import (
    backport,
    failures,
    installed,
    launcher,
    log,
    nets,
    own_writes,
    probe,
    record_writer,
    releases,
    schedules,
    wrapped_targets,
    wrapping,
)
from .settings import Mode
from .state import STATE


def patch_deepspeed(module: ModuleType) -> None:
    """Everything on DeepSpeed's side, decided by its release: below the table's floor, nothing."""
    version = str(getattr(module, "__version__", "0"))
    STATE.deepspeed_version = version
    if not _supported("ds", framework="DeepSpeed", version=version, level=releases.deepspeed_support(version),
                      floor=releases.DEEPSPEED_FLOOR, newest=releases.NEWEST_DEEPSPEED, skipped="nothing is patched",
                      untested="; it has every change the patch backports, so only step mode acts"):
        return
    engine_class = sys.modules["deepspeed.runtime.engine"].DeepSpeedEngine  # deepspeed/__init__.py imported it
    _probe(version)  # before anything is wrapped: the build's own scheduler classes
    # wrapped_targets.WRAPPED's rows for this release and mode. Step mode's net, the one per-step net, is a row of
    # step mode alone, so it is wrapped only where it acts (a later apply("step") runs this again and adds it).
    for row in wrapped_targets.wrapped(version, STATE.mode or Mode.OFF):
        _WRAPS[row.target](module, engine_class, version)


def _probe(version: str) -> None:
    """What this build's scheduler classes do (probe.py), once per process; where that fails, the table answers."""
    def failed(error: Exception) -> None:
        failures.report("probe", what=f"probing what DeepSpeed {version}'s scheduler classes do", error=error,
                        consequence="the guard table's answers for the release its number names stand in")

    probe.ensure(sys.modules[schedules.SCHEDULES_MODULE], version, failed)


def _wrap_scheduler_methods(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    lr_schedules = sys.modules[schedules.SCHEDULES_MODULE]  # deepspeed/__init__.py imported it
    for class_name, method in installed.methods_to_fix(version):  # the fix: backport.py
        cls = getattr(lr_schedules, class_name)
        wrapping.wrap(cls, method, backport.wrapper(class_name, method, vars(cls)[method], version))


def _wrap_initialize(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    wrapping.wrap(deepspeed, "initialize", nets.initialize_wrapper)


def _wrap_load_checkpoint(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    wrapping.wrap(engine_class, "load_checkpoint", nets.load_checkpoint_wrapper)


def _wrap_save_checkpoint(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    """The record beside each checkpoint, of what the patch did about step 0 (record_writer.py, docs/mark.md)."""
    wrapper = record_writer.save_checkpoint_wrapper(vars(engine_class)["save_checkpoint"])
    wrapping.wrap(engine_class, "save_checkpoint", wrapper)


TORCH_CHECKPOINT_ENGINE = "deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine"


def _wrap_own_writes(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    """The files the record's writer saved itself (own_writes.py): engine.py imports TorchCheckpointEngine at its top
    (@ v0.15.2, v0.19.8), so its module is loaded by now."""
    engine = getattr(sys.modules.get(TORCH_CHECKPOINT_ENGINE), "TorchCheckpointEngine", None)
    if engine is not None and "save" in vars(engine):
        wrapping.wrap(engine, "save", own_writes.own_write_wrapper)
    else:  # an untested release that moved it: records are written unbound (own_writes.rewritten_since)
        failures.report("own-writes", what="finding TorchCheckpointEngine.save, where the record's writer notes "
                        "what it saved", error=LookupError(f"DeepSpeed {version} has no {TORCH_CHECKPOINT_ENGINE}"
                                                            ".TorchCheckpointEngine.save"),
                        consequence="each record is written unbound (a claim, not proof); everything else applies")


def _wrap_optimizer_step(deepspeed: ModuleType, engine_class: type, version: str) -> None:
    optimizer_step = releases.optimizer_step_method(version)
    if optimizer_step is not None and optimizer_step in vars(engine_class):
        wrapping.wrap(engine_class, optimizer_step, nets.optimizer_step_wrapper)
    else:  # an untested release that moved it: step mode has no moment to act
        failures.report("optimizer-step", what=f"finding DeepSpeedEngine.{optimizer_step}, where step mode acts",
                        error=LookupError(f"DeepSpeed {version} has no DeepSpeedEngine.{optimizer_step}"),
                        consequence="step mode steps no scheduler; everything else applies")


def _supported(key: str, *, framework: str, version: str, level: releases.Support, floor: str, newest: str,
               skipped: str, untested: str) -> bool:
    """False below the table's floor; said once, as is a release newer than the table's newest."""
    if level is releases.Support.UNSUPPORTED:
        log.warn_once(f"{key}-floor", "%s %s is older than %s, the oldest release this patch knows; %s",
                      framework, version, floor, skipped)
        return False
    if level is releases.Support.UNTESTED:
        log.warn_once(f"{key}-untested", "%s %s is newer than %s, the newest release this patch was tested on%s",
                      framework, version, newest, untested)
    return True


# wrapped_targets.WRAPPED's rows that deepspeed's import wraps -> how (a row without one raises KeyError: a test checks)
_WRAPS: Mapping[str, Callable[[ModuleType, type, str], None]] = MappingProxyType({
    wrapped_targets.SCHEDULER_METHODS: _wrap_scheduler_methods,
    "deepspeed.initialize": _wrap_initialize,
    "DeepSpeedEngine.load_checkpoint": _wrap_load_checkpoint,
    "DeepSpeedEngine.save_checkpoint": _wrap_save_checkpoint,
    "TorchCheckpointEngine.save": _wrap_own_writes,
    "DeepSpeedEngine._take_model_step": _wrap_optimizer_step,
})

# module name -> what patches it, right after its import; api.py calls it, undoes and reports what it raises
# (the package's WAITS_FOR names the same modules, without loading this one: a unit test checks they agree)
PATCHERS: Mapping[str, Callable[[ModuleType], None]] = MappingProxyType({
    "deepspeed": patch_deepspeed,
    launcher.MODULE: launcher.patch_runners,
})
