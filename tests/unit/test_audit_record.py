"""`audit` reads 0.5.0's record (accelerate_warmup_patch.json in the tag folder, record 1: bound to no file, so a
claim that never clears a run on its own; record 2: tests/unit/test_record_binding.py and its neighbours) and
judges step 0 as it happened: from the earliest save present, naming both releases where a run folder holds saves
of two, and saying so where no optimizer step ran. Synthetic checkpoints of DeepSpeed 0.15.2 (step 0 at the
optimizer's lr 0.001, 0.19.8 at warmup_min_lr 0.0) and 0.19.8, written with the standard library alone.
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


def record(step0: str | None, before: list[float] | None = None, after: list[float] | None = None,
           mode: str = "reset", deepspeed: str = "0.15.2", **extra: Any) -> dict[str, Any]:
    """A record as the contract in issue 35 words it (written by the runtime's `mark`)."""
    scheduler = None if step0 is None else {"class": "WarmupLR", "step0": step0, "lrs_before": before,
                                            "lrs_after": after, "why": "one plain sentence"}
    return {"record": 1, "package": "accelerate-warmup-patch", "version": "0.5.0", "mode": mode,
            "deepspeed": deepspeed, "reference": "0.19.8", "global_steps": 6, "scheduler": scheduler, **extra}


def test_a_record_1_saying_fixed_clears_nothing_it_is_bound_to_no_file(tmp_path: Path) -> None:
    # 0.5.0's record: a rerun or a copy leaves it beside other saves, so "fixed" there proves nothing (#41)
    files.write_run(tmp_path / "run", record=record("fixed", [0.001], [0.0]))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "bound to no file" in report["why"] and "unpatched, this run would be affected" in report["why"], report
    assert report["step0_lr"] is None
    assert report["record"]["scheduler"]["step0"] == "fixed" and report["record"]["mode"] == "reset"
    _, text = audit(tmp_path / "run", text=True)
    assert "record: accelerate-warmup-patch 0.5.0 (reset) on DeepSpeed 0.15.2: WarmupLR step 0 fixed" in text


def test_a_warn_run_is_affected_warned_not_fixed(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", record=record("warned", [0.001], [0.0], mode="warn"))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and "warned, not fixed" in report["why"] and code == 1, report
    assert report["step0_lr"] == 0.001


def test_a_record_1_on_a_release_that_needs_no_fix_is_unknown_as_it_does_not_say_which_release_ran_step_0(
        tmp_path: Path) -> None:
    # a record 1 tells what the patch did when the scheduler was built, not whether that process ran step 0: it may
    # have resumed a save of an older release
    files.write_run(tmp_path / "run", version="0.19.8", record=record("as-release", [0.0], [0.0],
                                                                       deepspeed="0.19.8"))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "as on 0.19.8" in report["why"] and code == 0, report
    assert "no record says which release did" in report["why"] and report["step0_lrs"] is None, report


@pytest.mark.parametrize(("version", "because"), [("0.15.2", "bound to no file"),
                                               ("0.19.8", "no record says which release did")])
def test_step0_in_an_earlier_process_is_unknown(tmp_path: Path, version: str, because: str) -> None:
    # on 0.19.8 too: the earlier process may have run on another release
    files.write_run(tmp_path / "run", version=version, record=record("earlier-process", deepspeed=version))
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and because in report["why"] and report["step0_lr"] is None, report


@pytest.mark.parametrize("step0", ["left", "unknown"])
def test_left_and_unknown_are_judged_as_an_unpatched_run(tmp_path: Path, step0: str) -> None:
    files.write_run(tmp_path / "run", record=record(step0, [0.001] if step0 == "left" else None))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001 and code == 1, report
    assert any(f"recorded step 0 as {step0!r}" in note for note in report["notes"]), report


def test_no_record_is_judged_as_today(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1
    assert any("step 0 ran before the save global_step6" in note for note in report["notes"]), report


@pytest.mark.parametrize("content", [
    json.dumps(record("fixed", [0.001], [0.0], record=2)),
    json.dumps({**record("fixed", [0.001], [0.0]), "package": "another"}),
    json.dumps(record("fixed", [0.001], ["zero"])),  # type: ignore[list-item]  # on purpose
    json.dumps(record("mended", [0.001], [0.0])),
    json.dumps(record("fixed", [0.001], [0.0], global_steps=None)),  # no, null or text step counts (#41)
    json.dumps(record("fixed", [0.001], [0.0], global_steps="6")),
    json.dumps({k: v for k, v in record("fixed", [0.001], [0.0]).items() if k != "global_steps"}),
    json.dumps(record("fixed", [0.001], [0.0], global_steps=True)),
    "{not json",
    "[" * 100_000,
    json.dumps(record("fixed", [0.001], [0.0])) + " " * 70_000,
    "FIFO",
])
def test_a_malformed_record_is_ignored_with_a_note(tmp_path: Path, content: str) -> None:
    files.write_run(tmp_path / "run")
    path = tmp_path / "run" / "global_step6" / "accelerate_warmup_patch.json"
    if content == "FIFO":
        os.mkfifo(path)
    else:
        path.write_text(content)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1, report
    assert any("accelerate_warmup_patch.json: ignored" in note for note in report["notes"]), report


def test_unknown_keys_of_a_record_are_ignored(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", record=record("warned", [0.001], [0.0], mode="warn", later_key={"x": 1}))
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"]["mode"] == "warn", report


def test_a_run_with_no_optimizer_step_says_so(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", tag="global_step0", global_steps=0)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and "0 optimizer steps" in report["why"] and code == 0, report
    assert report["step0_lr"] is None and report["step0_lrs"] is None


def _own_loop(*, iteration: int, stepped: bool) -> dict[str, Any]:
    """What a script that calls engine.backward() and then steps the optimizer and the scheduler itself leaves:
    global_steps 0, the scheduler at ``iteration``, the optimizer's state built at its first step (``stepped``)."""
    state = {0: {"step": files.Tensor(()), "exp_avg": files.Tensor((4, 4))}} if stepped else {}
    return {"lr_scheduler": {"last_batch_iteration": iteration},
            "optimizer": {"state": state, "param_groups": [{"lr": 1e-3, "params": [0, 1]}]}}


def test_an_optimizer_stepped_outside_engine_step_is_judged_as_a_run_that_stepped(tmp_path: Path) -> None:
    # global_steps stays 0; the scheduler's state shows 3 steps and the optimizer's state shows it stepped
    files.write_run(tmp_path / "run", tag="global_step0", global_steps=0,
                    client_state=_own_loop(iteration=2, stepped=True))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1 and report["step0_lr"] == 0.001, report
    assert "no step ran" not in report["why"], report
    assert any("global_steps is 0, but its optimizer's state shows it stepped" in n for n in report["notes"]), report


def test_a_scheduler_that_moved_without_an_optimizer_step_in_the_file_is_unknown_not_no_step(tmp_path: Path) -> None:
    # the optimizer's state is not in this file (ZeRO keeps it elsewhere, or it was not saved): the scheduler moved,
    # by an optimizer stepped outside engine.step() or by user code stepping it ahead; the file cannot say which
    files.write_run(tmp_path / "run", tag="global_step0", global_steps=0,
                    client_state={**_own_loop(iteration=2, stepped=False), "optimizer": None})
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0 and report["step0_lr"] is None, report
    assert "last_batch_iteration is 2" in report["why"] and "if an optimizer step ran, this run is affected" in \
        report["why"], report
    # on a release that starts the warmup as 0.19.8 does, a step or none: unknown all the same, as no record says
    # that release ran the step (a resume of an older release's save leaves these files), never "no step ran"
    files.write_run(tmp_path / "fixed", tag="global_step0", global_steps=0, version="0.19.8",
                    client_state={**_own_loop(iteration=2, stepped=False), "optimizer": None})
    _, report = one(tmp_path / "fixed")
    assert report["verdict"] == "unknown" and "no step ran" not in report["why"], report
    assert "no record says which release did" in report["why"], report


@pytest.mark.parametrize(("moments", "verdict"), [(True, "affected"), (False, "unknown")])
def test_under_zero_the_optimizers_own_states_file_tells_whether_it_stepped(tmp_path: Path, moments: bool,
                                                                            verdict: str) -> None:
    # ZeRO keeps the optimizer's state in zero_pp_rank_0_mp_rank_00_optim_states.pt (optimizer_state_dict): an own
    # loop's save holds Adam's moments there for the rank's fp32 partition
    files.write_run(tmp_path / "run", tag="global_step0", global_steps=0,
                    client_state={**_own_loop(iteration=2, stepped=False), "optimizer": None})
    state = {"exp_avg": files.Tensor((8,)), "exp_avg_sq": files.Tensor((8,))} if moments else {}
    files.write_torch_zip(tmp_path / "run" / "global_step0" / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                          {"optimizer_state_dict": {"base_optimizer_state": [state], "zero_stage": 2},
                           "ds_version": "0.15.2"})
    _, report = one(tmp_path / "run")
    assert report["verdict"] == verdict and "no step ran" not in report["why"], report


def test_a_run_saved_at_step_0_and_later_is_judged_from_its_first_save_with_steps(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", tag="global_step0", global_steps=0, version="0.19.8", latest=False)
    files.write_run(tmp_path / "run", tag="global_step6")
    _, report = one(tmp_path / "run")
    assert report["step0_deepspeed_version"] == "0.15.2", report  # step 0 ran after the save at step 0
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001, report


def test_saves_of_two_releases_judge_step0_from_the_earliest_and_name_both(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", tag="global_step3", global_steps=3, latest=False)
    files.write_run(tmp_path / "run", tag="global_step6", version="0.19.8")
    code, report = one(tmp_path / "run")
    assert report["deepspeed_version"] == "0.19.8" and report["step0_deepspeed_version"] == "0.15.2", report
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001 and code == 1, report
    assert report["checkpoint"].endswith("global_step6/mp_rank_00_model_states.pt")
    assert report["step0_checkpoint"].endswith("global_step3/mp_rank_00_model_states.pt")
    assert any("0.15.2 (global_step3" in note and "0.19.8 (global_step6" in note for note in report["notes"])
    _, text = audit(tmp_path / "run", text=True)
    assert "0.15.2->0.19.8" in text and "step 0 from" in text


def test_a_trainer_run_resumed_on_a_newer_release_is_judged_from_its_first_checkpoint(tmp_path: Path) -> None:
    files.write_run(tmp_path / "out" / "checkpoint-3", tag="global_step3", global_steps=3)
    files.write_run(tmp_path / "out" / "checkpoint-6", tag="global_step6", version="0.19.8")
    _, report = one(tmp_path / "out")
    assert report["path"] == str(tmp_path / "out") and report["step0_deepspeed_version"] == "0.15.2", report
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001


def test_the_cosine_past_total_steps_is_judged_on_the_newest_save(tmp_path: Path) -> None:
    """0.19.3 holds cos_min_ratio past total_num_steps: the last steps, which the newest save saw, decide."""
    cosine = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "warmup_num_steps": 3,
                                                   "total_num_steps": 8, "warmup_type": "linear"}}
    # (0.19.8's newest save: unknown, not "not affected", as no record says which release ran step 0)
    for newest, verdict in (("0.18.9", "affected"), ("0.19.8", "unknown")):
        run = tmp_path / newest
        files.write_run(run, tag="global_step3", global_steps=3, version="0.19.8", scheduler=cosine, latest=False)
        files.write_run(run, tag="global_step20", global_steps=20, version=newest, scheduler=cosine)
        _, report = one(run)
        assert report["step0_deepspeed_version"] == "0.19.8" and report["verdict"] == verdict, report
        assert ("total_num_steps" in report["why"]) == (verdict == "affected"), report


@pytest.mark.parametrize("newest", ["0.18.9+local", "0.19.8+g1a2b3c4"])
def test_the_cosine_past_total_steps_on_a_build_is_unknown_with_the_reason(tmp_path: Path, newest: str) -> None:
    """The newest save's process ran a build: whether its cosine held cos_min_ratio past the total is its code's,
    not the row of the number it names (#46)."""
    cosine = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "warmup_num_steps": 3,
                                                   "total_num_steps": 8, "warmup_type": "linear"}}
    files.write_run(tmp_path / "run", tag="global_step3", global_steps=3, version="0.19.8", scheduler=cosine,
                    latest=False)
    files.write_run(tmp_path / "run", tag="global_step20", global_steps=20, version=newest, scheduler=cosine)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and not report["differences"], report
    assert f"ratio past warmup (#8142): DeepSpeed {newest} is a build, not the release" in report["why"], report


def test_a_path_naming_a_run_already_reported_gets_its_own_line(tmp_path: Path) -> None:
    files.write_run(tmp_path / "runs" / "run")
    (tmp_path / "link").symlink_to(tmp_path / "runs" / "run")  # the same run, named again through a link
    code, reports = audit(tmp_path / "runs" / "run", tmp_path / "link", tmp_path / "runs")
    assert code == 1
    assert [(r["path"], r["verdict"]) for r in reports] == [
        (str(tmp_path / "runs" / "run"), "affected"), (str(tmp_path / "link"), "skipped"),
        (str(tmp_path / "runs"), "skipped")]
    assert reports[1]["why"] == reports[2]["why"] == \
        f"the same run as {tmp_path / 'runs' / 'run'}, reported once (above)"


def test_a_record_left_by_an_earlier_save_into_the_same_tag_folder_is_ignored(tmp_path: Path) -> None:
    # a patched job saved tag "last" at step 6 (record), then an unpatched one saved over it at step 9 (no record)
    files.write_run(tmp_path / "run", tag="last", global_steps=9, record=record("fixed", [0.001], [0.0]))
    code, (report,) = audit(tmp_path / "run")
    assert code == 1 and report["verdict"] == "affected" and report["record"] is None
    assert any("names global step 6 and the checkpoint 9" in note for note in report["notes"])


def test_a_step_count_the_file_does_not_hold_reads_as_a_question_mark(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", global_steps=10**30)  # past 63 bits: not read as a number
    _, text = audit(tmp_path / "run", text=True)
    assert "at iteration ?, ? optimizer steps" in text and "None" not in text


def test_a_latest_naming_a_tag_that_is_not_there_is_named_in_a_note(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run")
    (tmp_path / "run" / "latest").write_text("global_step99")
    code, (report,) = audit(tmp_path / "run")
    assert code == 1 and report["checkpoint"].endswith("global_step6/mp_rank_00_model_states.pt")
    assert any("names 'global_step99', which holds no model-states file here" in note for note in report["notes"])
