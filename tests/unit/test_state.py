"""The process's state: apply() and remove() keep its books right, and a reset makes a fresh process of it.

No torch, no DeepSpeed: a fake ``deepspeed`` (a module and two classes with the methods the patch wraps on
0.15.2) stands in for the real one, so that every test runs in this interpreter, one after another.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

import accelerate_warmup_patch
from accelerate_warmup_patch import api, launcher, targets, wrapping
from accelerate_warmup_patch.state import STATE, reset

SCHEDULES = "deepspeed.runtime.lr_schedules"
ENGINE = "deepspeed.runtime.engine"
CHECKPOINT = "deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine"


def _fake_deepspeed(version: str) -> dict[str, types.ModuleType]:
    """deepspeed, its lr_schedules and engine modules, with what the patch wraps on ``version``."""

    def initialize(*args: Any, **kwargs: Any) -> Any:
        return "engine", None, None, None

    class WarmupLR:
        def __init__(self, optimizer: Any, warmup_max_lr: Any = None) -> None:
            self.optimizer = optimizer

        def get_lr(self) -> list[float]:
            return [0.0]

    class WarmupCosineLR(WarmupLR):
        def __init__(self, optimizer: Any) -> None:
            self.optimizer = optimizer

        def get_lr(self) -> list[float]:
            return [0.0]

        def get_lr_ratio(self) -> float:
            return 0.0

    class DeepSpeedEngine:
        def load_checkpoint(self, load_dir: str, tag: Any = None, load_optimizer_states: bool = True) -> Any:
            return load_dir, {}

        def save_checkpoint(self, save_dir: str, tag: Any = None, client_state: Any = None) -> bool:
            return True

        def _take_model_step(self) -> None:
            pass

    class TorchCheckpointEngine:
        def save(self, state_dict: Any, path: str) -> None:
            pass

    deepspeed = types.ModuleType("deepspeed")
    deepspeed.__version__ = version  # type: ignore[attr-defined]
    deepspeed.initialize = initialize  # type: ignore[attr-defined]
    schedules = types.ModuleType(SCHEDULES)
    engine = types.ModuleType(ENGINE)
    checkpoint = types.ModuleType(CHECKPOINT)
    for cls, module in ((WarmupLR, schedules), (WarmupCosineLR, schedules), (DeepSpeedEngine, engine),
                        (TorchCheckpointEngine, checkpoint)):
        cls.__module__, cls.__qualname__ = module.__name__, cls.__name__
        setattr(module, cls.__name__, cls)
    return {"deepspeed": deepspeed, SCHEDULES: schedules, ENGINE: engine, CHECKPOINT: checkpoint}


@pytest.fixture
def deepspeed(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A fake DeepSpeed 0.15.2 in sys.modules, and a fresh state before and after."""
    monkeypatch.delenv("ACCELERATE_WARMUP_PATCH", raising=False)
    monkeypatch.delenv("ACCELERATE_WARMUP_PATCH_STRICT", raising=False)
    api.remove()
    reset()
    # a real DeepSpeed this interpreter imported (the suite's sessions run this tier too) is out of sight meanwhile
    for name in [n for n in sys.modules if n == "deepspeed" or n.startswith("deepspeed.")]:
        monkeypatch.delitem(sys.modules, name)
    modules = _fake_deepspeed("0.15.2")
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    yield modules["deepspeed"]
    api.remove()
    reset()


def test_apply_wraps_each_target_once_and_records_who_applied(deepspeed: types.ModuleType) -> None:
    assert api.apply("reset", via="first") == "reset"
    assert api.apply("reset", via="second") == "reset"
    status = api.status()
    assert status["mode"] == "reset"
    assert status["applied_by"] == ["first", "second"]
    assert status["patched"] == [
        f"{SCHEDULES}.WarmupLR.__init__", f"{SCHEDULES}.WarmupLR.get_lr", f"{SCHEDULES}.WarmupCosineLR.__init__",
        f"{SCHEDULES}.WarmupCosineLR.get_lr", f"{SCHEDULES}.WarmupCosineLR.get_lr_ratio", "deepspeed.initialize",
        f"{ENGINE}.DeepSpeedEngine.load_checkpoint", f"{ENGINE}.DeepSpeedEngine.save_checkpoint",
        f"{CHECKPOINT}.TorchCheckpointEngine.save"]
    assert len(STATE.wrapped) == len(status["patched"])  # applied twice: one layer each
    assert STATE.deepspeed_version == "0.15.2"
    assert status["waiting_for"] == [launcher.MODULE]  # the launcher is not imported


def test_remove_puts_every_original_back_and_forgets_who_applied(deepspeed: types.ModuleType) -> None:
    original = deepspeed.initialize
    get_lr = vars(sys.modules[SCHEDULES].WarmupLR)["get_lr"]
    api.apply("reset", via="test")
    assert deepspeed.initialize is not original and deepspeed.initialize.__wrapped__ is original
    api.remove()
    assert deepspeed.initialize is original
    assert vars(sys.modules[SCHEDULES].WarmupLR)["get_lr"] is get_lr
    assert api.status()["mode"] == "off"
    assert (STATE.mode, STATE.applied_by, STATE.wrapped, api.status()["waiting_for"]) == (None, [], [], [])


def test_step_mode_also_wraps_the_optimizer_step(deepspeed: types.ModuleType) -> None:
    api.apply("step", via="test")
    assert f"{ENGINE}.DeepSpeedEngine._take_model_step" in api.status()["patched"]


def test_another_tools_wrapper_above_ours_stays_working_after_remove(deepspeed: types.ModuleType) -> None:
    original = deepspeed.initialize
    api.apply("reset", via="test")
    ours = deepspeed.initialize

    def other_tool(*args: Any, **kwargs: Any) -> Any:
        return ours(*args, **kwargs)

    other_tool.__wrapped__ = ours  # type: ignore[attr-defined]
    setattr(deepspeed, "initialize", other_tool)  # noqa: B010  # a fake module: mypy knows no initialize
    api.remove()
    assert deepspeed.initialize is other_tool and deepspeed.initialize() == original()
    assert wrapping.in_place() == []


def test_a_reset_forgets_counters_warnings_and_schedulers(deepspeed: types.ModuleType) -> None:
    class Scheduler:
        pass

    scheduler = Scheduler()
    STATE.fixes, STATE.would_fix = 2, 1
    STATE.not_fixed.append("WarmupLR at iteration 5")
    STATE.warned.add("settle")
    STATE.settled.add(scheduler)
    lock, hooks = STATE.lock, STATE.hooks
    reset()
    assert (STATE.fixes, STATE.would_fix, STATE.not_fixed, STATE.warned) == (0, 0, [], set())
    assert scheduler not in STATE.settled
    assert STATE.lock is lock and STATE.hooks is hooks  # the lock and the start-up's hooks are the process's


def test_the_modules_the_package_waits_for_are_the_ones_it_patches() -> None:
    assert set(accelerate_warmup_patch.WAITS_FOR) == set(targets.PATCHERS)
    assert STATE.hooks is not None and STATE.hooks.waits_for == accelerate_warmup_patch.WAITS_FOR


@pytest.mark.parametrize(("global_rank", "local_rank", "node_local", "written"), [
    (0, 0, False, True), (1, 1, False, False), (8, 0, False, False),  # one shared folder: global rank 0 writes
    (8, 0, True, True), (9, 1, True, False),  # a folder per node (use_node_local_storage): each node's local 0
])
def test_the_record_is_written_by_the_rank_that_makes_the_save_folder(
        deepspeed: types.ModuleType, tmp_path: Any, global_rank: int, local_rank: int, node_local: bool,
        written: bool) -> None:
    api.apply("reset", via="test")
    engine = sys.modules[ENGINE].DeepSpeedEngine()
    engine.global_rank, engine.local_rank, engine.global_steps, engine.lr_scheduler = global_rank, local_rank, 3, None
    engine.use_node_local_storage = lambda: node_local
    (tmp_path / "global_step3").mkdir()
    assert engine.save_checkpoint(str(tmp_path)) is True
    assert (tmp_path / "global_step3" / "accelerate_warmup_patch.json").exists() is written
