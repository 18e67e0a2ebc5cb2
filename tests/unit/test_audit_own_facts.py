"""Audit v5 (#55 items 2-4), the judgement alone on synthetic checkpoints (tests/unit/audit_files.py): only the
checkpoint's own facts clear a run, a bound record that proves step 0 decides whatever the config says or lacks, a
scheduler that is not DeepSpeed's is "not affected", and an engine is known by its parameters' names, shapes and
dtypes. DeepSpeed 0.15.2 runs WarmupLR's step 0 at the optimizer's lr, 0.19.8 at warmup_min_lr. The same cases on
real engines: tests/test_audit_shapes.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import Call, Global, Tensor, audit, one
from records import observed, record2, write_record

from accelerate_warmup_patch.cli import audit as audit_cli

WARMUP: dict[str, Any] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                                         "warmup_num_steps": 5, "warmup_type": "linear"}}
# a config whose warmup starts at the optimizer's lr: 0.15.2 ran step 0 as 0.19.8 does, had the file said so then
HARMLESS = {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-3, "warmup_num_steps": 5,
                                           "warmup_type": "linear"}}
TORCH_STATE = {"base_lrs": [1e-3], "last_epoch": 6, "_step_count": 7, "_last_lr": [1e-3], "lr_lambdas": [None]}


def _config_file(folder: Path, scheduler: dict[str, Any] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adam",
                                                                                "params": {"lr": 1e-3}}}
    if scheduler is not None:
        config["scheduler"] = scheduler
    path = folder / "ds_config.json"
    path.write_text(json.dumps(config))
    return path


def _with(states: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**states, **changes}


def _patched(save_dir: Path, value: dict[str, Any], step0: dict[str, Any], *, tag: str = "global_step6",
             scheduler: str | None = "WarmupLR", **record: Any) -> Path:
    files.write_run(save_dir, tag=tag, value=value)
    folder = save_dir / tag
    written = record2(folder, step0, deepspeed=value["ds_version"], global_steps=value["global_steps"],
                      scheduler=scheduler or "WarmupLR", **record)
    if scheduler is None:
        written["scheduler"] = None
    write_record(folder, written)
    return folder


def _main(*args: str) -> tuple[int, list[dict[str, Any]]]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = audit_cli.main(list(args[1:]), as_json=True, config_root=args[0])
    return code, json.loads(out.getvalue())


# Item 2: only the checkpoint's own facts clear a run -------------------------------------------------------------

def test_a_config_file_read_by_its_path_never_clears_an_unpatched_run(tmp_path: Path) -> None:
    # today's file says the warmup starts at the optimizer's lr; the job may have run another (#55 item 2)
    path = _config_file(tmp_path / "configs", HARMLESS)
    files.write_run(tmp_path / "run", ds_config=str(path))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "read as it is now" in report["why"] and str(path) in report["why"], report
    assert report["config_files"] == [str(path)] and report["step0_lr"] is None, report


def test_a_config_file_read_by_its_path_may_make_a_verdict_worse(tmp_path: Path) -> None:
    path = _config_file(tmp_path / "configs", WARMUP)
    files.write_run(tmp_path / "run", ds_config=str(path))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert report["config_files"] == [str(path)], report


def test_config_root_reads_a_relative_path_that_may_make_it_worse_never_clear_it(tmp_path: Path) -> None:
    _config_file(tmp_path / "job", HARMLESS)
    files.write_run(tmp_path / "run", ds_config="ds_config.json")
    _, (report,) = _main(str(tmp_path / "job"), str(tmp_path / "run"))
    assert report["verdict"] == "unknown" and "read as it is now" in report["why"], report
    _config_file(tmp_path / "job", WARMUP)
    _, (report,) = _main(str(tmp_path / "job"), str(tmp_path / "run"))
    assert report["verdict"] == "affected", report


def test_a_config_saved_in_the_checkpoint_still_clears(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run", scheduler=HARMLESS)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and report["config_files"] == [], report


# Item 3: a bound record that proves step 0 decides ----------------------------------------------------------------

def test_a_bound_record_proves_step_0_whatever_the_config_path(tmp_path: Path) -> None:
    relative = files.model_states(ds_config="ds_config.json")
    _patched(tmp_path / "relative", relative, observed([0.0], [0.0]))
    absolute = files.model_states(ds_config=str(_config_file(tmp_path / "configs", WARMUP)))
    _patched(tmp_path / "absolute", absolute, observed([0.0], [0.0]))
    for name in ("relative", "absolute"):
        code, report = one(tmp_path / name)
        assert report["verdict"] == "not affected" and code == 0, (name, report)
        assert report["step0_lrs"] == [0.0] and report["newest_step0_lrs"] == [0.0], (name, report)


def test_a_bound_record_proves_step_0_of_a_scheduler_built_in_code(tmp_path: Path) -> None:
    # no scheduler block: a WarmupLR built in code, or passed as a callable; its state is DeepSpeed's
    code_built = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2})
    _patched(tmp_path / "run", code_built, observed([0.0], [0.0]))
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and report["scheduler"] == "WarmupLR", report


def test_a_bound_record_of_another_lr_is_affected_without_a_config(tmp_path: Path) -> None:
    code_built = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2})
    _patched(tmp_path / "run", code_built, observed([1e-3], [0.0], patch_did="warned"), mode="warn")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report


def test_a_record_that_proves_nothing_leaves_a_run_without_its_config_unknown(tmp_path: Path) -> None:
    code_built = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2})
    _patched(tmp_path / "no-expected", code_built, observed([0.0], None))
    _patched(tmp_path / "unbound", code_built, observed([0.0], [0.0]), bound=False)
    files.write_run(tmp_path / "unpatched", ds_config={"train_micro_batch_size_per_gpu": 2})
    for name in ("no-expected", "unbound", "unpatched"):
        _, report = one(tmp_path / name)
        assert report["verdict"] == "unknown", (name, report)


def test_a_proven_step_0_resumed_unpatched_without_a_config_is_unknown(tmp_path: Path) -> None:
    # the newest save's process ran unpatched (warn): what its later steps met needs the params, which no file holds
    code_built = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2})
    _patched(tmp_path / "run", code_built, observed([0.0], [0.0]), mode="warn")
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and "params" in report["why"], report


def test_a_torch_scheduler_is_not_affected_patched_or_not(tmp_path: Path) -> None:
    # the HF Trainer with no scheduler block: its own torch scheduler, which the engine holds and saves
    trainer = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2})
    trainer["lr_scheduler"] = TORCH_STATE
    files.write_run(tmp_path / "unpatched", value=trainer)
    _patched(tmp_path / "patched", trainer, observed([1e-3], None) | {"scheduler": None},
             scheduler="torch.optim.lr_scheduler.LambdaLR")
    for name in ("unpatched", "patched"):
        code, report = one(tmp_path / name)
        assert report["verdict"] == "not affected" and code == 0, (name, report)
        assert "torch lr scheduler" in report["why"] and "not one of DeepSpeed's" in report["why"], (name, report)


def test_an_unconfigured_run_without_a_record_is_unknown_even_on_a_release_that_lacks_no_backport(
        tmp_path: Path) -> None:
    # 0.19.8 lacks nothing, but no record says 0.19.8 ran step 0: a resume of an older release's save looks the same
    files.write_run(tmp_path / "newest", version="0.19.8", ds_config="ds_config.json")
    files.write_run(tmp_path / "buggy", version="0.15.2", ds_config="ds_config.json")
    newest = one(tmp_path / "newest")[1]
    assert newest["verdict"] == "unknown" and "no record says which release did" in newest["why"], newest
    assert one(tmp_path / "buggy")[1]["verdict"] == "unknown"


# Item 4: an engine is more than its parameters' names -------------------------------------------------------------

def _engine(shape: tuple[int, int], storage: str = "FloatStorage") -> Call:
    return Call(Global("collections", "OrderedDict"), ([["0.weight", Tensor(shape, storage)],
                                                        ["0.bias", Tensor(shape[:1], storage)]],))


def test_two_engines_with_alike_names_under_custom_tags_are_two(tmp_path: Path) -> None:
    # a GAN: generator and critic, both nn.Sequential; the critic's truthful record is not the generator's
    critic_warmup = {"type": "WarmupLR", "params": {**WARMUP["params"], "warmup_min_lr": 1e-5}}
    generator = _with(files.model_states(scheduler=WARMUP), module=_engine((4, 4)))
    critic = _with(files.model_states(scheduler=critic_warmup, global_steps=3), module=_engine((8, 4)))
    _patched(tmp_path / "gan", generator, observed([0.0], [0.0]), tag="generator")
    _patched(tmp_path / "gan", critic, observed([1e-5], None), tag="critic")
    code, reports = audit(tmp_path / "gan")
    verdicts = {r["engine"]: r["verdict"] for r in reports}
    assert verdicts == {"generator": "not affected", "critic": "not affected"} and code == 0, reports


def test_a_models_dtype_and_its_records_scheduler_class_tell_engines_apart(tmp_path: Path) -> None:
    from accelerate_warmup_patch.cli.audit.read import read_save

    for name, storage in (("fp32", "FloatStorage"), ("fp32-again", "FloatStorage"), ("fp16", "HalfStorage")):
        files.write_run(tmp_path / name, value=_with(files.model_states(), module=_engine((4, 4), storage)))
    fp32, again, fp16 = (read_save(tmp_path / name / "global_step6").model for name in ("fp32", "fp32-again", "fp16"))
    assert fp32 == again and fp32 != fp16 and fp32 is not None
    one_class = _with(files.model_states(scheduler=WARMUP), module=_engine((4, 4)))
    decay = {"type": "WarmupDecayLR", "params": {**WARMUP["params"], "warmup_min_lr": 1e-5, "total_num_steps": 9}}
    other = _with(files.model_states(scheduler=decay, global_steps=3), module=_engine((4, 4)))
    _patched(tmp_path / "two", one_class, observed([0.0], [0.0]), tag="first")
    # another engine: its record names another class, and its step 0 was not judged against first's schedule
    _patched(tmp_path / "two", other, observed([1e-5], None), tag="second", scheduler="WarmupDecayLR")
    _, reports = audit(tmp_path / "two")
    assert {r["engine"]: r["verdict"] for r in reports}["first"] == "not affected", reports


# Found by the search of run histories (#55 item 6) --------------------------------------------------------------

def test_a_save_whose_scheduler_restarted_after_step_0_is_not_judged_as_the_process_that_ran_it(
        tmp_path: Path) -> None:
    # a resume without the scheduler's state (its iteration counts 1 step, the engine 6): step 0 ran in a process
    # whose save is not here (deleted, or another folder), which the table cannot name
    files.write_run(tmp_path / "restarted", value=_with(files.model_states(), lr_scheduler={"last_batch_iteration": 0}))
    code, report = one(tmp_path / "restarted")
    assert report["verdict"] == "unknown" and "built after global step 5" in report["why"] and code == 0, report
    # an fp16 overflow skips a scheduler step, not a restart; and counts that agree are judged as before
    skipped = _with(files.model_states(), lr_scheduler={"last_batch_iteration": 3}, skipped_steps=2)
    files.write_run(tmp_path / "skipped", value=skipped)
    files.write_run(tmp_path / "agree")
    assert one(tmp_path / "skipped")[1]["verdict"] == "affected"
    assert one(tmp_path / "agree")[1]["verdict"] == "affected"


def test_a_record_that_names_a_resumed_save_as_step_0s_is_not_read_as_that_saves_release(tmp_path: Path) -> None:
    # a run started unpatched on 0.19.8 (global_step2), resumed unpatched on 0.15.2 without the scheduler's state
    # (global_step3: its scheduler counts 1 step, the engine 3), then resumed in warn mode (global_step4): its record
    # says step 0 ran unrecorded in global_step3, on 0.15.2, but global_step3's own counts say it resumed too (found by
    # the run-history search, 0.19.8 with 0.15.2 beside it, seed 114: affected before)
    unrecorded = {"how": "unrecorded", "deepspeed": "0.15.2", "global_steps": 3, "tag": "global_step3",
                  "scheduler": "WarmupLR", "why": "the save it resumed from (global_step3) holds no record"}
    for name, iteration in (("restarted", 0), ("continued", 2)):
        files.write_run(tmp_path / name, tag="global_step2", value=files.model_states(version="0.19.8",
                                                                                       global_steps=2))
        files.write_run(tmp_path / name, tag="global_step3", value=_with(files.model_states(global_steps=3),
                                                                         lr_scheduler={"last_batch_iteration":
                                                                                       iteration}))
        _patched(tmp_path / name, files.model_states(global_steps=4), unrecorded, tag="global_step4", mode="warn")
    _, report = one(tmp_path / "restarted")
    assert report["verdict"] == "unknown" and "global_step3's scheduler counts 1 steps" in report["why"], report
    # global_step3's counts agree: its process may have run step 0 on 0.15.2 (a fresh start there), as the record says
    assert one(tmp_path / "continued")[1]["verdict"] == "affected"


def test_a_patched_resume_of_an_unpatched_torch_scheduler_run_is_not_affected(tmp_path: Path) -> None:
    # the HF Trainer's own scheduler, its first run unpatched (global_step2), resumed patched (global_step3): the
    # record knows of step 0 only that it ran unrecorded in global_step2, which is read as an unrecorded save is, by
    # the torch scheduler its files show (found by the run-history search's Trainer jobs: "unknown" before)
    trainer = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2}, global_steps=2)
    trainer["lr_scheduler"] = TORCH_STATE
    resumed_from = {"how": "unrecorded", "deepspeed": "0.15.2", "global_steps": 2, "tag": "global_step2",
                    "scheduler": None, "why": "the save it resumed from (global_step2) holds no record"}
    cases = {"beside": (True, None, TORCH_STATE), "alone": (False, None, TORCH_STATE),
             "under a DeepSpeed scheduler": (True, "WarmupLR", TORCH_STATE),
             "into DeepSpeed's": (True, None, {"last_batch_iteration": 2})}
    for name, (beside, scheduler, state) in cases.items():
        if beside:
            files.write_run(tmp_path / name, tag="global_step2", value=trainer)
        _patched(tmp_path / name, _with(trainer, global_steps=3, lr_scheduler=state),
                 resumed_from | {"scheduler": scheduler}, tag="global_step3",
                 scheduler="torch.optim.lr_scheduler.LambdaLR")
    for name in ("beside", "alone"):  # the start here, or elsewhere: as an unrecorded save of it reads
        code, report = one(tmp_path / name)
        assert report["verdict"] == "not affected" and code == 0, (name, report)
        assert "torch lr scheduler" in report["why"], (name, report)
    # the record names DeepSpeed's scheduler at step 0, or this process held one of DeepSpeed's: the record decides
    for name in ("under a DeepSpeed scheduler", "into DeepSpeed's"):
        assert one(tmp_path / name)[1]["verdict"] == "unknown", (name, one(tmp_path / name)[1])


def test_a_step_0_observed_under_a_torch_scheduler_is_not_affected_whatever_resumed_it(tmp_path: Path) -> None:
    # the HF Trainer's own scheduler, its run patched, resumed by a process whose engine held no scheduler (loaded
    # without it, the config without a block): the bound record's chain observed step 0 under the torch scheduler
    # (found by the run-history search, seed 113: "unknown, the engine held no lr scheduler" before)
    under_torch = observed([1e-3], None) | {"scheduler": None, "torch_scheduler": "torch.optim.lr_scheduler.LambdaLR"}
    resumed = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2}, global_steps=3)
    cases = {"resumed without one": (under_torch, None, True),
             "a record before the key": (under_torch | {"torch_scheduler": None}, None, True),
             "a save holds DeepSpeed's state": (under_torch, {"last_batch_iteration": 2}, True),
             "resumed without one in warn mode": (under_torch, None, True),
             "a DeepSpeed class named too": (under_torch | {"scheduler": "WarmupLR"}, None, True),
             "unbound": (under_torch, None, False)}
    for name, (step0, state, bound) in cases.items():
        mode = "warn" if "warn" in name else "reset"  # warn: a DeepSpeed scheduler outside the engine ran unfixed
        _patched(tmp_path / name, _with(resumed, lr_scheduler=state), step0, tag="global_step3", scheduler=None,
                 bound=bound, mode=mode)
    code, report = one(tmp_path / "resumed without one")
    assert report["verdict"] == "not affected" and code == 0, report
    assert "torch.optim.lr_scheduler.LambdaLR, a torch lr scheduler" in report["why"], report
    for name in ("a record before the key", "a save holds DeepSpeed's state", "resumed without one in warn mode",
                 "a DeepSpeed class named too", "unbound"):
        assert one(tmp_path / name)[1]["verdict"] == "unknown", (name, one(tmp_path / name)[1])


def test_a_resume_of_a_torch_scheduler_run_whose_record_proves_nothing_is_not_affected(tmp_path: Path) -> None:
    # found by the run-history search (seed 115): the HF Trainer's own scheduler, a job of two ranks one of which was
    # not armed (its record unbound), resumed by the Trainer: the resume's record hands on "unbound", which knows no
    # more than that save's files, a torch scheduler's state ("unknown" before); the same for a loaded record 1
    trainer = files.model_states(ds_config={"train_micro_batch_size_per_gpu": 2}, global_steps=2)
    trainer["lr_scheduler"] = TORCH_STATE
    under_torch = observed([1e-3], None) | {"scheduler": None, "torch_scheduler": "torch.optim.lr_scheduler.LambdaLR"}
    told = {"deepspeed": "0.15.2", "global_steps": 2, "tag": "global_step2", "why": "its record proves nothing"}
    cases = {"unbound": ({"how": "unbound", **told}, None),
             "record-1": ({"how": "record-1", "claimed": "unknown", **told}, None),
             "a claim of DeepSpeed's": ({"how": "unbound", **told}, "WarmupLR")}
    for name, (story, scheduler) in cases.items():
        _patched(tmp_path / name, trainer, under_torch, tag="global_step2", scheduler=None, bound=False)
        _patched(tmp_path / name, _with(trainer, global_steps=3), story | {"scheduler": scheduler},
                 tag="global_step3", scheduler="torch.optim.lr_scheduler.LambdaLR", mode="warn")
    for name in ("unbound", "record-1"):
        code, report = one(tmp_path / name)
        assert report["verdict"] == "not affected" and code == 0, (name, report)
        assert "torch lr scheduler" in report["why"], (name, report)
        assert any(f"proves nothing ({name})" in note for note in report["notes"]), (name, report)
    # the claim names DeepSpeed's scheduler at step 0: the record decides, and it proves nothing
    assert one(tmp_path / "a claim of DeepSpeed's")[1]["verdict"] == "unknown"
