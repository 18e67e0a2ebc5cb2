"""Converted saves (cli/audit/saves.py, loaded_record.py): universal checkpoints beside and away from their source.
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import audit, one
from records import Engine, observed, patched_run, record2, write_record, zero3_save

from accelerate_warmup_patch import loaded_record, record_data, record_writer
from accelerate_warmup_patch.state import STATE

# Converted saves (#47 item 5) -----------------------------------------------------------------------------------

def _universal(save_dir: Path, source: str = "global_step6") -> Path:
    """What ds_to_universal leaves beside a save: <tag>_universal with a copy of its *model_states.pt files (not the
    record) and the parameters' fragments under zero/, and latest_universal naming it."""
    universal = save_dir / f"{source}_universal"
    (universal / "zero" / "0.weight").mkdir(parents=True)
    for file in (save_dir / source).glob("*model_states.pt"):
        shutil.copy2(file, universal / file.name)
    (universal / "zero" / "0.weight" / "fp32.pt").write_bytes(b"fragment")
    (save_dir / "latest_universal").write_text(universal.name)
    return universal


def test_a_universal_checkpoint_of_a_patched_save_is_judged_from_that_saves_record(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    _universal(tmp_path / "run")
    code, reports = audit(tmp_path / "run")
    verdicts = {r["engine"]: r["verdict"] for r in reports}
    assert verdicts == {"global_step*": "not affected", "global_step6_universal": "not affected"}, reports
    universal = next(r for r in reports if r["engine"] == "global_step6_universal")
    assert any("a copy of global_step6's" in note for note in universal["notes"]), universal
    assert code == 0


def test_a_universal_checkpoint_whose_model_states_hold_no_weights_is_unknown(tmp_path: Path) -> None:
    tag = zero3_save(tmp_path / "run", 1e-3)
    write_record(tag, record2(tag, observed([0.0], [0.0])))
    _universal(tmp_path / "run")
    _, reports = audit(tmp_path / "run")
    universal = next(r for r in reports if r["engine"] == "global_step6_universal")
    assert universal["verdict"] == "unknown" and "hold no weights" in universal["why"], universal


def test_a_universal_checkpoint_of_another_runs_save_is_not_vouched_for(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    files.write_run(tmp_path / "other", lr=2e-3)
    shutil.copytree(_universal(tmp_path / "other"), tmp_path / "run" / "global_step6_universal")
    _, reports = audit(tmp_path / "run")
    universal = next(r for r in reports if r["engine"] == "global_step6_universal")
    assert universal["verdict"] == "affected", universal


@pytest.mark.parametrize(("zero3", "how"), [(False, "observed"), (True, "unbound")])
def test_a_resume_from_a_universal_checkpoint_carries_the_step_0_of_the_save_it_came_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zero3: bool, how: str) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    if zero3:
        tag = zero3_save(tmp_path / "run", 1e-3)
        write_record(tag, record2(tag, observed([0.0], [0.0])))
    else:
        patched_run(tmp_path / "run", observed([0.0], [0.0]))
    universal = _universal(tmp_path / "run")
    engine = Engine(6)
    states = next(universal.glob("*model_states.pt"))
    loaded_record.loaded(engine, str(states), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == how, history
    if zero3:
        assert "hold no weights" in history.step0["why"], history
    else:
        assert history.step0["lrs"] == [0.0]


@pytest.mark.parametrize(("patched", "version", "verdict"), [(True, "0.15.2", "unknown"), (False, "0.15.2", "unknown"),
                                                             (True, "0.19.8", "unknown")])
def test_a_universal_checkpoint_written_into_another_folder_is_unknown_where_the_fix_was_needed(
        tmp_path: Path, patched: bool, version: str, verdict: str) -> None:
    # ds_to_universal --output_folder elsewhere (#47 item 3): the record stays beside the source, out of sight
    if patched:
        patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed=version), version=version)
    else:
        files.write_run(tmp_path / "run", version=version)
    universal = _universal(tmp_path / "run")
    (tmp_path / "converted").mkdir()
    shutil.move(str(universal), tmp_path / "converted" / universal.name)
    (tmp_path / "converted" / "latest_universal").write_text(universal.name)
    code, report = one(tmp_path / "converted")
    assert report["verdict"] == verdict, report
    if verdict == "unknown":
        assert "source save is not in this folder" in report["why"] and code == 0, report


def test_a_universal_checkpoint_of_an_unrecorded_save_beside_it_is_judged_as_that_save(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run")
    _universal(tmp_path / "run")
    _, reports = audit(tmp_path / "run")
    assert {r["engine"]: r["verdict"] for r in reports} == {"global_step*": "affected",
                                                            "global_step6_universal": "affected"}, reports


def test_a_universal_checkpoint_beside_its_patched_source_casts_no_doubt_on_a_later_save(tmp_path: Path) -> None:
    # found by the run-history search (0.15.2, seed 92): custom tags, epoch2 patched and converted beside it, a
    # patched resume saved epoch3; the copy, weighed as the same model's save, read as a fresh unpatched start
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="epoch2", global_steps=2)
    _universal(tmp_path / "run", "epoch2")
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="epoch3", global_steps=3)
    _, reports = audit(tmp_path / "run")
    verdicts = {r["engine"]: r["verdict"] for r in reports}
    assert verdicts == {"epoch2": "not affected", "epoch2_universal": "not affected", "epoch3": "not affected"}, \
        reports
    # a copy of another run's save is no copy of epoch2: it still may be a fresh unpatched start
    files.write_run(tmp_path / "other", tag="epoch2", global_steps=2, lr=2e-3)
    shutil.copy2(tmp_path / "other" / "epoch2" / "mp_rank_00_model_states.pt",
                 tmp_path / "run" / "epoch2_universal" / "mp_rank_00_model_states.pt")
    _, reports = audit(tmp_path / "run")
    epoch3 = next(r for r in reports if r["engine"] == "epoch3")
    assert epoch3["verdict"] == "unknown" and "epoch2_universal" in epoch3["why"], epoch3


class _UniversalEngine(Engine):
    def load_universal_checkpoint(self) -> bool:
        return True


def test_a_resume_from_a_universal_checkpoint_with_its_source_elsewhere_is_unbound_not_unrecorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    universal = _universal(tmp_path / "run")
    (tmp_path / "converted").mkdir()
    moved = Path(shutil.move(str(universal), tmp_path / "converted" / universal.name))
    for engine, how in ((_UniversalEngine(6), "unbound"), (Engine(6), "unrecorded")):
        loaded_record.loaded(engine, str(next(moved.glob("*model_states.pt"))), {"ds_version": "0.15.2"})
        history = loaded_record.history(engine)
        assert history is not None and history.step0["how"] == how, history


@pytest.mark.parametrize(("groups", "how", "verdict"), [(600, "observed", "not affected"),
                                                        (5000, "unobserved", "unknown")])
def test_a_record_of_many_param_groups_is_never_written_past_the_bound_its_readers_accept(
        tmp_path: Path, groups: int, how: str, verdict: str) -> None:
    # each group's lr appears up to five times (#47): 600 groups of long lrs passed 64 KiB, and the job and the audit
    # refused the record the writer wrote
    files.write_run(tmp_path / "run")
    tag = tmp_path / "run" / "global_step6"
    lrs = [index * 1.2345678901e-7 for index in range(groups)]
    record = record2(tag, observed(lrs, lrs))
    record["scheduler"] |= {"lrs_before": lrs, "lrs_after": lrs}
    record["first_step"] = {"observed": True, "lrs": lrs, "global_steps": 0, "skipped_steps": 0,
                            "last_batch_iteration": 0}
    record_writer.write(str(tag), record)
    data = (tag / record_data.RECORD_FILE).read_bytes()
    assert len(data) <= record_data.RECORD_BYTES
    written = record_data.valid_record(record_data.parse(data))
    assert written["step0"]["how"] == how, written["step0"]
    _, report = one(tmp_path / "run")
    assert report["verdict"] == verdict and report["record"]["bound"] is True, report
    if how == "unobserved":
        assert "5000 param groups" in report["why"], report
