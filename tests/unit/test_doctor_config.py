"""doctor --config's reading of a user's config (doctor_config.load and plan), without a child interpreter.

tests/test_doctor.py runs the command on real files for what it prints and its exit code; how each kind of
file is followed, refused and filled in is here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelerate_warmup_patch.cli import doctor_config
from accelerate_warmup_patch.cli.doctor_config import ConfigError

DS = {"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 5}}}


def _write(folder: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        (folder / name).write_text(content if isinstance(content, str) else json.dumps(content))


def test_a_ds_config_is_read_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"ds_config.json": DS})
    loaded = doctor_config.load("ds_config.json")
    assert (loaded.named, loaded.ds_config, loaded.via, loaded.trainer_lr) == ("ds_config.json", DS, "", None)


def test_training_arguments_lead_to_the_ds_config_they_name_and_give_their_lr(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"ds_config.json": DS, "args.json": {"output_dir": "out", "learning_rate": 2e-3,
                                                          "deepspeed": "ds_config.json"}})
    loaded = doctor_config.load("args.json")
    assert loaded.ds_config == DS and loaded.trainer_lr == 2e-3
    assert loaded.via == "TrainingArguments' deepspeed names ds_config.json"


def test_training_arguments_may_hold_the_ds_config_inline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"args.json": {"output_dir": "out", "deepspeed": DS}})
    loaded = doctor_config.load("args.json")
    assert loaded.ds_config == DS and loaded.via == "TrainingArguments' deepspeed (inline)"


@pytest.mark.parametrize(("files", "named"), [
    ({"args.json": {"output_dir": "out", "deepspeed": "args.json"}}, "args.json"),
    ({"args.json": {"deepspeed": "more.json"}, "more.json": {"deepspeed": "args.json"}}, "args.json"),
])  # an accelerate YAML that names itself: tests/test_doctor.py (PyYAML comes with accelerate)
def test_a_config_that_leads_back_to_itself_is_refused_by_name(files: dict[str, Any], named: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, files)
    with pytest.raises(ConfigError, match="leads back to a file already read"):
        doctor_config.load(named)


@pytest.mark.parametrize(("content", "message"), [
    ('{"optimizer": {"params": {"lr": 1e-3}},, "scheduler": {}}',
     "ds_config.json is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 40 (char 39)"),
    ("[1, 2]", "ds_config.json holds a JSON list, not a config object"),
    ("deepspeed_config:\n  deepspeed_config_file: ds.json\n",
     "(an accelerate config YAML is read as YAML only when its name ends in .yaml or .yml)"),
])
def test_a_file_that_is_not_a_config_object_is_named_with_why(content: str, message: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds_config.json").write_text(content)
    with pytest.raises(ConfigError) as raised:
        doctor_config.load("ds_config.json")
    assert str(raised.value).startswith(message) or str(raised.value).endswith(message), str(raised.value)


def test_a_missing_file_is_one_sentence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^cannot read missing\.json: No such file or directory$"):
        doctor_config.load("missing.json")


@pytest.mark.parametrize(("deepspeed", "message"), [
    (7, "TrainingArguments' deepspeed is 7, not a path to a DeepSpeed config"),
    ("", "TrainingArguments' deepspeed is '', not a path to a DeepSpeed config"),
    ("nowhere.json", "TrainingArguments' deepspeed names nowhere.json, which is not a file here or beside args.json"),
])
def test_training_arguments_naming_no_config_are_refused(deepspeed: object, message: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {"args.json": {"deepspeed": deepspeed}})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        doctor_config.load("args.json")


def _plan(ds_config: dict[str, Any], lr: float | None = None, group_lrs: list[float] | None = None,
          sets: dict[str, float] | None = None, trainer_lr: float | None = None) -> doctor_config.Plan:
    loaded = doctor_config.Loaded("ds_config.json", ds_config, "", trainer_lr)
    return doctor_config.plan(loaded, lr, group_lrs, dict(sets or {}))


def test_a_config_without_a_scheduler_plans_nothing() -> None:
    assert _plan({"optimizer": {"params": {"lr": 1e-3}}}).scheduler is None
    assert _plan({"scheduler": {"params": {}}}).scheduler is None


def test_auto_values_every_filler_fills_alike_are_filled_and_the_rest_asked_for() -> None:
    planned = _plan({"optimizer": {"params": {"lr": "auto"}}, "scheduler": {"type": "WarmupLR", "params": {
        "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto", "warmup_type": "linear"}}})
    assert planned.lr is None and planned.missing == ["--lr", "--set warmup_num_steps=N"]
    assert planned.params["warmup_min_lr"] == 0.0  # both fillers fill 0
    assert planned.params["warmup_max_lr"] == "auto"  # the optimizer's lr, which is not known yet
    assert any("TrainingArguments.learning_rate" in line for line in planned.autos), planned.autos
    params: dict[str, Any] = {"warmup_max_lr": "auto", "warmup_num_steps": "auto"}
    filled = _plan({"optimizer": {"params": {"lr": "auto"}}, "scheduler": {"type": "WarmupLR", "params": params}},
                   lr=1e-3, sets={"warmup_num_steps": 5})
    assert params["warmup_num_steps"] == "auto"  # the user's config is not changed
    assert filled.missing == [] and filled.lr == 1e-3 and filled.group_lrs == [1e-3]
    assert filled.params == {"warmup_max_lr": 1e-3, "warmup_num_steps": 5}


def test_the_trainers_learning_rate_fills_an_auto_optimizer_lr() -> None:
    planned = _plan({"optimizer": {"params": {"lr": "auto"}}, "scheduler": {"type": "WarmupLR", "params": {}}},
                    trainer_lr=2e-3)
    assert planned.lr == 2e-3 and planned.missing == []
    assert "optimizer.params.lr: auto: TrainingArguments' learning_rate, 0.002" in planned.autos


def test_an_optimizer_built_in_code_asks_for_its_lr_and_group_lrs_are_kept() -> None:
    planned = _plan({"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 8}}})
    assert planned.missing == ["--lr"] and planned.group_lrs == []
    given = _plan({"scheduler": {"type": "WarmupCosineLR", "params": {}}}, lr=1e-3, group_lrs=[1e-3, 5e-4],
                  sets={"total_num_steps": 8})
    assert given.group_lrs == [1e-3, 5e-4] and given.params == {"total_num_steps": 8}
