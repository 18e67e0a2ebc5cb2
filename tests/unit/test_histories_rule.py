"""The rule tests/test_audit_histories.py checks after each step of a generated run history, and its shrinking
(tests/histories.py), on their own: each break is found, and a failing history shrinks to the steps that matter."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))
import histories
from histories import Save, World


def _world(tmp_path: Path, *saves: Save) -> World:
    return World(tmp_path, [{f"global_step{2 + index}": save for index, save in enumerate(saves)}])


def _report(tmp_path: Path, verdict: str, engine: str | None = None) -> dict[str, list[dict[str, Any]]]:
    return {str(tmp_path / "run0"): [{"verdict": verdict, "why": "because", "engine": engine}]}


def test_each_break_of_the_rule_is_found(tmp_path: Path) -> None:
    hurt = _world(tmp_path, Save([0.0], proven=True), Save([1e-3], proven=False))
    assert "not affected, but global_step3" in histories.broken(hurt, _report(tmp_path, "not affected"))[0]
    assert histories.broken(hurt, _report(tmp_path, "unknown")) == []
    honest = _world(tmp_path, Save([0.0], proven=False, origin=1, fresh=True))
    assert "affected, but every save" in histories.broken(honest, _report(tmp_path, "affected"))[0]
    # its start deleted (or in another folder): the audit assumes the earliest save here ran step 0 (documented)
    resumed = _world(tmp_path, Save([0.0], proven=False, origin=1))
    assert histories.broken(resumed, _report(tmp_path, "affected")) == []
    assert histories.broken(honest, _report(tmp_path, "unknown")) == []
    proven = _world(tmp_path, Save([0.0], proven=True), Save([0.0], proven=True))
    assert "a bound record proves" in histories.broken(proven, _report(tmp_path, "unknown"))[0]
    assert "unreadable" in histories.broken(proven, _report(tmp_path, "unreadable"))[0]
    assert histories.broken(proven, _report(tmp_path, "not affected")) == []


def test_a_report_is_held_to_the_saves_of_the_engine_it_names(tmp_path: Path) -> None:
    # a GAN's two engines in one folder: the generator's global_stepN saves, the critic's custom tags
    critic = Save([1e-3], proven=False, origin=2, fresh=True, model="b", tags="custom")
    world = World(tmp_path, [{"global_step2": Save([0.0], proven=True, origin=1, fresh=True), "critic2": critic}])
    assert histories.broken(world, _report(tmp_path, "not affected", "global_step*")) == []
    assert "not affected, but critic2" in histories.broken(world, _report(tmp_path, "not affected", "critic2"))[0]
    assert "a bound record proves" in histories.broken(world, _report(tmp_path, "unknown", "global_step*"))[0]
    # a custom tag's later save of the same model joins it (the audit weighs them as one engine's)
    resumed = Save([0.0], proven=False, origin=2, model="b", tags="custom", steps=3)
    world.folders[0].update({"critic2": Save([0.0], proven=True, origin=2, fresh=True, model="b", tags="custom"),
                             "critic3": resumed})
    assert histories.broken(world, _report(tmp_path, "unknown", "critic2")) == []
    assert histories.broken(world, _report(tmp_path, "affected", "critic3"))[0].startswith("run0 (critic3): affected")


def test_a_zero_0_save_over_a_zero_1_tag_is_not_proven(tmp_path: Path) -> None:
    world = World(tmp_path, [{}])
    histories._place(world, 0, Save([0.0], proven=True, zero=1))
    histories._place(world, 0, Save([0.0], proven=True, zero=0))
    assert world.folders[0]["global_step2"].proven is False and world.folders[0]["global_step2"].optim_files == 1


def test_a_failing_history_shrinks_to_the_steps_that_fail() -> None:
    steps = histories.history(random.Random(1), 12)
    culprit = {"op": "rerun", "run": 0, "mode": "off"}
    steps[7] = culprit
    smallest = histories.shrunk(steps, lambda trial: culprit in trial)
    assert smallest == [steps[0], culprit]


def test_histories_are_plain_data_of_the_steps_the_docs_name() -> None:
    steps = histories.history(random.Random(2), 40)
    assert steps[0]["op"] == "start" and {step["op"] for step in steps} <= {"start", "resume", "rerun", "copy",
                                                                            "delete", "move", "edit", "job",
                                                                            "jobresume", "convert"}
    assert all(step.get("mode", "off") in histories.MODES for step in steps)


def test_a_two_rank_job_ran_step_0_as_its_worst_rank_did(tmp_path: Path) -> None:
    world = World(tmp_path)
    step = {"op": "job", "modes": ["reset", "off"], "scheduler": "WarmupLR", "zero": 2}
    histories.play(step, world, lambda **_: [], lambda **_: [[0.0], [1e-3]], lambda *_, **__: True)
    save = world.folders[0]["global_step2"]
    assert save.step0 == [1e-3] and not save.proven and save.ranks == 2 and save.optim_files == 2
    histories.play({**step, "modes": ["reset", "reset"]}, world, lambda **_: [], lambda **_: [[0.0], [0.0]],
                   lambda *_, **__: True)
    assert world.folders[1]["global_step2"].proven


def test_a_job_resume_loads_as_many_ranks_as_the_partitions_and_keeps_the_runs_step_0(tmp_path: Path) -> None:
    world = World(tmp_path, [{"global_step2": Save([1e-3], proven=False, origin=1, fresh=True, zero=2, ranks=2)}])
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "latest").write_text("global_step2")
    launched: list[dict[str, Any]] = []

    def job(**run: Any) -> list[list[float]]:
        launched.append(run)
        return [[0.0]] * len(run["modes"])

    step = {"op": "jobresume", "run": 0, "modes": ["reset", "reset", "off"], "ranks": 3, "load": "whole",
            "into": "new", "release": "other"}
    histories.play(step, world, lambda **_: [], job, lambda *_, **__: True)
    assert [run["modes"] for run in launched] == [["reset", "reset"]]  # ZeRO 2 of 2 ranks: 2 ranks load it
    resumed = world.folders[1]["global_step3"]
    assert resumed.step0 == [1e-3] and resumed.ranks == 2 and not resumed.proven
    assert (resumed.release, resumed.step0_release) == ("other", "installed")


def test_a_not_affected_is_never_excused_where_the_folder_cannot_tell_where_step_0_ran(tmp_path: Path) -> None:
    # an unpatched resume on another release of a run hurt on the installed one, alone in its folder: its files are
    # a fresh run's on that release, and the audit must not say "not affected" of it all the same
    unseen = Save([1e-3], proven=False, origin=1, steps=3, release="other", recorded=False)
    assert histories.broken(_world(tmp_path, unseen), _report(tmp_path, "not affected"))
    assert histories.broken(_world(tmp_path, unseen), _report(tmp_path, "unknown")) == []
    # a patched resume of it, whose record names the loaded save's release: the same
    handed = Save([1e-3], proven=False, origin=1, steps=4, recorded=True)
    assert histories.broken(_world(tmp_path, unseen, handed), _report(tmp_path, "not affected"))


def test_a_universal_checkpoint_is_its_own_engine_proven_only_beside_its_proven_source(tmp_path: Path) -> None:
    source = Save([0.0], proven=True, origin=1, fresh=True, zero=2)
    world = World(tmp_path, [{"global_step2": source}])
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "latest").write_text("global_step2")
    converted: list[tuple[Any, ...]] = []

    def convert(*args: Any, **kwargs: Any) -> bool:
        converted.append((*args, kwargs["release"]))
        return True

    histories.play({"op": "convert", "run": 0}, world, lambda **_: [], lambda **_: [], convert)
    assert converted == [(tmp_path / "run0" / "global_step2", tmp_path / "run0" / "global_step2_universal",
                          "installed")]
    failed = World(tmp_path, [{"global_step2": Save([0.0], proven=True, zero=2, optim_files=2)}])  # another run's
    histories.play({"op": "convert", "run": 0}, failed, lambda **_: [], lambda **_: [],
                   lambda *_, **kwargs: not kwargs["may_fail"])
    assert list(failed.folders[0]) == ["global_step2"]  # ds_to_universal failed on the extra partition: no copy
    unknown = {str(tmp_path / "run0"): [{"verdict": "unknown", "why": "", "engine": "global_step2_universal"}]}
    assert "a bound record proves" in histories.broken(world, unknown)[0]
    world.folders[0]["global_step2"] = Save([0.0], proven=True, origin=2, fresh=True, zero=2)  # a rerun over it
    assert histories.broken(world, unknown) == []
    hurt = {str(tmp_path / "run0"): [{"verdict": "not affected", "why": "", "engine": "global_step2_universal"}]}
    world.folders[0]["global_step2_universal"].step0 = [1e-3]
    assert "not affected, but global_step2_universal" in histories.broken(world, hurt)[0]


def test_a_module_only_resume_is_a_new_run_with_its_own_step_0(tmp_path: Path) -> None:
    # load_module_only: fresh scheduler and optimizer, global_steps from 0; the truth is its own first step
    world = World(tmp_path, [{"global_step2": Save([0.0], proven=True, origin=1, fresh=True, zero=1)}], starts=1)
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "latest").write_text("global_step2")
    trained: list[dict[str, Any]] = []

    def train(**run: Any) -> list[list[float]]:
        trained.append(run)
        return [[1e-3]]

    step = {"op": "resume", "run": 0, "mode": "off", "load": "module-only", "into": "same"}
    histories.play(step, world, train, lambda **_: [], lambda *_, **__: True)
    assert trained[0]["load"] == "module-only" and trained[0]["steps"] == 1, trained
    new = world.folders[0]["global_step1"]
    assert new.step0 == [1e-3] and new.origin == 2 and new.fresh and not new.proven, new
    assert world.folders[0]["global_step2"].step0 == [0.0]
    # a ZeRO 0 save: 0.15.2's load_module_only fails on its torch optimizer, so the step changes nothing
    world.folders[0]["global_step2"].zero = 0
    histories.play(step, world, train, lambda **_: [], lambda *_, **__: True)
    assert len(trained) == 1


def test_a_move_takes_the_oldest_save_into_a_folder_of_its_own(tmp_path: Path) -> None:
    world = _world(tmp_path, Save([1e-3], proven=False, origin=1, fresh=True), Save([1e-3], proven=False, origin=1))
    for tag in ("global_step2", "global_step3"):
        (tmp_path / "run0" / tag).mkdir(parents=True)
    (tmp_path / "run0" / "latest").write_text("global_step3")
    histories.play({"op": "move", "run": 0}, world, lambda **_: [], lambda **_: [], lambda *_, **__: True)
    assert sorted(world.folders[0]) == ["global_step3"] and sorted(world.folders[1]) == ["global_step2"]
    assert (tmp_path / "run1" / "global_step2").is_dir() and (tmp_path / "run1" / "latest").read_text() == \
        "global_step2"
    # a folder of one save keeps it
    histories.play({"op": "move", "run": 0}, world, lambda **_: [], lambda **_: [], lambda *_, **__: True)
    assert len(world.folders) == 2


def test_a_trainer_run_saves_each_step_count_into_a_checkpoint_folder_of_its_own(tmp_path: Path) -> None:
    # the HF Trainer's layout: checkpoint-N/global_stepN, latest inside checkpoint-N, none in the run's folder
    world = World(tmp_path)
    trained: list[dict[str, Any]] = []

    def train(**run: Any) -> list[list[float]]:
        trained.append(run)
        round_ = Path(run["save_dir"])
        (round_ / f"global_step{round_.name.split('-')[1]}").mkdir(parents=True)
        (round_ / "latest").write_text(f"global_step{round_.name.split('-')[1]}")
        return [[0.0]]

    start = {"op": "start", "mode": "reset", "scheduler": "WarmupLR", "zero": 1, "model": "a", "tags": "trainer",
             "config": "dict"}
    histories.play(start, world, train, lambda **_: [], lambda *_, **__: True)
    histories.play({"op": "resume", "run": 0, "mode": "reset", "load": "whole", "into": "same"}, world, train,
                   lambda **_: [], lambda *_, **__: True)
    assert [(run["save_dir"], run["resume_from"], run["tag"]) for run in trained] == [
        (tmp_path / "run0" / "checkpoint-2", None, None),
        (tmp_path / "run0" / "checkpoint-3", tmp_path / "run0" / "checkpoint-2", None)]
    assert sorted(world.folders[0]) == ["checkpoint-2/global_step2", "checkpoint-3/global_step3"]
    assert histories.newest(world, 0) == "checkpoint-3/global_step3"
    # the audit names the engine global_step*: a Trainer run's saves are its saves
    report = {str(tmp_path / "run0"): [{"verdict": "unknown", "why": "", "engine": "global_step*"}]}
    assert "a bound record proves" in histories.broken(world, report)[0]
    # rotated a checkpoint-N at a time: the whole folder moves, no latest written beside it
    histories.play({"op": "move", "run": 0}, world, train, lambda **_: [], lambda *_, **__: True)
    assert sorted(world.folders[1]) == ["checkpoint-2/global_step2"]
    assert (tmp_path / "run1" / "checkpoint-2" / "latest").exists() and not (tmp_path / "run1" / "latest").exists()
    assert not (tmp_path / "run0" / "checkpoint-2").exists()


def test_only_a_long_search_draws_the_trainers_layout(monkeypatch: Any) -> None:
    drawn = [step for seed in range(20) for step in histories.history(random.Random(seed), 8)]
    assert all(step.get("tags") != "trainer" for step in drawn)
    monkeypatch.setattr(histories, "TRAINER", True)
    again = [step for seed in range(20) for step in histories.history(random.Random(seed), 8)]
    assert any(step.get("tags") == "trainer" for step in again)
    # the same draws, only the layout differs: CI's histories stay as they were
    assert [{**step, "tags": None} for step in drawn] == [{**step, "tags": None} for step in again]


def test_a_trainer_job_is_resumed_by_the_trainer_only_where_the_trainer_wrote_it(tmp_path: Path) -> None:
    # the Trainer's resume_from_checkpoint counts steps from its trainer_state.json: a save it wrote itself, whole
    world = World(tmp_path)
    launched: list[dict[str, Any]] = []

    def job(**run: Any) -> list[list[float]]:
        launched.append(run)
        number = Path(run["save_dir"]).name.split("-")[1]
        (Path(run["save_dir"]) / f"global_step{number}").mkdir(parents=True)
        (Path(run["save_dir"]) / "latest").write_text(f"global_step{number}")
        return [[0.0]] * len(run["modes"])

    histories.play({"op": "job", "modes": ["reset", "reset"], "scheduler": "WarmupLR", "zero": 2,
                    "driver": "trainer"}, world, lambda **_: [], job, lambda *_, **__: True)
    assert launched[0]["save_dir"] == tmp_path / "run0" / "checkpoint-2" and launched[0]["driver"] == "trainer"
    started = world.folders[0]["checkpoint-2/global_step2"]
    assert started.trainer and started.proven
    resume = {"op": "jobresume", "run": 0, "modes": ["reset", "warn", "off"], "ranks": 2, "load": "no-optimizer",
              "into": "same", "driver": "trainer"}
    histories.play(resume, world, lambda **_: [], job, lambda *_, **__: True)
    assert (launched[1]["driver"], launched[1]["resume"]) == ("trainer", {"from": str(tmp_path / "run0" /
                                                                                      "checkpoint-2"), "load": "whole"})
    assert launched[1]["save_dir"] == tmp_path / "run0" / "checkpoint-3"
    assert world.folders[0]["checkpoint-3/global_step3"].trainer
    # the Trainer's layout written by the engine alone (no trainer_state.json): the engine resumes it, as drawn
    world.folders[0]["checkpoint-3/global_step3"].trainer = False
    histories.play({**resume, "load": "module-only"}, world, lambda **_: [], job, lambda *_, **__: True)
    assert (launched[2]["driver"], launched[2]["resume"]["load"]) == ("engine", "module-only")
    assert not world.folders[0]["checkpoint-1/global_step1"].trainer


def test_the_trainers_own_scheduler_is_not_affected_patched_or_not(tmp_path: Path) -> None:
    own = histories.TRAINERS_OWN
    world = _world(tmp_path, Save([0.0], proven=False, origin=1, fresh=True, scheduler=own, trainer=True),
                   Save([0.0], proven=False, origin=1, scheduler=own, trainer=True))
    assert "the bug cannot reach" in histories.broken(world, _report(tmp_path, "unknown"))[0]
    assert histories.broken(world, _report(tmp_path, "not affected")) == []
    # a save of it resumed by the engine alone (no scheduler: its files cannot show it) is not held to it
    world.folders[0]["global_step3"].trainer = False
    assert histories.broken(world, _report(tmp_path, "unknown")) == []
    assert "scheduler" not in histories.config_of(own, 0)  # the Trainer builds its own


def test_a_trainers_resume_loads_a_folder_the_trainer_wrote(tmp_path: Path) -> None:
    # the drawn folder is a hint: where its newest save is not the Trainer's, the last folder whose newest save is
    world = World(tmp_path, [{"global_step2": Save([0.0], proven=True)},
                             {"checkpoint-2/global_step2": Save([0.0], proven=True, tags="trainer", trainer=True)},
                             {"checkpoint-2/global_step2": Save([0.0], proven=True, tags="trainer")}])
    (tmp_path / "run0").mkdir()
    (tmp_path / "run0" / "latest").write_text("global_step2")
    for index in (1, 2):
        (tmp_path / f"run{index}" / "checkpoint-2").mkdir(parents=True)
        (tmp_path / f"run{index}" / "checkpoint-2" / "latest").write_text("global_step2")
    assert [histories._trainer_written(world, index) for index in range(3)] == [1, 1, 1]
    world.folders[1]["checkpoint-2/global_step2"].trainer = False  # none the Trainer wrote: the drawn one
    assert [histories._trainer_written(world, index) for index in range(3)] == [0, 1, 2]


def test_a_long_search_draws_trainer_jobs_and_resumes_them_with_the_trainer() -> None:
    # the module reads AWP_HISTORY_TRAINER when imported: a fresh interpreter draws as a long search does
    script = ("import json, random, histories\n"
              "print(json.dumps([histories.history(random.Random(seed), 8, ('installed', 'other')) "
              "for seed in range(40)]))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60,
                          cwd=Path(__file__).parents[1], env={**os.environ, "AWP_HISTORY_TRAINER": "1"})
    drawn = json.loads(proc.stdout)
    jobs = [step for steps in drawn for step in steps if step["op"] == "job" and step["driver"] == "trainer"]
    assert jobs and any(step["scheduler"] == histories.TRAINERS_OWN for step in jobs)
    resumed = 0
    for steps in drawn:
        for index, step in enumerate(steps):
            if step["op"] == "jobresume" and step["driver"] == "trainer":  # only after a Trainer job, of its folder
                assert any(earlier["op"] == "job" and earlier["driver"] == "trainer" for earlier in steps[:index])
                resumed += 1
    assert resumed
    # every job and job's resume of a long search accumulates over 1 or 2 micro-batches; CI's draw none
    accumulated = [step.get("accumulate") for steps in drawn for step in steps if step["op"] in ("job", "jobresume")]
    assert set(accumulated) == {1, 2}, accumulated
    assert not [step for seed in range(40) for step in histories.history(random.Random(seed), 8, ("installed", "other"))
                if "accumulate" in step]
    # a Trainer's job and resume is given its config each of the three ways, a fresh job saves once or each step;
    # no other step draws either
    trainers = [step for steps in drawn for step in steps if step.get("driver") == "trainer"]
    assert {step["given"] for step in trainers} == set(histories.GIVEN)
    assert {step["saves"] for step in trainers if step["op"] == "job"} == {1, 2}
    assert all("given" not in step and "saves" not in step for steps in drawn for step in steps
               if step.get("driver") != "trainer")


def test_a_trainer_job_saving_each_step_leaves_both_checkpoints(tmp_path: Path) -> None:
    world = World(tmp_path)
    launched: list[dict[str, Any]] = []

    def job(**run: Any) -> list[list[float]]:
        launched.append(run)
        return [[0.0]] * len(run["modes"])

    step = {"op": "job", "modes": ["reset", "warn"], "scheduler": "WarmupLR", "zero": 2, "driver": "trainer",
            "given": "auto-path", "saves": 2}
    histories.play(step, world, lambda **_: [], job, lambda *_, **__: True)
    assert (launched[0]["given"], launched[0]["saves"]) == ("auto-path", 2)
    assert sorted(world.folders[0]) == ["checkpoint-1/global_step1", "checkpoint-2/global_step2"]
    first, second = world.folders[0].values()
    assert first is not second and first.step0 == second.step0 == [0.0] and first.trainer and first.fresh
    # a job drawn before these draws (tests/histories_found.json's) is given its config as a dict and saves once
    histories.play({key: value for key, value in step.items() if key not in ("given", "saves")}, world,
                   lambda **_: [], job, lambda *_, **__: True)
    assert "given" not in launched[1] and sorted(world.folders[1]) == ["checkpoint-2/global_step2"]


def test_a_long_search_may_run_three_releases(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setenv(histories.OTHER_DEEPSPEED, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    assert histories.releases_here() == ("installed", "other", "other2")
    env: dict[str, str] = {}
    histories.in_release("other2", env)
    assert (env["PYTHONPATH"], env["TORCH_EXTENSIONS_DIR"]) == (str(tmp_path / "b"),
                                                                str(tmp_path / "b-torch_extensions"))
    first: dict[str, str] = {}
    histories.in_release("other", first)
    assert first["PYTHONPATH"] == str(tmp_path / "a")
    monkeypatch.setenv(histories.OTHER_DEEPSPEED, str(tmp_path / "a"))
    assert histories.releases_here() == ("installed", "other")
