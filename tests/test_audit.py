"""`accelerate-warmup-patch audit`: each verdict against the lr a real run's step 0 used, from an interpreter
without torch; frameworks' client_states are read; a hostile checkpoint runs nothing; a folder with no run is
one line and exit 2.

The runs are real engines on the installed DeepSpeed (the suite's 0.15.2 and 0.19.8; the matrix's engine rows
run this file on the others, 0.14.4 among them): raw DeepSpeed at ZeRO 0-3, accelerate and the HF Trainer,
each recording the lr every optimizer step used and saving a checkpoint. The audit runs in `python -S` with a
copy of the package alone on its path: no torch, deepspeed, wrapt or accelerate can be imported there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import GOLDEN, Spec, bare_audit, cleared_or_unseen, installed, run_specs, step0_lr_said

from accelerate_warmup_patch import upstream

installed("deepspeed")  # real engines: without DeepSpeed the module skips (tests/unit reads synthetic files)
Audit = Callable[..., "subprocess.CompletedProcess[str]"]

# every one has a 0.19.8 trajectory in golden.json (its step 0 is what 0.19.8 runs)
RUNS: dict[str, Spec] = {
    "ds-z0-log": Spec(scheduler="WarmupLR-log", zero=0),
    "ds-z1-linear": Spec(scheduler="WarmupLR-linear", zero=1),
    "ds-z2-decay-2groups-ga3": Spec(scheduler="WarmupDecayLR", groups=[1e-3, 5e-4], grad_accum=3, zero=2),
    "ds-z3-cosine-2groups": Spec(scheduler="WarmupCosineLR", groups=[1e-3, 5e-4], zero=3),
    "ds-z0-default-peak-2groups": Spec(scheduler="WarmupLR-default-max", groups=[1e-3, 5e-4]),
    "ds-z0-onecycle": Spec(scheduler="OneCycle"),
    "accelerate-z2-cosine": Spec(path="accelerate", scheduler="WarmupCosineLR", zero=2),
    "trainer-decay": Spec(path="trainer", scheduler="WarmupDecayLR"),
    "trainer-torch-scheduler": Spec(path="trainer", torch_scheduler=True),
    # what the frameworks that drive DeepSpeed's schedulers save beside them (harness._client_state)
    "ds-z0-gpt-neox-client-state": Spec(scheduler="WarmupDecayLR", client_state="gpt-neox"),
    "ds-z0-megatron-client-state": Spec(scheduler="WarmupLR-linear", client_state="megatron"),
}


@pytest.fixture(scope="module")
def audit(tmp_path_factory: pytest.TempPathFactory) -> Audit:
    """`python -S -m accelerate_warmup_patch audit ...` with a copy of the package alone on its path."""
    run = bare_audit(tmp_path_factory.mktemp("bare"))
    probe = run("-c", "import importlib.util as u; print([m for m in ('torch', 'deepspeed', 'wrapt', 'accelerate', "
                "'transformers') if u.find_spec(m)])")
    assert probe.stdout.strip() == "[]", probe  # the audit below cannot import any of them
    return lambda *paths: run("-m", "accelerate_warmup_patch", "audit", *paths)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[list[float | None]]]]:
    """Every run of RUNS trained and saved under one folder; the lrs each optimizer step used, by name."""
    root = tmp_path_factory.mktemp("runs")
    specs = {name: replace(spec, save_to=str(root / name)) for name, spec in RUNS.items()}
    ran = run_specs(*specs.values())
    return root, {name: ran.lrs[spec.key] for name, spec in specs.items()}


def _reports(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {Path(str(r["path"])).name: r for r in json.loads(proc.stdout)}


def test_audit_of_a_folder_of_runs_gives_each_run_the_step0_lr_it_recorded(runs, audit):
    root, recorded = runs
    proc = audit(str(root), "--json")
    reports = _reports(proc)
    assert sorted(reports) == sorted(RUNS), proc.stderr  # each run once (the Trainer's: checkpoint-3 and -6)
    version = installed("deepspeed")
    for name, spec in RUNS.items():
        report, step0 = reports[name], recorded[name][0]
        newest = GOLDEN["runs"][spec.newest_key][0]
        assert report["deepspeed_version"] == version
        if spec.torch_scheduler:  # the bug cannot reach a torch scheduler, patched or not (#55 item 3)
            assert report["verdict"] == "not affected" and report["scheduler"] is None, report
            assert "torch lr scheduler" in report["why"] and "not one of DeepSpeed's" in report["why"], report
            continue
        if step0 == pytest.approx(newest) and report["verdict"] == "unknown" and cleared_or_unseen(report):
            # no record: no release is said to have run step 0, so no step-0 lr either; 0.19.8's is still golden's
            assert report["step0_lr"] is None and report["step0_lrs"] is None, (name, report)
            assert report["newest_step0_lr"] == pytest.approx(newest[0]), (name, report)
            continue
        # the step-0 lr the checkpoint says the run used is the one the run recorded, and 0.19.8's is golden's
        assert report["step0_lr"] == pytest.approx(step0[0]), (name, report)
        assert report["newest_step0_lr"] == pytest.approx(newest[0]), (name, report)
        assert report["param_groups"] == len(spec.groups), (name, report)
        for got, used in zip(report["step0_lrs"], step0):
            assert got is None or got == pytest.approx(used), (name, report)
        assert report["newest_step0_lrs"] == pytest.approx(newest), (name, report)
        # Without warmup_max_lr, a release that lacks 0.19.4's default peak peaked groups 1+ elsewhere than 0.19.8
        # unless their own lr happened to be that peak, and no checkpoint holds their own lr: the audit cannot say.
        peak_unknowable = spec.scheduler == "WarmupLR-default-max" and len(spec.groups) > 1 and \
            upstream.lacks("default_peak", "WarmupLR", version)
        expected = ("affected" if step0 != pytest.approx(newest) else "unknown" if peak_unknowable
                    else "not affected")
        assert report["verdict"] == expected, (name, step0, newest, report)
    assert proc.returncode == (1 if any(r["verdict"] == "affected" for r in reports.values()) else 0), proc.stderr


def test_audit_table_names_each_run_and_its_verdict(runs, audit):
    root, _ = runs
    verdicts = {name: r["verdict"] for name, r in _reports(audit(str(root), "--json")).items()}
    proc = audit(*(str(root / name) for name in RUNS))  # each run named: the same runs, the same verdicts
    for name, verdict in verdicts.items():
        assert f"{root / name}: {verdict}" in proc.stdout.splitlines(), proc.stdout


def test_audit_of_one_tag_folder_and_of_one_trainer_checkpoint(runs, audit):
    root, recorded = runs
    tag = audit(str(root / "ds-z1-linear" / "ckpt"), "--json")
    (report,) = json.loads(tag.stdout)
    assert report["path"] == str(root / "ds-z1-linear" / "ckpt")
    assert step0_lr_said(report, recorded["ds-z1-linear"][0][0]), report
    saves = sorted(p.name for p in (root / "trainer-decay").glob("checkpoint-*"))
    assert saves == ["checkpoint-3", "checkpoint-6"]
    (first,) = json.loads(audit(str(root / "trainer-decay" / "checkpoint-3"), "--json").stdout)
    assert first["checkpoint"].endswith("checkpoint-3/global_step3/mp_rank_00_model_states.pt")
    assert first["last_batch_iteration"] == 2 and step0_lr_said(first, recorded["trainer-decay"][0][0]), first


def test_a_legacy_format_checkpoint_audits_as_its_zip_twin(runs, audit, tmp_path):
    import torch

    root, _ = runs
    source = root / "ds-z0-log"
    twin = tmp_path / "ds-z0-log"
    shutil.copytree(source, twin)
    file = twin / "ckpt" / "mp_rank_00_model_states.pt"
    torch.save(torch.load(file, weights_only=False), file, _use_new_zipfile_serialization=False)
    assert not file.read_bytes().startswith(b"PK")  # really the legacy format
    (zipped,) = json.loads(audit(str(source), "--json").stdout)
    (legacy,) = json.loads(audit(str(twin), "--json").stdout)
    for report in (zipped, legacy):
        del report["path"], report["checkpoint"], report["step0_checkpoint"]
    assert legacy == zipped


class _RunsACommand:
    """Pickles as a call of os.system: what torch.load(weights_only=False) would run."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_a_hostile_checkpoint_runs_nothing_and_is_judged_from_its_data(tmp_path, audit, zipped):
    import torch

    marker = tmp_path / "it-ran"
    tag = tmp_path / "run" / "global_step1"
    tag.mkdir(parents=True)
    (tag.parent / "latest").write_text("global_step1")
    file = tag / "mp_rank_00_model_states.pt"
    config = {"optimizer": {"type": "Adam", "params": {"lr": 1e-3}}, "scheduler": {
        "type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5}}}
    torch.save({"ds_version": "0.15.2", "ds_config": config, "global_steps": 1,
                "module": _RunsACommand(f"touch {marker}")}, file, _use_new_zipfile_serialization=zipped)
    proc = audit(str(tmp_path / "run"), "--json")
    assert not marker.exists()
    (report,) = json.loads(proc.stdout)
    # the data beside the command is read: 0.15.2 ran step 0 at the optimizer's lr
    assert report["verdict"] == "affected" and report["step0_lr"] == 0.001, report
    assert proc.returncode == 1 and proc.stderr.startswith("summary: 1 report in "), proc.stderr  # no error line
    # the file is what it claims: the way DeepSpeed loads a checkpoint runs the command
    loaded = subprocess.run([sys.executable, "-c", f"import torch; torch.load({str(file)!r}, weights_only=False)"],
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0 and marker.exists(), loaded.stderr


def test_framework_client_states_are_read_as_data(runs, audit):
    """gpt-neox (megatron/checkpointing.py, save_ds_checkpoint) and Megatron-DeepSpeed (megatron/checkpointing.py,
    save_checkpoint) save numpy's and torch's rng states, and Megatron its argparse.Namespace, beside DeepSpeed's
    keys (harness._client_state passes the real objects to save_checkpoint). 0.4.0 refused their names and called
    the runs unreadable; they are judged like any other."""
    import torch

    root, recorded = runs
    reports = _reports(audit(str(root), "--json"))
    for name, object_key, type_name in (("ds-z0-gpt-neox-client-state", "np_rng_state", "tuple"),
                                        ("ds-z0-megatron-client-state", "args", "Namespace")):
        saved = torch.load(root / name / "ckpt" / "mp_rank_00_model_states.pt", weights_only=False)
        assert type(saved["np_rng_state"][1]).__module__ == "numpy" and type(saved[object_key]).__name__ == type_name
        report = reports[name]
        assert report["verdict"] != "unreadable" and step0_lr_said(report, recorded[name][0][0]), report
        if installed("deepspeed") == "0.15.2":
            assert report["verdict"] == "affected" and report["step0_lr"] == pytest.approx(0.001), report


def test_a_folder_with_no_run_is_a_one_line_error_and_exit_2(tmp_path, audit):
    (tmp_path / "output" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "output" / "checkpoint-3" / "pytorch_model.bin").write_bytes(b"not deepspeed")
    for path in (tmp_path / "output", tmp_path / "missing"):
        proc = audit(str(path))
        # the summary says that nothing was judged (#55 item 5: never silent)
        assert proc.returncode == 2 and "nothing was judged" in proc.stdout.splitlines()[-1], proc
        (line,) = proc.stderr.splitlines()
        assert line.startswith("accelerate-warmup-patch audit: error: ") and str(path) in line
