"""ACCELERATE_WARMUP_PATCH_RECORD=off at a save: the checkpoint is saved as the original saves it, and no record.

A stand-in engine and save (no DeepSpeed); the real engines' save with the setting off is tests/test_mark.py's.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from accelerate_warmup_patch import record_writer
from accelerate_warmup_patch.settings import ENV_RECORD, ENV_STRICT
from accelerate_warmup_patch.state import STATE


def _save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: str | None) -> tuple[object, Path]:
    """One armed save of a stand-in engine into ``tmp_path``/ckpt; the original's result, and the tag folder."""
    monkeypatch.delenv(ENV_STRICT, raising=False)
    if record is None:
        monkeypatch.delenv(ENV_RECORD, raising=False)
    else:
        monkeypatch.setenv(ENV_RECORD, record)
    monkeypatch.setattr(STATE, "mode", "reset")

    def save_checkpoint(self: Any, save_dir: str, tag: Any = None, client_state: Any = None,
                        save_latest: bool = True) -> object:
        Path(save_dir, str(tag)).mkdir(parents=True)
        Path(save_dir, str(tag), "mp_rank_00_model_states.pt").write_bytes(b"the checkpoint")
        return "the original's result"

    engine = SimpleNamespace(global_steps=3, global_rank=0, lr_scheduler=None)
    wrapper = record_writer.save_checkpoint_wrapper(save_checkpoint)
    result = wrapper(lambda *a, **k: save_checkpoint(engine, *a, **k), engine, (str(tmp_path),), {"tag": "ckpt"})
    return result, tmp_path / "ckpt"


@pytest.mark.parametrize("value", ["off", "0", "false", "no", "none", "disable", "disabled", " OFF "])
def test_with_the_record_off_an_armed_save_writes_no_record(value: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    result, tag = _save(tmp_path, monkeypatch, value)
    assert result == "the original's result"
    assert sorted(p.name for p in tag.iterdir()) == ["mp_rank_00_model_states.pt"]  # no record, no temporary file


@pytest.mark.parametrize("value", [None, "", "on", "1", "offf"])
def test_unset_on_or_not_understood_an_armed_save_writes_its_record(value: str | None, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    result, tag = _save(tmp_path, monkeypatch, value)
    assert result == "the original's result"
    assert (tag / record_writer.FILE_NAME).is_file()
