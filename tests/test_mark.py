"""The record a patched run leaves beside each checkpoint (issue 35, item 2; record 2 since #41), on real engines.

One process trains and saves every run (unpatched, then warn, step and reset, accelerate's save_state and the HF
Trainer's save, all on the installed DeepSpeed: the suite's 0.15.2 and 0.19.8); each marked save gets an unmarked
twin (the same folder without the record). Two more processes resume every pair, one with the package unarmed and
one armed: a record changes nothing a user sees when loading. Then `audit` reads the patched runs end to end.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Spec, bare_audit, cleared_or_unseen, installed, run_specs
from harness import USER_CLIENT_STATE

from accelerate_warmup_patch import releases, upstream

DEEPSPEED = installed("deepspeed")
RECORD = "accelerate_warmup_patch.json"
# what a training script saves with its checkpoint (plain data, as most do): Spec(client_state="user")
USER_STATE = USER_CLIENT_STATE
BUGGY = upstream.lacks("start", "WarmupLR", DEEPSPEED)  # this release starts WarmupLR at the optimizer's lr

SAVES: dict[str, Spec] = {  # trained and saved in one process, in this order: the unpatched run before any apply()
    "unpatched": Spec(steps=3, client_state="user"),
    "warn": Spec(steps=3, patch="before", mode="warn", client_state="user"),
    "step": Spec(steps=3, patch="before", mode="step"),
    "reset": Spec(steps=3, patch="before", mode="reset", client_state="user"),
    "accelerate": Spec(path="accelerate", steps=3, patch="before", mode="reset"),
    "trainer": Spec(path="trainer", steps=4, patch="before", mode="reset"),
}
# where each run's save keeps its record: the tag folder that holds mp_rank_00_model_states.pt
TAG = {"accelerate": "pytorch_model", "trainer": "checkpoint-3/global_step3"}  # the Trainer: DeepSpeed's default tag
# each marked save resumed, and its unmarked twin (the folder less the record)
RESUMES: dict[str, Spec] = {
    "reset": Spec(steps=3, client_state="user"),
    "accelerate": Spec(path="accelerate", steps=3),
    "trainer": Spec(path="trainer", steps=6),
}


def _tag(root: Path, name: str) -> Path:
    return root / name / TAG.get(name, "ckpt")


def _resumes(root: Path) -> list[Spec]:
    """Each marked save resumed, then its unmarked twin, in pairs."""
    return [replace(spec, resume_from=str(root / folder)) for name, spec in RESUMES.items()
            for folder in (name, f"{name}-unmarked")]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Every run of SAVES trained and saved under one folder (one process); each marked one copied without its
    record; the resumed runs' results, unarmed and armed (two processes); the armed one also saves a resumed run."""
    root = tmp_path_factory.mktemp("mark")
    (root / "blocked" / "ckpt" / RECORD).mkdir(parents=True)  # a folder where the record goes: it cannot be written
    ran = run_specs(*(replace(spec, save_to=str(root / name)) for name, spec in SAVES.items()),
                    Spec(steps=1, patch="before", mode="reset", save_to=str(root / "blocked")),
                    Spec(steps=1, scheduler="none", patch="before", mode="reset", save_to=str(root / "no-scheduler")),
                    Spec(steps=1, torch_scheduler=True, patch="before", mode="reset", save_to=str(root / "torch")))
    for name in RESUMES:
        shutil.copytree(root / name, root / f"{name}-unmarked")
        (root / f"{name}-unmarked" / TAG.get(name, "ckpt") / RECORD).unlink(missing_ok=True)  # asserted below
    again = [Spec(steps=2, resume_from=str(root / "reset"), save_to=str(root / "resumed")),
             # accelerate's load_state and the Trainer's resume_from_checkpoint, each saving again (#41)
             Spec(path="accelerate", steps=2, resume_from=str(root / "accelerate"),
                  save_to=str(root / "accelerate-resumed")),
             Spec(path="trainer", steps=6, resume_from=str(root / "trainer"), save_to=str(root / "trainer-resumed"))]
    # a patched start (reset), an unpatched resume (chain-b, no record), a patched resume (chain-c): #47 item 4
    unarmed = run_specs(*_resumes(root), Spec(steps=2, resume_from=str(root / "reset"), save_to=str(root / "chain-b")))
    armed = run_specs(*_resumes(root), *again, Spec(steps=2, resume_from=str(root / "chain-b"),
                                                    save_to=str(root / "chain-c")),
                      env={"ACCELERATE_WARMUP_PATCH": "reset"})
    return root, {"saved": ran, "unarmed": unarmed, "armed": armed}


def _record(root: Path, name: str) -> dict[str, Any]:
    return json.loads((_tag(root, name) / RECORD).read_text(encoding="utf-8"))


# The record: where, when, what ----------------------------------------------------------------------------------

def test_a_patched_save_holds_record_1_in_its_tag_folder_and_an_unpatched_one_none(saved):
    root, _ = saved
    assert not list((root / "unpatched").rglob(RECORD))
    for name in ("warn", "step", "reset", "accelerate", "trainer"):
        assert (_tag(root, name) / "mp_rank_00_model_states.pt").is_file(), name
        # one beside each save's model states (the Trainer saves at step 3 and at its end), and no temporary file
        assert {p.parent for p in (root / name).rglob(RECORD)} == \
            {p.parent for p in (root / name).rglob("mp_rank_00_model_states.pt")}, name
        assert not [p for p in _tag(root, name).iterdir() if p.name.endswith(".partial")], name


def test_the_record_holds_exactly_the_contracts_fields(saved):
    root, _ = saved
    import accelerate_warmup_patch

    for name, mode in (("warn", "warn"), ("step", "step"), ("reset", "reset"), ("accelerate", "reset"),
                       ("trainer", "reset")):
        record = _record(root, name)
        assert list(record) == ["record", "package", "version", "mode", "deepspeed", "reference", "global_steps",
                                "bound_to", "scheduler", "first_step", "step0", "loads"], name
        assert record["record"] == 2 and record["package"] == "accelerate-warmup-patch"
        model_states = _tag(root, name) / "mp_rank_00_model_states.pt"
        assert record["bound_to"]["file"] == model_states.name, name  # bound to the file beside it (#41)
        assert record["bound_to"]["size"] == model_states.stat().st_size, name
        assert record["step0"]["how"] == "observed" and record["loads"] == [], name
        assert record["version"] == accelerate_warmup_patch.__version__
        assert (record["mode"], record["deepspeed"], record["reference"]) == (mode, DEEPSPEED,
                                                                              releases.BEHAVIOR_REFERENCE), name
        assert record["global_steps"] == 3, name
        scheduler = record["scheduler"]
        assert list(scheduler) == ["class", "step0", "lrs_before", "lrs_after", "why"], name
        assert scheduler["class"] == "WarmupLR" and isinstance(scheduler["why"], str) and scheduler["why"], name
        for lrs in (scheduler["lrs_before"], scheduler["lrs_after"]):
            assert isinstance(lrs, list) and len(lrs) == 1 and all(type(lr) is float for lr in lrs), (name, lrs)


def test_the_record_says_what_the_patch_did_about_step_0(saved):
    root, runs = saved
    step0 = {name: _record(root, name)["scheduler"] for name in ("warn", "step", "reset")}
    # what step 0 ran at in each run, as the runs recorded it
    ran = {name: result["lrs"][0] for name, result in zip(SAVES, runs["saved"].data["results"])}
    if BUGGY:  # 0.15.2: step 0 at the optimizer's lr, 0.001; the newest runs it at warmup_min_lr, 0.0
        assert step0["reset"] | {"why": ""} == {"class": "WarmupLR", "step0": "fixed", "lrs_before": [0.001],
                                                "lrs_after": [0.0], "why": ""}
        assert step0["warn"]["step0"] == "warned" and step0["warn"]["lrs_before"] == [0.001]
        assert step0["warn"]["lrs_after"] == [0.0]
        assert ran["warn"] == [0.001] and ran["reset"] == [0.0]
    else:  # 0.19.8 starts it as the reference: nothing to change
        for name in ("warn", "reset"):
            assert step0[name]["step0"] == "as-release" and step0[name]["lrs_before"] == step0[name]["lrs_after"] == \
                ran[name] == [0.0], name
    assert step0["step"]["step0"] == "fixed"  # step mode steps it once on every release
    assert step0["step"]["lrs_after"] == ran["step"], step0["step"]
    assert step0["step"]["lrs_before"] == ([0.001] if BUGGY else [0.0])


def test_a_resumed_run_records_that_step_0_ran_in_an_earlier_process_and_carries_it(saved):
    root, _ = saved
    record = _record(root, "resumed")
    scheduler = record["scheduler"]
    assert scheduler["step0"] == "earlier-process" and scheduler["lrs_before"] is scheduler["lrs_after"] is None
    assert record["global_steps"] == 5
    # the loaded save's record was bound to it: its step 0, as that process saw it, is handed on (#41)
    assert record["step0"] == _record(root, "reset")["step0"]
    assert record["loads"] == [{"tag": "ckpt", "deepspeed": DEEPSPEED, "global_steps": 3, "scheduler": "WarmupLR",
                                "record": 2, "bound": True}]
    assert record["first_step"]["observed"] is True and record["first_step"]["global_steps"] == 3


def test_accelerate_and_trainer_resumes_carry_the_step_0_their_first_process_observed(saved):
    root, _ = saved
    for resumed, first, tag in (("accelerate-resumed", "accelerate", "pytorch_model"),
                                ("trainer-resumed", "trainer", "checkpoint-6/global_step6")):
        record = json.loads((root / resumed / tag / RECORD).read_text(encoding="utf-8"))
        assert record["step0"] == _record(root, first)["step0"], resumed
        assert record["step0"]["how"] == "observed" and record["loads"][0]["bound"] is True, record


def test_an_engine_without_a_scheduler_or_with_a_torch_one_is_recorded_as_such(saved):
    root, _ = saved
    assert _record(root, "no-scheduler")["scheduler"] is None
    assert _record(root, "torch")["scheduler"] | {"why": ""} == {
        "class": "torch.optim.lr_scheduler.LambdaLR", "step0": "unknown", "lrs_before": None, "lrs_after": None,
        "why": ""}
    # step 0 names the torch scheduler it ran under, which the audit clears whatever resumes it later (#55)
    assert _record(root, "torch")["step0"]["torch_scheduler"] == "torch.optim.lr_scheduler.LambdaLR"
    assert "torch_scheduler" not in _record(root, "no-scheduler")["step0"]
    assert "torch_scheduler" not in _record(root, "reset")["step0"]


def test_a_record_that_cannot_be_written_is_one_warning_and_the_checkpoint_stands(saved):
    root, runs = saved
    assert runs["saved"].stderr.count("writing the patch's record beside the checkpoint failed") == 1
    assert "the checkpoint is saved without it" in runs["saved"].stderr
    tag = root / "blocked" / "ckpt"
    assert (tag / "mp_rank_00_model_states.pt").is_file() and (tag / RECORD).is_dir()
    assert (root / "blocked" / "latest").read_text() == "ckpt"
    assert sorted(p.name for p in tag.iterdir() if p.name.endswith(".partial")) == []  # no temporary file left


def test_with_the_record_off_an_armed_save_writes_none(tmp_path):
    # ACCELERATE_WARMUP_PATCH_RECORD=off, for a store that must hold nothing else: the checkpoint as always, no record
    run_specs(Spec(steps=1, patch="before", mode="reset", save_to=str(tmp_path / "off")),
              env={"ACCELERATE_WARMUP_PATCH_RECORD": "off"})
    assert (tmp_path / "off" / "ckpt" / "mp_rank_00_model_states.pt").is_file()
    assert (tmp_path / "off" / "latest").read_text() == "ckpt"
    assert not [p for p in (tmp_path / "off").rglob("*") if p.name.endswith(RECORD)]


# Loading: a marked checkpoint as an unmarked one ----------------------------------------------------------------

@pytest.mark.parametrize("armed", ["unarmed", "armed"])
def test_a_marked_checkpoint_resumes_with_the_lrs_and_client_state_of_its_unmarked_twin(saved, armed):
    _, runs = saved
    results = runs[armed].data["results"]
    status = runs[armed].data["status"]
    assert (status or {}).get("mode", "off") == ("reset" if armed == "armed" else "off"), status
    for marked, unmarked in zip(results[0:6:2], results[1:6:2]):
        assert marked["spec"]["resume_from"] + "-unmarked" == unmarked["spec"]["resume_from"]
        assert marked["lrs"] == unmarked["lrs"], marked["spec"]
        assert marked.get("client_state") == unmarked.get("client_state"), marked["spec"]
    loaded = results[0]["client_state"]  # the marked save's, key by key (each value's repr)
    assert {key: loaded[key] for key in USER_STATE} == {key: repr(value) for key, value in USER_STATE.items()}
    assert not [key for key in loaded if "accelerate_warmup_patch" in key or "record" in key or "step0" in key]


def test_resumed_runs_match_across_armed_and_unarmed_processes(saved):
    _, runs = saved
    unarmed = [r["lrs"] for r in runs["unarmed"].data["results"][:6]]
    armed = [r["lrs"] for r in runs["armed"].data["results"][:6]]
    assert armed == unarmed


# The audit of patched runs, end to end (the reading side: `audit`, issue 35 item 2) ---------------------------

@pytest.fixture(scope="module")
def audited(saved: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python -S -m accelerate_warmup_patch audit --json` of every saved run, with a copy of the package alone on
    its path (no torch, no DeepSpeed): each run's report, by name."""
    root, _ = saved
    names = ["unpatched", "warn", "step", "reset", "accelerate", "trainer"]
    proc = bare_audit(tmp_path_factory.mktemp("bare"))("-m", "accelerate_warmup_patch", "audit", "--json",
                                                       *(str(root / name) for name in names))
    reports = json.loads(proc.stdout)
    return {"returncode": proc.returncode, **dict(zip(names, reports))}


@pytest.mark.skipif(not BUGGY, reason="0.15.2's half: a release that starts WarmupLR at the optimizer's lr")
def test_audit_says_a_reset_run_on_a_buggy_release_was_fixed_by_the_patch(audited):
    for name in ("reset", "accelerate", "trainer"):
        report = audited[name]
        assert report["verdict"] == "not affected", (name, report)
        assert "observed by accelerate-warmup-patch" in report["why"] and "(reset)" in report["why"], report
        assert "which fixed it" in report["why"], report
        assert report["step0_lr"] == 0.0, report


@pytest.mark.skipif(not BUGGY, reason="0.15.2's half: a release that starts WarmupLR at the optimizer's lr")
def test_audit_tells_step_warn_and_unpatched_runs_apart_on_a_buggy_release(audited):
    assert audited["step"]["verdict"] == "not affected", audited["step"]
    assert audited["warn"]["verdict"] == "affected" and "warned, not fixed" in audited["warn"]["why"], audited["warn"]
    assert audited["warn"]["step0_lr"] == 0.001
    assert audited["unpatched"]["verdict"] == "affected" and audited["unpatched"]["step0_lr"] == 0.001
    assert audited["returncode"] == 1  # a run is affected


@pytest.mark.skipif(BUGGY, reason="0.19.8's half: a release that starts WarmupLR as the reference does")
def test_audit_finds_no_run_affected_on_a_fixed_release_patched_or_not(audited):
    for name in ("warn", "step", "reset", "accelerate", "trainer"):
        assert audited[name]["verdict"] == "not affected", (name, audited[name])
    # no record: 0.19.8 ran it as 0.19.8 does, unless the job resumed an older release's save (the files cannot tell)
    assert cleared_or_unseen(audited["unpatched"]), audited["unpatched"]
    assert audited["returncode"] == 0


def test_a_patched_start_an_unpatched_resume_and_a_patched_resume_in_one_folder_is_never_affected(saved, tmp_path):
    # the three saves as one folder holds them: the newest record's chain says step 0 ran unrecorded (chain-b has no
    # record); the first save's bound record proves step 0 ran as 0.19.8 runs it, unless chain-b started afresh
    root, runs = saved
    ran = {name: result["lrs"][0] for name, result in zip(SAVES, runs["saved"].data["results"])}
    assert ran["reset"] == [0.0]  # the truth: step 0 ran in the reset run, as 0.19.8 runs it
    for source, tag in (("reset", "global_step3"), ("chain-b", "global_step5"), ("chain-c", "global_step7")):
        shutil.copytree(root / source / "ckpt", tmp_path / "run" / tag)
    (tmp_path / "run" / "latest").write_text("global_step7")
    assert json.loads((tmp_path / "run" / "global_step7" / RECORD).read_text())["step0"]["how"] == "unrecorded"
    proc = bare_audit(tmp_path / "bare")("-m", "accelerate_warmup_patch", "audit", "--json", str(tmp_path / "run"))
    [report] = json.loads(proc.stdout)
    if BUGGY:  # chain-b's process resumed from the reset save or started afresh on 0.15.2: the files cannot tell
        assert report["verdict"] == "unknown" and "the chain has a gap" in report["why"], report
    else:  # or it resumed a save of another release, unpatched: the files cannot tell that either
        assert cleared_or_unseen(report), report


def test_a_patched_start_resumed_unpatched_under_custom_tag_names_is_one_engine_never_affected(saved, tmp_path):
    # the same saves under custom tags (#47 item 2): each tag name is an engine's line, but epoch2 holds the model of
    # epoch1 at more steps; its step 0 ran in the reset run (epoch1's bound record), unless it started afresh
    root, _ = saved
    for source, tag in (("reset", "epoch1"), ("chain-b", "epoch2")):
        shutil.copytree(root / source / "ckpt", tmp_path / "run" / tag)
    proc = bare_audit(tmp_path / "bare")("-m", "accelerate_warmup_patch", "audit", "--json", str(tmp_path / "run"))
    reports = {report["engine"]: report for report in json.loads(proc.stdout)}
    assert Path(reports["epoch2"]["step0_checkpoint"]).parent.name == "epoch1", reports["epoch2"]
    assert sorted(reports) == ["epoch1", "epoch2"], reports
    for report in reports.values():  # on 0.19.8, epoch2's process may have resumed a save of another release
        assert report["verdict"] == "unknown" if BUGGY else cleared_or_unseen(report), reports


def test_a_scheduler_stepped_before_training_is_compared_with_0_19_8_at_its_position(tmp_path):
    """User code steps the scheduler twice before the first optimizer step (the old workaround, twice): step 0 runs
    at lr(1), as on 0.19.8. The record's expected lrs are 0.19.8's formula at that position, not the start the
    patch set at construction, and the audit says so (issue #47 item 6)."""
    spec = Spec(steps=3, patch="before", user_steps=2, save_to=str(tmp_path / "run"))
    truth = run_specs(spec).lrs[spec.key]
    step0 = json.loads((tmp_path / "run" / "ckpt" / RECORD).read_text())["step0"]
    assert step0["lrs"] == step0["expected"] == truth[0] and truth[0] != [0.0], step0
    assert step0["patch_did"] == ("fixed" if BUGGY else "as-release")
    proc = bare_audit(tmp_path / "bare")("-m", "accelerate_warmup_patch", "audit", "--json", str(tmp_path / "run"))
    report = json.loads(proc.stdout)[0]
    assert report["verdict"] == "not affected" and report["step0_lrs"] == truth[0], report


@pytest.mark.parametrize("moved", ["optimizer", "scheduler"])
def test_a_save_at_global_step_0_after_steps_outside_the_engine_never_says_no_step_yet(tmp_path, moved):
    """An engine whose first step the patch never watched (it cannot be made to miss one in a real run: a stand-in
    engine holds the real optimizer and scheduler), saved at global_steps 0 by a script that stepped them itself:
    its step 0 ran, so the record says it was not observed, never that no step ran."""
    import types

    import torch
    from deepspeed.runtime.lr_schedules import WarmupLR

    from accelerate_warmup_patch import record_writer

    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.Adam([param], lr=1e-3)
    scheduler = WarmupLR(optimizer, warmup_min_lr=0.0, warmup_max_lr=1e-3, warmup_num_steps=4)
    engine = types.SimpleNamespace(global_steps=0, optimizer=optimizer, lr_scheduler=scheduler)
    assert record_writer.record(engine, "reset", str(tmp_path))["step0"]["how"] == "no-step-yet"  # nothing moved yet
    if moved == "optimizer":
        param.grad = torch.ones(2)
        optimizer.step()
    else:
        scheduler.step()
    step0 = record_writer.record(engine, "reset", str(tmp_path))["step0"]
    assert step0["how"] == "unobserved", step0
