"""A run's step 0 handed along its chain of saves (cli/audit/chain.py): resumes, upgrades, gaps and claims.
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import audit, one
from records import COSINE, observed, patched_run, unrecorded, write_record

from accelerate_warmup_patch import record_data

# The chain ---------------------------------------------------------------------------------------------------


def test_an_upgrade_resume_with_the_early_saves_deleted_is_judged_on_the_release_that_ran_step_0(
        tmp_path: Path) -> None:
    # unpatched on 0.15.2, resumed patched on 0.19.8, global_step3 deleted: the newest record alone tells
    patched_run(tmp_path / "run", unrecorded("0.15.2"), version="0.19.8")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert report["step0_deepspeed_version"] == "0.15.2" and report["step0_lr"] == 0.001, report
    assert "holds no record" in report["why"]


@pytest.mark.parametrize(("first_lrs", "verdict"), [([0.0], "unknown"), ([0.001], "affected")])
def test_a_chain_with_a_gap_is_unknown_where_an_earlier_bound_record_proves_step_0(
        tmp_path: Path, first_lrs: list[float], verdict: str) -> None:
    # patched start (global_step3), unpatched resume (global_step6, no record), patched resume (global_step9): the
    # newest chain says step 0 ran unrecorded; the first save proves it ran at 0.0, unless global_step6's process
    # started afresh
    patched_run(tmp_path / "run", observed(first_lrs, [0.0]), tag="global_step3", global_steps=3)
    files.write_run(tmp_path / "run", tag="global_step6", global_steps=6)
    gap = {**unrecorded("0.15.2", 6), "tag": "global_step6", "why": "the save it resumed from (global_step6) holds "
           "no record: step 0 ran unpatched, or patched by 0.4.0 or older"}
    patched_run(tmp_path / "run", gap, tag="global_step9", global_steps=9)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == verdict, report
    if verdict == "unknown":
        assert code == 0 and "the chain has a gap" in report["why"] and "global_step3" in report["why"], report
        assert report["differences"] == [] and report["step0_lr"] is None, report


def test_a_gap_under_custom_tags_is_unknown_where_the_same_engines_earlier_tag_proves_step_0(tmp_path: Path) -> None:
    # the same shape under custom tags (epoch3, epoch6, epoch9: each tag an engine of its own, tests/histories.py
    # seed 91 found it): epoch9's chain says step 0 ran unrecorded in epoch6; epoch3, the same model at fewer steps,
    # proves it ran at 0.0 if epoch6's process resumed from it
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="epoch3", global_steps=3)
    files.write_run(tmp_path / "run", tag="epoch6", global_steps=6)
    gap = {**unrecorded("0.15.2", 6), "tag": "epoch6", "why": "the save it resumed from (epoch6) holds no record: "
           "step 0 ran unpatched, or patched by 0.4.0 or older"}
    patched_run(tmp_path / "run", gap, tag="epoch9", global_steps=9)
    _, reports = audit(tmp_path / "run")
    newest = next(report for report in reports if report["engine"] == "epoch9")
    assert newest["verdict"] == "unknown", reports
    assert "the chain has a gap" in newest["why"] and "epoch3" in newest["why"], newest
    assert "affected" not in [report["verdict"] for report in reports], reports


@pytest.mark.parametrize(("earlier", "verdict"), [("0.19.8", "unknown"), ("0.15.2", "affected")])
def test_an_unrecorded_save_beside_an_earlier_save_of_its_model_from_a_fixed_release_is_unknown(
        tmp_path: Path, earlier: str, verdict: str) -> None:
    # epoch2 (2 steps) and epoch3 (3 steps, DeepSpeed 0.15.2), no record, the same model under custom tags (or a
    # universal checkpoint beside its source run: tests/histories.py seed 90 found it): where epoch2's release runs
    # step 0 as 0.19.8 does, epoch3 may have continued it, so its table reading is not proof of harm
    files.write_run(tmp_path / "run", tag="epoch2", global_steps=2, version=earlier)
    files.write_run(tmp_path / "run", tag="epoch3", global_steps=3, version="0.15.2")
    _, reports = audit(tmp_path / "run")
    newest = next(report for report in reports if report["engine"] == "epoch3")
    assert newest["verdict"] == verdict, newest
    if verdict == "unknown":
        assert "if this run continued it" in newest["why"] and "epoch2" in newest["why"], newest


def test_a_chain_that_ends_in_an_unknown_release_is_unknown(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", unrecorded(None), version="0.19.8")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0 and "release that ran step 0 is not known" in report["why"]


@pytest.mark.parametrize(("how", "fixed"), [("record-1", "unknown"), ("unbound", "unknown"),
                                           ("unobserved", "not affected")])
def test_a_chain_that_ends_in_a_claim_clears_only_where_the_release_needs_no_fix(tmp_path: Path, how: str,
                                                                                 fixed: str) -> None:
    # an unobserved step 0 ran in the recording process, on the release it names; a loaded save's claim names that
    # save's release, which may not be the one that ran step 0: only a config every release clears clears it
    for release, verdict in (("0.15.2", "unknown"), ("0.19.8", fixed)):
        patched_run(tmp_path / release, {"how": how, "deepspeed": release, "global_steps": 3, "why": f"a {how}"},
                    version="0.19.8")
        _, report = one(tmp_path / release)
        assert report["verdict"] == verdict, (release, report)


def test_a_fixed_start_then_an_unpatched_cosine_past_its_total_is_affected_and_both_are_named(
        tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step3", global_steps=3, scheduler=COSINE)
    (tmp_path / "run" / "latest").unlink()
    files.write_run(tmp_path / "run", tag="global_step20", global_steps=20, scheduler=COSINE)  # unpatched resume
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert "as 0.19.8 runs it" in report["why"] and "total_num_steps" in report["why"], report
    # the newest save has no record: a resume of the fixed start, or a fresh unpatched start (the files cannot tell)
    assert "the files cannot tell which" in report["why"] and report["step0_lr"] is None


@pytest.mark.parametrize(("newest", "steps", "verdict", "later"), [
    ("0.19.8+local", 20, "unknown", "unknown"), ("0.18.9+local", 20, "unknown", "unknown"),
    ("0.18.10", 20, "unknown", "unknown"), ("0.19.8+local", 6, "unknown", None),
    ("0.16.5+91d1c55", 20, "affected", "affected"), ("0.19.8", 20, "unknown", None),
])
def test_the_changes_after_step_0_on_a_build_are_never_the_rows_of_the_number_it_names(
        tmp_path: Path, newest: str, steps: int, verdict: str, later: str | None) -> None:
    """A proven step 0, then an unpatched process of a build saved past the cosine's total: its number says nothing
    sure about its code (a 0.18.9+local may carry #8142, a 0.19.8+local predate it), so the cosine's later steps are
    unknown with the reason, never the table's row of that number (which called the first affected); where no step
    went past the total, they are not named; a vendor build whose code is known (DeeperSpeed v3.0: upstream 0.16.5's
    schedulers, before #8142) is judged as the release it carries. (A build's save without a record is unknown in
    any case: its process may have started afresh, unpatched.)"""
    patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.19.8"), tag="global_step3", global_steps=3,
                version="0.19.8", scheduler=COSINE)
    (tmp_path / "run" / "latest").unlink()
    files.write_run(tmp_path / "run", tag=f"global_step{steps}", global_steps=steps, version=newest,
                    scheduler=COSINE)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == verdict, report["why"]
    named = [why for why in report["why"].split("; ") if "ratio past warmup (#8142)" in why]
    assert bool(named) == (later is not None), report["why"]
    if later == "unknown":
        assert f"DeepSpeed {newest} is " in named[0] and "the table does not say whether its code has it" in named[0]
        assert not report["differences"], report
    elif later == "affected":
        assert any("ratio past warmup (#8142)" in difference for difference in report["differences"]), report


def test_a_record_with_non_finite_lrs_is_read_and_reported_as_such(tmp_path: Path) -> None:
    patched_run(tmp_path / "inf", observed([0.0], [0.0]))  # an inf optimizer lr, fixed: lrs_before ["inf"]
    folder = tmp_path / "inf" / "global_step6"
    record = json.loads((folder / record_data.RECORD_FILE).read_text())
    record["scheduler"]["lrs_before"] = ["inf"]
    write_record(folder, record)
    patched_run(tmp_path / "nan", observed(["nan"], ["nan"]))  # a NaN warmup_min_lr: step 0 ran at NaN
    code, reports = audit(tmp_path / "inf", tmp_path / "nan")
    assert code == 0
    assert [r["verdict"] for r in reports] == ["not affected", "not affected"], reports
    assert reports[0]["record"]["scheduler"]["lrs_before"] == ["inf"]
    assert reports[1]["step0_lrs"] == ["nan"] and reports[1]["step0_lr"] == "nan"
    _, text = audit(tmp_path / "nan", text=True)
    assert "step 0 ran at nan (observed by" in text, text




# Which release ran step 0 (#55: the last excused reading) ---------------------------------------------------------

def test_the_releases_a_step_0_could_have_run_on_are_one_of_each_span_where_the_class_existed() -> None:
    from accelerate_warmup_patch.cli.audit.judge import behavior_releases

    assert behavior_releases("WarmupLR")[:4] == ("0.9.0", "0.12.3", "0.12.4", "0.15.3")
    assert behavior_releases("WarmupCosineLR")[0] == "0.12.3"  # the class came in 0.12.3
    assert behavior_releases("WarmupLR")[-1] == "0.19.4"


@pytest.mark.parametrize(("scheduler", "verdict"), [
    (None, "unknown"),  # the default WarmupLR from 0 under an optimizer lr of 0.001: 0.15.2 ran step 0 at 0.001
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-3, "warmup_num_steps": 5}},
     "not affected"),  # starts at the optimizer's lr: every release runs step 0 at 0.001
    ({"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01}}, "not affected"),
])
def test_a_run_with_no_record_on_a_fixed_release_is_cleared_only_where_every_release_would_clear_it(
        tmp_path: Path, scheduler: dict[str, object] | None, verdict: str) -> None:
    # an unpatched 0.19.8 run, or an unpatched 0.15.2 run resumed unpatched on 0.19.8 into a new folder: the same files
    if scheduler is None:
        files.write_run(tmp_path / "run", version="0.19.8")
    else:
        files.write_run(tmp_path / "run", version="0.19.8", scheduler=scheduler)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == verdict and code == 0, report
    if verdict == "unknown":
        assert "if DeepSpeed 0.19.8 ran step 0; but no record says which release did" in report["why"], report
        assert "on DeepSpeed 0.9.0 this run would be affected" in report["why"] and report["step0_lr"] is None
    # a patched process's record of the same run proves it
    patched_run(tmp_path / "patched", observed([0.0], [0.0], deepspeed="0.19.8"), version="0.19.8")
    assert one(tmp_path / "patched")[1]["verdict"] == "not affected"


def test_a_patched_resume_of_an_unrecorded_fixed_save_hands_on_that_it_cannot_tell(tmp_path: Path) -> None:
    # the record of a resume names the loaded save's release, not the one that ran step 0
    patched_run(tmp_path / "run", unrecorded("0.19.8"), version="0.19.8")
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "no record says which release did" in report["why"], report
