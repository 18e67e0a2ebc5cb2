"""The audit's verdict from a bound record (cli/audit/judge.py, verdicts.py): what a record that proves step 0
clears, what it cannot, and how its numbers are read.
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import one
from records import observed, patched_run, write_record

from accelerate_warmup_patch import record_data

# Numbers ----------------------------------------------------------------------------------------------------

def test_non_finite_lrs_are_written_as_strings_and_read_back() -> None:
    encoded = [record_data.encode_lr(v) for v in (math.nan, math.inf, -math.inf, 0.5)]
    assert encoded == ["nan", "inf", "-inf", 0.5] and json.dumps(encoded, allow_nan=False)
    decoded = record_data.decode_lrs(encoded)
    assert decoded is not None and math.isnan(decoded[0]) and decoded[1:] == [math.inf, -math.inf, 0.5]
    assert record_data.decode_lrs(["zero"]) is None and record_data.decode_lrs([True]) is None
    assert record_data.same_lrs([math.nan], [math.nan]) and not record_data.same_lrs([math.nan], [0.0])


# Verdicts from a bound record --------------------------------------------------------------------------------

def test_a_bound_record_whose_step0_ran_at_the_warmup_start_is_not_affected(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and code == 0, report
    assert report["step0_lrs"] == [0.0] and report["newest_step0_lrs"] == [0.0]
    assert "observed by accelerate-warmup-patch 0.6.0 (reset)" in report["why"] and "fixed it" in report["why"]
    assert report["record"]["bound"] is True


def test_a_copy_of_a_patched_run_is_still_not_affected(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    _, report = one(tmp_path / "copy")
    assert report["verdict"] == "not affected", report


def test_a_step0_that_ran_at_a_restored_lr_is_affected_whatever_the_patch_set(tmp_path: Path) -> None:
    # a patched job resumed from a save made at step 0 by an unpatched one: the restore put the lr back
    patched_run(tmp_path / "run", observed([0.001], [0.0]))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert report["step0_lr"] == 0.001 and report["newest_step0_lr"] == 0.0
    assert "step 0 ran at 0.001 (observed by" in report["why"] and "0.19.8 runs it at 0" in report["why"]


def test_an_unpatched_rerun_over_a_patched_runs_folder_is_not_that_records_save(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    kept = (tmp_path / "run" / "global_step6" / record_data.RECORD_FILE).read_text()
    files.write_run(tmp_path / "run", lr=2e-3)  # the rerun: same tag, same step count, other model states
    (tmp_path / "run" / "global_step6" / record_data.RECORD_FILE).write_text(kept)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1, report
    assert report["step0_lr"] == 0.002
    assert any("ignored, not that save's record" in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize(("change", "said"), [
    ({"deepspeed": "0.19.8"}, "names DeepSpeed 0.19.8, the checkpoint 0.15.2"),
    ({"scheduler": {"class": "WarmupCosineLR", "step0": "fixed", "lrs_before": None, "lrs_after": None}},
     "names scheduler WarmupCosineLR, the checkpoint's config WarmupLR"),
    ({"global_steps": 3}, "names global step 3 and the checkpoint 6"),
])
def test_a_record_that_disagrees_with_the_save_beside_it_is_ignored(tmp_path: Path, change: dict[str, Any],
                                                                    said: str) -> None:
    # a record copied beside another run's files: its binding may even match (the same bytes), its facts do not
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    record = {**json.loads((folder / record_data.RECORD_FILE).read_text()), **change}
    write_record(folder, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None, report
    assert any(said in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize("breakage", [
    {"bound_to": None}, {"bound_to": {"file": "mp_rank_00_model_states.pt", "size": "12"}},
    {"step0": {"how": "guessed"}}, {"step0": {"how": "observed", "deepspeed": "0.15.2", "lrs": ["zero"],
                                              "global_steps": 0}},
    {"step0": {"how": "observed", "deepspeed": "0.15.2", "lrs": [0.0], "global_steps": None}},
    {"step0": observed([], [])}, {"step0": observed([0.0], [0.0, 0.0])},
    {"global_steps": None}, {"global_steps": "6"}, {"loads": {"tag": "x"}}, {"record": True},
    {"first_step": {"observed": "yes"}},
])
def test_a_record_2_with_a_field_of_the_wrong_type_is_absent_with_a_note(tmp_path: Path,
                                                                          breakage: dict[str, Any]) -> None:
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    write_record(folder, {**json.loads((folder / record_data.RECORD_FILE).read_text()), **breakage})
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1, report
    assert any("ignored, not a record this audit reads" in note for note in report["notes"]), report["notes"]


def test_an_unbound_record_never_clears_a_run(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]), bound=False)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "bound to no file" in report["why"] and report["step0_lr"] is None
    assert any("unbound (a checkpoint engine that writes later)" in note for note in report["notes"])


def test_an_unbound_warn_record_whose_warning_was_about_later_steps_names_no_harm_of_step_0(tmp_path: Path) -> None:
    # found by the run-history search (0.15.2 with 0.15.3 beside it, seed 99): a 2-rank job on 0.15.3, rank 0 in
    # warn mode, rank 1 unarmed (so the record is a claim); 0.15.3 starts a one-group WarmupCosineLR as 0.19.8 does,
    # and warn mode warned only that reset would answer the cosine past total_num_steps otherwise (#8142): not a
    # step the run had reached, which the files' own reading judges
    cosine = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "cos_min_ratio": 0.1,
                                                    "total_num_steps": 20, "warmup_num_steps": 5}}
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.15.3", patch_did="warned"),
                         version="0.15.3", scheduler=cosine, bound=False, mode="warn", global_steps=2,
                         tag="global_step2")
    record = json.loads((folder / record_data.RECORD_FILE).read_text())
    record["scheduler"] |= {"class": "WarmupCosineLR", "step0": "warned", "lrs_before": [0.0], "lrs_after": [0.0]}
    write_record(folder, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "warned, not fixed" not in report["why"], report
    assert any("warned, changing nothing" in note for note in report["notes"]), report


def test_an_unbound_record_that_names_a_harm_counts(tmp_path: Path) -> None:
    folder = patched_run(tmp_path / "run", observed([0.001], [0.0]), bound=False, mode="warn")
    record = json.loads((folder / record_data.RECORD_FILE).read_text())
    record["scheduler"] |= {"step0": "warned"}
    write_record(folder, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and "warned, not fixed" in report["why"], report


