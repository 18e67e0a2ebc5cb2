"""A "not affected" that is proof (#41), on real engines of the installed DeepSpeed (the suite's 0.15.2 and 0.19.8).

Two training processes: an unpatched one (a save made at step 0, and one after three steps), then one armed with
the patch (reset) that trains a patched run and resumes the unpatched saves every way that decides step 0. The
folders are then rearranged as admins find them (a rerun into a patched run's folder, a record copied beside
another run, a `cp -r` of a patched run), and `audit` reads them all from `python -S` with a copy of the package
alone. The truth is the lr each optimizer step really used (the harness's torch pre-hook): every verdict and
step-0 lr is asserted against it and against 0.19.8's step 0 (warmup_min_lr, 0.0).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import ports
import pytest
from conftest import CHILDREN, Spec, bare_audit, cleared_or_unseen, run_child, run_specs

RECORD = "accelerate_warmup_patch.json"
NEWEST_STEP0 = 0.0  # WarmupLR-linear's warmup_min_lr: what 0.19.8 runs step 0 at
# own-step: the script steps the optimizer and scheduler itself, so every save says global_steps 0 (#47 item 3)
# zero3-, pipeline-unpatched: a rerun into the patched run's folder writes a byte-identical model-states file (the
# weights are in the optimizer's and the layers' files; #47 item 1)
UNPATCHED = {"step0-save": Spec(steps=0), "unpatched": Spec(steps=3), "own-step": Spec(steps=3, road="own-step"),
             "zero3-unpatched": Spec(steps=2, zero=3), "own-step-zero2": Spec(steps=3, road="own-step", zero=2),
             "pipeline-unpatched": Spec(steps=2, road="pipeline", zero=1), "short-rerun": Spec(steps=1)}
# each armed run: its spec, and the run whose first optimizer step is this run's step 0 (None: its own)
ARMED: dict[str, tuple[Spec, str | None]] = {
    "patched": (Spec(steps=3), None),
    "patched-inf": (Spec(steps=2, groups=[math.inf]), None),  # an inf optimizer lr, which reset mode starts at 0.0
    "from-step0": (Spec(steps=2, resume_from="step0-save"), None),  # step 0 runs here, at the restored lr
    "from-step0-fresh-scheduler": (Spec(steps=2, resume_from="step0-save", load_lr_scheduler_states=False), None),
    "upgrade": (Spec(steps=2, resume_from="unpatched"), "unpatched"),  # the early save is not in this folder
    "no-optimizer-states": (Spec(steps=2, resume_from="unpatched", load_optimizer_states=False), "unpatched"),
    "resumed-patched": (Spec(steps=2, resume_from="patched", load_lr_scheduler_states=False), "patched"),
    # ZeRO 2 steps the torch optimizer once per group, narrowed to it; ZeRO 3 names its file zero_pp_rank_0_...
    "zero2-two-groups": (Spec(steps=2, zero=2, groups=[1e-3, 2e-3]), None),
    "zero3": (Spec(steps=2, zero=3), None),
    "patched-own-step": (Spec(steps=3, road="own-step"), None),
    "pipeline": (Spec(steps=2, road="pipeline", zero=1), None),
    # two jobs saving one tag (#47 item 1): the unpatched run's files land in this tag after this job wrote its own,
    # before its save_checkpoint returns; the tag's files are then the unpatched run's
    "raced": (Spec(steps=3, raced_by="unpatched"), "unpatched"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[float]]]:
    """Every run trained and saved (two processes), then the rearranged folders; each run's true step-0 lrs."""
    root = tmp_path_factory.mktemp("proof")
    unpatched = run_specs(*(replace(spec, save_to=str(root / name)) for name, spec in UNPATCHED.items()))
    armed = run_specs(*(replace(spec, save_to=str(root / name), resume_from=spec.resume_from and
                                str(root / spec.resume_from), raced_by=spec.raced_by and str(root / spec.raced_by))
                        for name, (spec, _) in ARMED.items()),
                      env={"ACCELERATE_WARMUP_PATCH": "reset"})
    first = {name: result["lrs"][0] if result["lrs"] else None
             for name, result in zip([*UNPATCHED, *ARMED], [*unpatched.data["results"], *armed.data["results"]])}
    truth = {name: first[origin or name] for name, (_, origin) in ARMED.items()}
    truth["unpatched"], truth["own-step"] = first["unpatched"], first["own-step"]
    truth["own-step-zero2"] = first["own-step-zero2"]  # the optimizer's state is in ZeRO's optim_states file
    # a rerun from scratch, unpatched, into the patched run's folder: new model states, the old record stays
    shutil.copytree(root / "patched", root / "rerun")
    for file in (root / "unpatched" / "ckpt").iterdir():
        shutil.copy(file, root / "rerun" / "ckpt" / file.name)
    truth["rerun"] = first["unpatched"]
    # the same under ZeRO 3, whose model-states file holds no weights: the optimizer's states file tells the runs apart
    shutil.copytree(root / "zero3", root / "zero3-rerun")
    for file in (root / "zero3-unpatched" / "ckpt").iterdir():
        shutil.copy(file, root / "zero3-rerun" / "ckpt" / file.name)
    truth["zero3-rerun"] = first["zero3-unpatched"]
    # and with the PipelineEngine, whose mp_rank_00 holds no layer
    shutil.copytree(root / "pipeline", root / "pipeline-rerun")
    for file in (root / "pipeline-unpatched" / "ckpt").iterdir():
        shutil.copy(file, root / "pipeline-rerun" / "ckpt" / file.name)
    truth["pipeline-rerun"] = first["pipeline-unpatched"]
    # the patched run's record copied beside the unpatched run's files (same release, class and step count)
    shutil.copytree(root / "unpatched", root / "copied-record")
    shutil.copy(root / "patched" / "ckpt" / RECORD, root / "copied-record" / "ckpt" / RECORD)
    truth["copied-record"] = first["unpatched"]
    shutil.copytree(root / "patched", root / "cp-r")  # `cp -r`: new inodes and mtimes, the same bytes
    truth["cp-r"] = first["patched"]
    # a checkpoint-{step} rerun that stopped earlier (#47 item 2): the patched run's later save is the newest; the
    # unpatched rerun's earlier save beside it holds the first run's record, bound to other bytes
    later, earlier = root / "rerun-earlier" / "checkpoint-2" / "global_step3", root / "rerun-earlier" / "checkpoint-1"
    shutil.copytree(root / "patched" / "ckpt", later)
    shutil.copytree(root / "unpatched" / "ckpt", earlier / "global_step3")
    shutil.copy(root / "patched" / "ckpt" / RECORD, earlier / "global_step3" / RECORD)
    truth["rerun-earlier"] = first["unpatched"]
    # a rerun with save_latest=False (#47 item 2): its one-step save beside the patched run's, whose tag latest names
    shutil.copytree(root / "patched" / "ckpt", root / "no-latest" / "global_step3")
    shutil.copytree(root / "short-rerun" / "ckpt", root / "no-latest" / "global_step1")
    (root / "no-latest" / "latest").write_text("global_step3")
    truth["no-latest"] = first["short-rerun"]
    return root, truth


@pytest.fixture(scope="module")
def audited(runs: tuple[Path, dict[str, list[float]]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python -S -m accelerate_warmup_patch audit --json` of every run folder, the package alone on the path."""
    root, truth = runs
    names = sorted(truth)
    proc = bare_audit(tmp_path_factory.mktemp("bare"))("-m", "accelerate_warmup_patch", "audit", "--json",
                                                       *(str(root / name) for name in names))
    return dict(zip(names, json.loads(proc.stdout)))


def _expected_verdict(step0: list[float]) -> str:
    return "not affected" if step0 == [NEWEST_STEP0] else "affected"


@pytest.mark.parametrize("name", ["patched", "patched-inf", "cp-r", "from-step0", "from-step0-fresh-scheduler",
                                  "upgrade", "no-optimizer-states", "resumed-patched", "rerun", "copied-record",
                                  "unpatched", "own-step", "own-step-zero2", "patched-own-step", "zero3-rerun",
                                  "pipeline",
                                  "pipeline-rerun"])
def test_the_audits_verdict_and_step0_lr_are_the_optimizers_truth(runs, audited, name):
    _, truth = runs
    report = audited[name]
    if report["verdict"] == "unknown" and cleared_or_unseen(report):
        # a run that ran as 0.19.8 with no record on a release that needs no fix: no record says that release ran
        # step 0 (a resume of an older release's save leaves the same files), so no lr is said to have run
        assert _expected_verdict(truth[name]) == "not affected" and report["step0_lr"] is None, (truth[name], report)
        return
    assert report["verdict"] == _expected_verdict(truth[name]), (truth[name], report)
    assert report["step0_lr"] == truth[name][0], (truth[name], report)


@pytest.mark.parametrize("name", ["zero2-two-groups", "zero3"])
def test_a_patched_zero_run_records_every_groups_step_0_bound_to_its_rank_0_file(runs, audited, name):
    _, truth = runs
    report = audited[name]
    assert report["verdict"] == "not affected" and report["step0_lrs"] == truth[name], (truth[name], report)
    assert report["record"]["bound_to"]["file"] == Path(report["checkpoint"]).name, report


def test_an_optimizer_stepped_outside_engine_step_is_never_no_step_ran(audited):
    for name in ("own-step", "own-step-zero2", "patched-own-step"):
        report = audited[name]
        assert report["global_steps"] == 0 and "no step ran" not in report["why"], report
        assert any("optimizer's state shows it stepped" in note for note in report["notes"]), report
    assert audited["patched-own-step"]["record"]["step0"]["how"] == "observed", audited["patched-own-step"]


def test_a_rerun_that_stopped_earlier_beside_a_patched_runs_later_save_is_never_not_affected(runs, audited):
    _, truth = runs
    report = audited["rerun-earlier"]
    if truth["rerun-earlier"] == [NEWEST_STEP0]:  # 0.19.8: the rerun ran step 0 as 0.19.8 does, if it ran it
        assert cleared_or_unseen(report), report
    else:  # the rerun's save may be a resume of the patched run or a fresh start: the files cannot tell which
        assert report["verdict"] == "unknown" and "started afresh unpatched" in report["why"], report


def test_a_save_latest_false_rerun_beside_the_save_latest_names_is_never_not_affected(runs, audited):
    _, truth = runs
    report = audited["no-latest"]
    if truth["no-latest"] == [NEWEST_STEP0]:  # 0.19.8: the rerun ran step 0 as 0.19.8 does, if it ran it
        assert cleared_or_unseen(report), report
    else:  # latest names the patched save; the rerun's save still counts
        assert report["verdict"] == "unknown" and "global_step1" in report["why"], report


def test_a_patched_run_copied_with_cp_r_is_still_proven(audited):
    assert audited["cp-r"]["verdict"] == "not affected" and audited["cp-r"]["record"]["bound"] is True


def test_a_rerun_or_a_copied_record_is_not_that_saves_record_unless_the_bytes_are_the_same(runs, audited):
    root, _ = runs
    states = "ckpt/mp_rank_00_model_states.pt"
    for name in ("rerun", "copied-record"):
        if (root / name / states).read_bytes() == (root / "patched" / states).read_bytes():
            # 0.19.8 trains the unpatched run exactly as the patched one: the same model states, byte for byte,
            # so the record's facts are these bytes' facts
            assert audited[name]["record"]["bound"] is True, audited[name]
            continue
        assert audited[name]["record"] is None, audited[name]
        assert any("ignored, not that save's record" in note for note in audited[name]["notes"]), audited[name]


def test_a_record_is_never_bound_to_files_another_job_saved_into_its_tag_at_the_same_moment(runs, audited):
    root, truth = runs
    report, record = audited["raced"], json.loads((root / "raced" / "ckpt" / RECORD).read_text())
    states = "ckpt/mp_rank_00_model_states.pt"
    if (root / "raced" / states).read_bytes() == (root / "patched" / states).read_bytes():
        # 0.19.8 trains the unpatched run exactly as the patched one: the other job wrote this job's bytes
        assert record["bound_to"]["file"] is not None and report["verdict"] == "not affected", (record, report)
        return
    assert record["bound_to"]["file"] is None and "another job" in record["bound_to"]["unbound"], record
    assert truth["raced"] != [NEWEST_STEP0] and report["verdict"] == "unknown", (truth["raced"], report)


def test_a_resume_from_an_unrecorded_save_names_the_release_that_ran_step_0(runs, audited):
    root, _ = runs
    record = json.loads((root / "upgrade" / "ckpt" / RECORD).read_text())
    assert record["step0"]["how"] == "unrecorded" and record["step0"]["global_steps"] == 3, record
    assert record["step0"]["deepspeed"] == audited["unpatched"]["deepspeed_version"]
    assert "holds no record" in audited["upgrade"]["why"], audited["upgrade"]


def test_an_inf_optimizer_lr_is_written_as_valid_json(runs):
    root, _ = runs
    text = (root / "patched-inf" / "ckpt" / RECORD).read_text()
    assert "Infinity" not in text and json.loads(text)["step0"]["how"] == "observed"


def test_the_watch_of_the_first_step_leaves_no_hook_on_a_steady_step():
    proc = run_child("first_step_hooks.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (found["pre"], found["post"]) == (2, 1), found  # the user's own three hooks, no more
    assert found["ran"] == ["user pre, before", "user pre, after", "user post"] * 3, found
    assert found["first_step"] == {"observed": True, "lrs": [0.25], "global_steps": 0, "skipped_steps": 0,
                                   "last_batch_iteration": None}


def test_two_ranks_write_one_record_per_tag_bound_to_rank_0s_files_and_carried_on_resume(tmp_path):
    # two CPU ranks, data parallel: rank 0 alone watches, reads the loaded record and writes; the resume carries step 0
    env = {**os.environ, "ACCELERATE_WARMUP_PATCH": "reset"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(ports.port(ports.RECORD_TWO_RANKS)), str(CHILDREN / "two_ranks_records.py"),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    truth = json.loads((tmp_path / "rank0.json").read_text())["run"][0]
    assert json.loads((tmp_path / "rank1.json").read_text())["run"][0] == truth
    records = {folder: json.loads((tmp_path / folder / "ckpt" / RECORD).read_text()) for folder in ("run", "resumed")}
    assert sorted(p.parent.parent.name for p in tmp_path.rglob(RECORD)) == ["resumed", "run"]
    for record in records.values():
        assert record["bound_to"]["file"] == "mp_rank_00_model_states.pt", record
        assert record["step0"]["how"] == "observed" and record["step0"]["lrs"] == [truth], record
    assert records["resumed"]["loads"][0]["bound"] is True


def _two_ranks(out: Path, name: str, *other: str, armed: bool) -> list[float]:
    """A two-rank ZeRO-1 job of tests/children/two_ranks_raced.py saving OUT/NAME; rank 0's lrs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_WARMUP_PATCH")}
    env.update({"ACCELERATE_WARMUP_PATCH": "reset"} if armed else {})
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(ports.port(ports.RACED_TWO_RANKS)), str(CHILDREN / "two_ranks_raced.py"), str(out),
                           name, *other], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lrs = [json.loads((out / name / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert lrs[0] == lrs[1], lrs
    return list(lrs[0])


def test_a_record_of_several_ranks_is_bound_only_where_each_ranks_file_holds_what_that_rank_wrote(tmp_path):
    # #47 item 1 with several ranks: rank 1 tells rank 0 (the record's writer) what it wrote, through the job's store;
    # another job's rank-1 partition that lands after rank 1's own write leaves the record unbound
    unpatched = _two_ranks(tmp_path, "unpatched", armed=False)
    truth = {"clean": _two_ranks(tmp_path, "clean", armed=True),
             "raced": _two_ranks(tmp_path, "raced", str(tmp_path / "unpatched"), armed=True)}
    assert truth["clean"] == truth["raced"] and truth["clean"][0] == NEWEST_STEP0, (truth, unpatched)
    records = {name: json.loads((tmp_path / name / "ckpt" / RECORD).read_text()) for name in truth}
    proc = bare_audit(tmp_path / "bare")("-m", "accelerate_warmup_patch", "audit", "--json",
                                         *(str(tmp_path / name) for name in truth))
    reports = dict(zip(truth, json.loads(proc.stdout)))
    clean = records["clean"]["bound_to"]
    assert clean["file"] == "mp_rank_00_model_states.pt" and clean["others"]["files"] == 2, clean
    assert reports["clean"]["verdict"] == "not affected", reports["clean"]
    partition = "ckpt/zero_pp_rank_1_mp_rank_00_optim_states.pt"
    if (tmp_path / "unpatched" / partition).read_bytes() == (tmp_path / "clean" / partition).read_bytes():
        # a release that needs no fix trains the unpatched job exactly as the patched one: the same bytes
        assert unpatched == truth["clean"] and records["raced"]["bound_to"]["file"] is not None, records["raced"]
        assert reports["raced"]["verdict"] == "not affected", reports["raced"]
        return
    assert unpatched[0] != NEWEST_STEP0, unpatched  # the release needs the fix: the other job's step 0 ran wrong
    assert records["raced"]["bound_to"]["unbound"].startswith(
        "zero_pp_rank_1_mp_rank_00_optim_states.pt: not the bytes this job wrote"), records["raced"]
    assert reports["raced"]["verdict"] == "unknown", reports["raced"]
