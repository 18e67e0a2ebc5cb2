"""One record 2 (record_data.py, record_writer.py): a record the job hands on is exactly one the audit reads, and
the writer's temporary file.
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import audit, one
from records import history_after_loading, observed, patched_run

from accelerate_warmup_patch import record_data, record_writer
from accelerate_warmup_patch.state import STATE

# One record 2 and what is changed in it: whether the job hands it on and the audit reads it must agree (#48)
_CORPUS: dict[str, tuple[dict[str, Any], bool]] = {
    "as written": ({}, True),
    "no scheduler": ({"scheduler": None}, True),
    "first step observed": ({"first_step": {"observed": True, "lrs": [0.0], "global_steps": 0}}, True),
    "first step not observed": ({"first_step": {"observed": False, "why": "no hook"}}, True),
    "a load before": ({"loads": [{"tag": "t", "deepspeed": "0.15.2", "global_steps": 3, "record": 2,
                                  "bound": True}]}, True),
    "step 0 at nan": ({"step0": observed(["nan"], None)}, True),
    "no step yet": ({"step0": {"how": "no-step-yet", "deepspeed": "0.15.2"}}, True),
    "version not a string": ({"version": 6}, False),
    "no mode": ({"mode": None}, False),
    "reference not a string": ({"reference": ["0.19.8"]}, False),
    "global_steps negative": ({"global_steps": -1}, False),
    "scheduler.step0 unknown word": ({"scheduler": {"class": "WarmupLR", "step0": "healed"}}, False),
    "scheduler.class not a string": ({"scheduler": {"class": 3, "step0": "fixed"}}, False),
    "scheduler.lrs_before not lrs": ({"scheduler": {"class": "WarmupLR", "step0": "fixed", "lrs_before": "0"}}, False),
    "bound_to not an object": ({"bound_to": "mp_rank_00"}, False),
    "first_step observed without lrs": ({"first_step": {"observed": True, "global_steps": 0}}, False),
    "first_step.observed not a bool": ({"first_step": {"observed": "yes"}}, False),
    "step0.how unknown": ({"step0": {"how": "guessed"}}, False),
    "observed step0 without its release": ({"step0": {**observed([0.0], [0.0]), "deepspeed": None}}, False),
    "step0.lrs not lrs": ({"step0": observed(["0.0"], None)}, False),
    "loads not a list": ({"loads": {"tag": "t"}}, False),
    "package another's": ({"package": "someone-else"}, False),
    "record 3": ({"record": 3}, False),
}


@pytest.mark.parametrize("case", sorted(_CORPUS))
def test_a_record_the_job_carries_is_exactly_a_record_the_audit_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      case: str) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    change, valid = _CORPUS[case]
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    record = {**json.loads((folder / record_data.RECORD_FILE).read_text()), **change}
    history = history_after_loading(folder, record)  # the job, at a load
    _, report = one(tmp_path / "run")  # the audit
    assert (report["record"] is not None) is valid, report
    assert (history.step0["how"] == record["step0"]["how"]) is valid, history
    if not valid:
        assert "not one this release reads" in history.step0["why"], history
        assert any("not a record this audit reads" in note for note in report["notes"]), report


def test_a_records_temporary_file_is_named_as_partial_and_a_stale_one_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".accelerate_warmup_patch.0a1b2c.partial"
    fresh = tmp_path / ".accelerate_warmup_patch.ff.partial"
    for left in (stale, fresh):
        left.write_text("{")  # what a process killed between the write and the rename leaves
    old = stale.stat().st_mtime - record_writer.STALE_PARTIAL_S - 60
    os.utime(stale, (old, old))
    record_writer.write(str(tmp_path), {"record": 2})
    assert not stale.exists() and fresh.exists()  # a younger one may be another job's write in progress
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name, record_data.RECORD_FILE]
    assert record_data.PARTIAL.match(fresh.name) and not fresh.name.endswith(".json")
    files.write_run(tmp_path / "run")
    (tmp_path / "run" / "global_step6" / fresh.name).write_text("{")
    _, report = one(tmp_path / "run")
    assert report["record"] is None and not any("partial" in note for note in report["notes"]), report


def test_a_fresh_unpatched_rerun_that_saved_fewer_tags_is_not_cleared_by_an_older_bound_record(tmp_path: Path) -> None:
    # a patched run saved global_step3 and global_step9; an unpatched rerun from scratch saved global_step3 over
    # it (its record is then not that save's) and crashed: latest names global_step3, global_step9 is still there
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step9", global_steps=9)
    kept = (tmp_path / "run" / "global_step9" / record_data.RECORD_FILE).read_text()
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step3", global_steps=3)
    record = (tmp_path / "run" / "global_step3" / record_data.RECORD_FILE).read_text()
    files.write_run(tmp_path / "run", tag="global_step3", global_steps=3, lr=2e-3)  # the rerun's save
    (tmp_path / "run" / "global_step3" / record_data.RECORD_FILE).write_text(record)
    assert (tmp_path / "run" / "global_step9" / record_data.RECORD_FILE).read_text() == kept
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "the files cannot tell which" in report["why"], report


def test_a_patched_start_resumed_unpatched_on_a_fixed_release_names_its_proof_and_what_it_cannot_tell(
        tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step3", global_steps=3)
    (tmp_path / "run" / "latest").unlink()
    files.write_run(tmp_path / "run", tag="global_step6", version="0.19.8")  # resumed unpatched on 0.19.8
    _, report = one(tmp_path / "run")
    # the unpatched process may have resumed this save, or a save of another release elsewhere: the files cannot tell
    assert report["verdict"] == "unknown" and "observed by" in report["why"], report
    assert "resumed a save of another release" in report["why"], report


def test_an_observed_step0_without_the_patchs_reference_is_held_against_the_tables(tmp_path: Path) -> None:
    patched_run(tmp_path / "left", observed([0.0], None, patch_did="left"))
    patched_run(tmp_path / "hurt", observed([0.001], None, patch_did="left"))
    code, reports = audit(tmp_path / "hurt", tmp_path / "left")
    assert [(r["verdict"], r["newest_step0_lr"]) for r in reports] == [("affected", 0.0), ("not affected", 0.0)]
    assert code == 1


def test_a_warned_run_whose_step0_was_right_but_whose_peak_was_not_is_affected(tmp_path: Path) -> None:
    # 0.16.0 starts WarmupLR at warmup_min_lr as 0.19.8 does, but without warmup_max_lr it peaks at 0.001, where
    # 0.19.8 peaks at the optimizer's lr (0.01 here): step 0 ran right, every later warmup step did not
    no_peak = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_num_steps": 5}}
    patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.16.0", patch_did="warned"), version="0.16.0",
                scheduler=no_peak, lr=0.01, mode="warn")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert "warmup_max_lr" in report["why"] and report["step0_lr"] == 0.0, report


def test_a_reset_run_whose_peak_the_patch_fixed_is_not_affected(tmp_path: Path) -> None:
    # the same run in reset mode: the patch gave it 0.19.8's peak as well (its process ran the fixes)
    no_peak = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_num_steps": 5}}
    patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.16.0"), version="0.16.0", scheduler=no_peak,
                lr=0.01)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and code == 0, report




def test_the_torch_scheduler_step_0_ran_under_is_handed_on_as_a_bounded_text() -> None:
    # a resume hands on step0 as written_step0 shapes it: the key kept (the audit clears a step 0 under one), cut
    under_torch = observed([1e-3], None) | {"scheduler": None, "torch_scheduler": "torch.optim." + "x" * 300}
    assert record_data.written_step0(under_torch)["torch_scheduler"] == ("torch.optim." + "x" * 300)[:200]
    assert "torch_scheduler" not in record_data.written_step0(observed([0.0], [0.0]))
