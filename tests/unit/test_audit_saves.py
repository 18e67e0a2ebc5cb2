"""Every save in a folder counts (cli/audit/saves.py): reruns, saves latest does not name, custom tags, other
models' tags.
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
from records import observed, patched_run

# Every save in a folder counts (#47 item 2) -------------------------------------------------------------------

@pytest.mark.parametrize(("version", "verdict"), [("0.15.2", "unknown"), ("0.19.8", "unknown")])
def test_a_checkpoint_step_rerun_that_stops_earlier_keeps_the_folder_from_not_affected(
        tmp_path: Path, version: str, verdict: str) -> None:
    # on 0.19.8 too: the rerun may have resumed a save of an older release (no record says which release ran it)
    # the HF Trainer's layout: a patched run saved checkpoint-3, -6, -9; an unpatched rerun from scratch saved
    # checkpoint-3 and -6 over them (the old records stay, bound to other bytes) and stopped: checkpoint-9 is newest
    for step in (3, 6, 9):
        patched_run(tmp_path / "out" / f"checkpoint-{step}", observed([0.0], [0.0], deepspeed=version),
                    tag=f"global_step{step}", global_steps=step, version=version)
    for step in (3, 6):
        save = tmp_path / "out" / f"checkpoint-{step}"
        files.write_run(save, tag=f"global_step{step}", global_steps=step, version=version, lr=2e-3)
    code, report = one(tmp_path / "out")
    assert report["verdict"] == verdict, report
    if verdict == "unknown":
        assert code == 0 and "global_step3" in report["why"] and "started afresh unpatched" in report["why"], report
        assert report["step0_lr"] is None


def test_saves_that_latest_does_not_name_still_count(tmp_path: Path) -> None:
    # a patched run saved global_step9 (latest names it); an unpatched rerun with save_latest=False saved
    # global_step2 and global_step4 beside it: latest is a hint, not the proof
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step9", global_steps=9)
    for step in (2, 4):
        files.write_run(tmp_path / "run", tag=f"global_step{step}", global_steps=step, latest=False)
    assert (tmp_path / "run" / "latest").read_text() == "global_step9"
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "global_step2" in report["why"] and "global_step4" in report["why"], report


def test_an_older_bound_record_that_observed_harm_makes_the_folder_affected(tmp_path: Path) -> None:
    # a warn run saved global_step3 (step 0 at the peak, observed); a reset rerun from scratch saved global_step6
    patched_run(tmp_path / "run", observed([0.001], [0.0], patch_did="warned"), tag="global_step3", global_steps=3,
                mode="warn")
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step6", global_steps=6)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert "the record of the save global_step3 says" in report["why"], report


def test_a_plain_patched_run_with_many_saves_and_its_copy_are_not_affected(tmp_path: Path) -> None:
    for step in (0, 3, 6, 9):
        step0 = observed([0.0], [0.0]) if step else {"how": "no-step-yet", "deepspeed": "0.15.2"}
        patched_run(tmp_path / "run", step0, tag=f"global_step{step}", global_steps=step)
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    code, reports = audit(tmp_path / "run", tmp_path / "copy")
    assert [r["verdict"] for r in reports] == ["not affected"] * 2 and code == 0, reports


def test_custom_tags_across_an_upgrade_resume_are_weighed_as_one_engine(tmp_path: Path) -> None:
    # an unpatched run saved epoch1, epoch2 on 0.15.2 and, resumed on 0.19.8, epoch3, epoch4: each tag name is an
    # engine's line, but the saves hold one model at four step counts: epoch3's step 0 ran on 0.15.2
    for epoch, version in ((1, "0.15.2"), (2, "0.15.2"), (3, "0.19.8"), (4, "0.19.8")):
        files.write_run(tmp_path / "run", tag=f"epoch{epoch}", global_steps=3 * epoch, version=version)
    code, reports = audit(tmp_path / "run")
    verdicts = {r["engine"]: r["verdict"] for r in reports}
    assert verdicts == {"epoch1": "affected", "epoch2": "affected", "epoch3": "unknown", "epoch4": "unknown"}, \
        reports
    assert "the save epoch1" in reports[2]["why"] and code == 1, reports[2]


@pytest.mark.parametrize(("version", "verdict"), [("0.15.2", "unknown"), ("0.19.8", "unknown")])
def test_a_patched_start_resumed_unpatched_under_custom_tags_is_never_affected(tmp_path: Path, version: str,
                                                                               verdict: str) -> None:
    # a patched run saved epoch1, epoch2; resumed unpatched, it saved epoch3, epoch4: their step 0 ran in the
    # patched process (epoch2's bound record), unless that process started afresh or resumed a save of another
    # release (on 0.19.8 too), which the files cannot tell
    for epoch in (1, 2):
        patched_run(tmp_path / "run", observed([0.0], [0.0]), tag=f"epoch{epoch}", global_steps=3 * epoch)
    for epoch in (3, 4):
        files.write_run(tmp_path / "run", tag=f"epoch{epoch}", global_steps=3 * epoch, version=version)
    reports = {r["engine"]: r for r in audit(tmp_path / "run")[1]}
    assert {engine: reports[engine]["verdict"] for engine in ("epoch3", "epoch4")} == {"epoch3": verdict,
                                                                                      "epoch4": verdict}, reports
    assert Path(reports["epoch3"]["step0_checkpoint"]).parent.name == "epoch2", reports["epoch3"]
    assert any("epoch2 holds the same model" in note for note in reports["epoch4"]["notes"]), reports["epoch4"]


def test_another_models_tags_in_the_folder_do_not_count_against_an_engine(tmp_path: Path) -> None:
    other = files.Call(files.Global("collections", "OrderedDict"), ([["head.weight", files.Tensor((2, 2))]],))
    files.write_run(tmp_path / "run", tag="pytorch_model", global_steps=6, version="0.19.8",
                    scheduler={"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}})
    files.write_run(tmp_path / "run", tag="critic", global_steps=3, client_state={"module": other})
    reports = {r["engine"]: r for r in audit(tmp_path / "run")[1]}
    assert reports["pytorch_model"]["verdict"] == "not affected", reports
    assert reports["critic"]["verdict"] == "affected", reports


