"""The unit tier: pure logic in one interpreter, with neither torch nor DeepSpeed installed.

Nothing here imports torch, DeepSpeed or tests/harness.py (tests/conftest.py, which pytest loads first, imports
the harness only when a real-engine module asks for one of its names).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

import pytest

from accelerate_warmup_patch.state import STATE


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # each warning is said once per process; every unit test is a process of its own in this respect
    monkeypatch.setattr(STATE, "warned", set())
    # the release a real DeepSpeed's hook saw, where this interpreter imported one (the suite's sessions run this
    # tier too): each test says which release it sees (deepspeed_release)
    monkeypatch.setattr(STATE, "deepspeed_version", None)


@pytest.fixture
def deepspeed_release(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Makes the package see a DeepSpeed release as imported (``deepspeed.__version__``, the one place it asks:
    ``releases.installed``), without any DeepSpeed: call it with the release."""

    def as_if(version: str) -> None:
        module = ModuleType("deepspeed")
        module.__dict__["__version__"] = version
        monkeypatch.setitem(sys.modules, "deepspeed", module)

    return as_if
