"""The job's side of the chain (loaded_record.py): what a load carries into the job's later records, with a
stand-in engine (no torch here).
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from records import Engine, history_after_loading, observed, patched_run, record2, write_record

from accelerate_warmup_patch import loaded_record, record_data, record_writer
from accelerate_warmup_patch.state import STATE

# The runtime's side of the chain (loaded_record.loaded), with a stand-in engine: no torch here ---------------------


def test_a_load_carries_the_bound_records_step0_and_keeps_the_chain_short(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]),
                         loads=[{"tag": f"t{i}", "deepspeed": "0.15.2", "global_steps": i, "record": 2, "bound": True}
                                for i in range(20)])
    engine = Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == "observed" and history.step0["lrs"] == [0.0]
    assert len(history.loads) == record_data.MAX_LOADS and history.loads[0]["tag"] == "global_step6"
    assert history.loads[0]["bound"] is True


@pytest.mark.parametrize(("what", "how"), [("none", "unrecorded"), ("copied", "unrecorded"),
                                           ("record 1", "record-1"), ("record 1 of another save", "unrecorded"),
                                           ("record 1 the audit refuses", "unrecorded"), ("NaN literal", "unrecorded")])
def test_a_load_of_a_save_without_its_own_record_says_step_0_ran_unrecorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, how: str) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    files.write_run(tmp_path / "run")
    folder = tmp_path / "run" / "global_step6"
    if what == "copied":  # a record bound to other model states
        patched_run(tmp_path / "other", observed([0.0], [0.0]), lr=5e-3)
        shutil.copy(tmp_path / "other" / "global_step6" / record_data.RECORD_FILE, folder)
    elif what.startswith("record 1"):  # the job recognises a record 1, and its save, by the audit's one rule
        record_1 = {"record": 1, "package": "accelerate-warmup-patch", "version": "0.5.0", "mode": "reset",
                    "deepspeed": "0.15.2", "reference": "0.19.8", "global_steps": 6,
                    "scheduler": {"class": "WarmupLR", "step0": "fixed"}}
        if what == "record 1 of another save":
            record_1["global_steps"] = 3
        elif what == "record 1 the audit refuses":
            del record_1["version"]
        write_record(folder, record_1)
    elif what == "NaN literal":  # not JSON: handed on, it would make the next record unwritable
        text = json.dumps(record2(folder, observed([0.0], [0.0]))).replace('"lrs": [0.0]', '"lrs": [NaN]')
        (folder / record_data.RECORD_FILE).write_text(text)
    engine = Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == how, history
    assert history.step0["deepspeed"] == "0.15.2" and history.step0["global_steps"] == 6



def test_a_loaded_record_whose_lr_parses_to_inf_cannot_make_the_jobs_later_records_unwritable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1e999 is a JSON number that parses to inf: handed on, json.dumps(allow_nan=False) of every later record fails
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    text = json.dumps(record2(folder, observed([0.0], [0.0]))).replace('"lrs": [0.0]', '"lrs": [1e999]')
    history = history_after_loading(folder, text)
    assert history.step0["how"] == "unrecorded" and "not one this release reads" in history.step0["why"], history
    record_writer.write(str(folder), {"step0": history.step0, "loads": history.loads})  # the job's next record
    # a string "inf" is how a record writes it: handed on as written
    history = history_after_loading(folder, record2(folder, observed(["inf"], [0.0])))
    assert history.step0["lrs"] == ["inf"]
    record_writer.write(str(folder), {"step0": history.step0, "loads": history.loads})


def test_a_loaded_record_carries_only_the_shape_the_job_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a value nested 900 deep (each check of 0.6.0 passed) made every later record ~6.5 MB; a long string, a huge
    # int and keys of its own are not handed on either
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    deep: Any = []
    for _ in range(900):
        deep = [deep]
    step0 = {**observed([0.0], [0.0]), "extra": deep, "why": "w" * 20_000, "mode": deep}
    hops = [{"tag": "t", "deepspeed": "0.15.2", "global_steps": 1, "record": 2, "bound": True}] * 20
    hops[1] = {"tag": deep, "deepspeed": "0.15.2", "global_steps": 10**25, "record": 2, "bound": True, "x": deep}
    history = history_after_loading(folder, record2(folder, step0, loads=hops))
    assert history.step0["how"] == "observed" and history.step0["lrs"] == [0.0], history
    assert set(history.step0) <= set(record_data.STEP0_KEYS) and history.step0["mode"] is None
    assert len(history.step0["why"]) == 1000
    assert len(history.loads) == record_data.MAX_LOADS
    assert history.loads[2] == {"tag": None, "deepspeed": "0.15.2", "global_steps": None, "record": 2, "bound": True}
    written = json.dumps({"step0": history.step0, "loads": history.loads})
    assert len(written) < 4096, len(written)


