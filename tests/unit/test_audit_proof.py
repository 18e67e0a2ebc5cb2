"""A "not affected" that is proof (#41): record 2 bound to the save it sits beside, the run's step 0 handed along
its chain, one verdict from all the facts. Synthetic checkpoints written with the standard library alone
(tests/unit/audit_files.py): DeepSpeed 0.15.2 runs WarmupLR's step 0 at the optimizer's lr 0.001, 0.19.8 at
warmup_min_lr 0.0.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import audit, one

from accelerate_warmup_patch import binding, loaded_record, own_writes, record_data, record_writer, torch_file
from accelerate_warmup_patch.cli.audit import find
from accelerate_warmup_patch.state import STATE

COSINE = {"type": "WarmupCosineLR", "params": {"warmup_min_ratio": 0.0, "warmup_num_steps": 3,
                                               "total_num_steps": 8, "warmup_type": "linear"}}


def observed(lrs: list[Any], expected: list[Any] | None, *, deepspeed: str = "0.15.2",
             patch_did: str = "fixed") -> dict[str, Any]:
    """A step0 that a patched process saw its optimizer run (the run started there)."""
    return {"how": "observed", "deepspeed": deepspeed, "scheduler": "WarmupLR", "mode": "reset", "patch": "0.6.0",
            "lrs": lrs, "expected": expected, "patch_did": patch_did, "global_steps": 0}


def record2(tag: Path, step0: dict[str, Any], *, deepspeed: str = "0.15.2", global_steps: int = 6,
            mode: str = "reset", scheduler: str = "WarmupLR", bound: bool = True, **extra: Any) -> dict[str, Any]:
    """Record 2 as record_writer.py writes it, bound to the model states in ``tag`` as they are now."""
    return {"record": 2, "package": "accelerate-warmup-patch", "version": "0.6.0", "mode": mode,
            "deepspeed": deepspeed, "reference": "0.19.8", "global_steps": global_steps,
            "bound_to": binding.bind(str(tag)) if bound else binding.unbound("a checkpoint engine that "
                                                                                    "writes later"),
            "scheduler": {"class": scheduler, "step0": "fixed", "lrs_before": [0.001], "lrs_after": [0.0],
                          "why": "one plain sentence"},
            "first_step": None, "step0": step0, "loads": [], **extra}


def write_record(tag: Path, record: dict[str, Any]) -> None:
    (tag / record_data.RECORD_FILE).write_text(json.dumps(record, allow_nan=False))


def patched_run(save_dir: Path, step0: dict[str, Any], *, tag: str = "global_step6", global_steps: int = 6,
                version: str = "0.15.2", scheduler: dict[str, Any] | None = None, lr: float = 1e-3,
                **record: Any) -> Path:
    """A save of a patched process: the model states, then its record 2 bound to them."""
    files.write_run(save_dir, tag=tag, global_steps=global_steps, version=version, scheduler=scheduler, lr=lr)
    folder = save_dir / tag
    write_record(folder, record2(folder, step0, deepspeed=version, global_steps=global_steps,
                                 scheduler=(scheduler or {"type": "WarmupLR"})["type"], **record))
    return folder


# The binding ------------------------------------------------------------------------------------------------

def test_the_binding_is_the_zip_members_crcs_and_sizes_and_holds_across_a_copy(tmp_path: Path) -> None:
    files.write_run(tmp_path / "run")
    tag = tmp_path / "run" / "global_step6"
    bound = binding.bind(str(tag))
    assert bound["file"] == "mp_rank_00_model_states.pt" and bound["size"] == (tag / bound["file"]).stat().st_size
    assert bound["digest"].startswith("sha256:") and bound["members"] >= 2
    shutil.copytree(tmp_path / "run", tmp_path / "copy")  # new inodes and mtimes, the same bytes
    assert binding.same_binding(bound, binding.bind(str(tmp_path / "copy" / "global_step6")))
    files.write_run(tmp_path / "rerun", lr=2e-3)  # other model states under the same names
    other = binding.bind(str(tmp_path / "rerun" / "global_step6"))
    assert not binding.same_binding(bound, other)
    assert "digest" in binding.binding_problem(bound, other) or "bytes" in binding.binding_problem(bound, other)


def test_the_writer_binds_no_file_whose_zip_directory_the_audit_refuses(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # one bound on a zip's central directory (torch_file.DIRECTORY_BYTES) for the writer and the audit: at the
    # bound both read the file; one byte under it the writer leaves the record unbound and the audit names the bound
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    model_states = tmp_path / "run" / "global_step6" / "mp_rank_00_model_states.pt"
    with model_states.open("rb") as file:
        directory = torch_file._directory(file)[0]
    monkeypatch.setattr(torch_file, "DIRECTORY_BYTES", len(directory))
    assert binding.bind(str(model_states.parent))["file"] == model_states.name
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected", report
    monkeypatch.setattr(torch_file, "DIRECTORY_BYTES", len(directory) - 1)
    assert binding.bind(str(model_states.parent))["file"] is None
    assert f"past {len(directory) - 1}" in binding.bind(str(model_states.parent))["unbound"]
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unreadable" and f"past {len(directory) - 1}" in report["why"], report


def _zero3_save(save_dir: Path, lr: float) -> Path:
    """A ZeRO-3-like save: the model-states file holds no weights (the same bytes for every run of one model), the
    optimizer's states file holds the trained partitions (``lr`` stands for what training made of them)."""
    files.write_run(save_dir, tag="global_step6")  # the same model states whatever the run trained
    tag = save_dir / "global_step6"
    (tag / "mp_rank_00_model_states.pt").rename(tag / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                          {"optimizer_state_dict": {"lr": lr, "fp32": files.Tensor((16,))}})
    files.write_torch_zip(tag / "layer_01-model_states.pt", {"weight": files.Tensor((4, 4)), "lr": lr})
    return tag


@pytest.mark.parametrize("differs", ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "layer_01-model_states.pt"])
def test_a_rerun_whose_model_states_file_is_byte_identical_is_still_not_that_saves_record(
        tmp_path: Path, differs: str) -> None:
    # under ZeRO 3 (and the pipeline's mp_rank_00) the file the audit reads is the same bytes for every run: the
    # binding covers the optimizer's and the layers' files beside it, whose CRC-32s change with the training
    tag = _zero3_save(tmp_path / "run", 1e-3)
    write_record(tag, record2(tag, observed([0.0], [0.0])))
    bound = json.loads((tag / record_data.RECORD_FILE).read_text())["bound_to"]
    assert bound["others"]["files"] == 2, bound
    shutil.copytree(tmp_path / "run", tmp_path / "copy")  # a copy holds
    _, report = one(tmp_path / "copy")
    assert report["verdict"] == "not affected" and report["record"]["bound"] is True, report
    (tag / "notes.txt").write_text("a file of the user's own")  # not DeepSpeed's: not bound
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected", report
    other = _zero3_save(tmp_path / "other", 2e-3)  # the unpatched rerun: other partitions
    shutil.copy(other / differs, tag / differs)
    assert binding.same_binding(bound, binding.bind(str(tag))) is False
    _, report = one(tmp_path / "run")
    assert report["record"] is None and report["verdict"] == "affected", report
    assert any("the other states files" in note for note in report["notes"]), report["notes"]


def raced(tag: Path, watch: own_writes.Watch | None) -> str | None:
    """Why a record in ``tag`` is not bound to this job's bytes, as the record's writer asks after its read-back."""
    return own_writes.rewritten_since(str(tag), watch, binding.read_back(str(tag))[1])


def _written_by(watch: own_writes.Watch, path: Path, source: str | Path) -> None:
    """``path`` saved in a watched save of this thread, as the checkpoint engine's wrapped save does."""
    with own_writes.saving(watch):
        own_writes.own_write_wrapper(lambda state, where: shutil.copy(source, where), None, ({}, str(path)), {})


def test_a_record_is_bound_only_to_files_that_still_hold_the_bytes_its_writer_wrote(tmp_path: Path) -> None:
    # two jobs saving one tag (#47 item 1): the writer notes each file as its own torch.save left it
    files.write_run(tmp_path / "run")
    tag = tmp_path / "run" / "global_step6"
    states = tag / "mp_rank_00_model_states.pt"
    writes = own_writes.Watch(writer=True)
    _written_by(writes, states, shutil.copy(states, tmp_path / "saved.pt"))
    assert writes.writes == {os.path.abspath(states): binding.file_stamp(str(states))}
    assert raced(tag, writes) is None
    # nothing of its own, nothing told: nothing to bind
    assert "written by no process of this job" in str(raced(tag, own_writes.Watch(True)))
    assert raced(tag, None) is not None
    bound = binding.bind(str(tag))
    files.write_run(tmp_path / "other", lr=2e-3)  # the other job's bytes land after this job's own write
    shutil.copy(tmp_path / "other" / "global_step6" / "mp_rank_00_model_states.pt", states)
    assert "another job" in str(raced(tag, writes))
    # bound before the folder changed, while the record was written: written again, unbound
    now = own_writes.Watch(True, writes={os.path.abspath(states): binding.file_stamp(str(states))})
    record_writer.write_checked(str(tag), record2(tag, observed([0.0], [0.0])) | {"bound_to": bound}, now)
    written = json.loads((tag / record_data.RECORD_FILE).read_text())
    assert written["bound_to"]["file"] is None and "changed while" in written["bound_to"]["unbound"], written
    assert one(tmp_path / "run")[1]["verdict"] == "unknown"
    assert binding.rewritten({"a": (1, "sha256:x")}, {"a": (1, "sha256:x")}) == []
    assert binding.rewritten({"a": (1, "sha256:x"), "b": (2, "?")}, {"a": (1, "sha256:y"), "b": (2, "?")}) == \
        ["a", "b"]


class JobStore:
    """Stands in for the store torch.distributed gives a job's ranks (the unit tier has no torch): the four calls
    own_writes makes, with TCPStore's answers. The real store and real ranks: tests/test_proof.py."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(key in self.values for key in keys)

    def get(self, key: str) -> bytes:
        return self.values[key]  # TCPStore's waits for a missing key: own_writes never asks for one

    def delete_key(self, key: str) -> bool:
        return self.values.pop(key, None) is not None


def test_the_other_ranks_tell_the_writer_what_they_wrote_and_a_file_no_rank_wrote_is_not_bound(
        tmp_path: Path) -> None:
    # a job of two ranks (#47 item 1): rank 1's optimizer partition is bound only as rank 1 wrote it
    tag = _zero3_save(tmp_path / "run", 1e-3)
    partition = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    files.write_torch_zip(tmp_path / "rank1.pt", {"optimizer_state_dict": {"lr": 1e-3, "fp32": files.Tensor((16,))}})
    store = JobStore()
    writer, rank1 = own_writes.Watch(True, store), own_writes.Watch(False, store)
    for name in ("zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                 "layer_01-model_states.pt"):
        _written_by(writer, tag / name, shutil.copy(tag / name, tmp_path / name))
    _written_by(rank1, partition, tmp_path / "rank1.pt")
    assert list(store.values) == [own_writes.KEY + os.path.abspath(partition)]  # told; the writer's own are kept
    assert raced(tag, writer) is None
    assert store.values == {} and raced(tag, writer) is None  # asked once, then removed
    # another job's rank 1 writes its partition after this job's rank 1 did
    files.write_torch_zip(partition, {"optimizer_state_dict": {"lr": 2e-3, "fp32": files.Tensor((16,))}})
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt: not the bytes this job wrote" in str(
        raced(tag, own_writes.Watch(True, store, writes=writer.writes, told=dict(writer.told))))
    # a rank that told nothing (not armed, records off) or a store that cannot be asked: not bound
    for untold in (own_writes.Watch(True, store, writes=writer.writes), own_writes.Watch(True, writes=writer.writes)):
        assert str(raced(tag, untold)).startswith(
            "zero_pp_rank_1_mp_rank_00_optim_states.pt: written by no process of this job"), untold
    # where each node saves into a folder of its own, one node's rank does not answer for another node's path
    _written_by(own_writes.Watch(False, store, node="node-b:"), partition, tmp_path / "rank1.pt")
    node_a = own_writes.Watch(True, store, node="node-a:", writes=writer.writes)
    assert "written by no process" in str(raced(tag, node_a))


def test_a_record_of_0_6_0_bound_to_the_model_states_alone_is_still_read(tmp_path: Path) -> None:
    tag = _zero3_save(tmp_path / "run", 1e-3)
    record = record2(tag, observed([0.0], [0.0]))
    del record["bound_to"]["others"]
    write_record(tag, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and report["record"]["bound"] is True, report


def test_model_states_in_torchs_legacy_format_cannot_be_bound(tmp_path: Path) -> None:
    (tmp_path / "tag").mkdir()
    files.write_torch_legacy(tmp_path / "tag" / "mp_rank_00_model_states.pt", files.model_states())
    bound = binding.bind(str(tmp_path / "tag"))
    assert bound["file"] is None and "legacy format" in bound["unbound"]


@pytest.mark.parametrize("names", [
    ["zero_pp_rank_10_mp_rank_00_model_states.pt", "zero_pp_rank_2_mp_rank_00_model_states.pt",
     "zero_pp_rank_0_mp_rank_00_model_states.pt"],
    ["mp_rank_01_model_states.pt", "mp_rank_00_model_states.pt", "layer_01-model_states.pt"],
    ["zero_pp_rank_1_mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_01_model_states.pt"],
])
def test_the_writer_binds_the_model_states_file_the_audit_reads(tmp_path: Path, names: list[str]) -> None:
    for name in names:
        (tmp_path / name).write_bytes(b"")
    read = find.model_states(tmp_path)
    assert read is not None and binding.lowest_model_states(str(tmp_path)) == read.name


# Numbers ----------------------------------------------------------------------------------------------------

def test_non_finite_lrs_are_written_as_strings_and_read_back() -> None:
    encoded = [record_data.encode_lr(v) for v in (math.nan, math.inf, -math.inf, 0.5)]
    assert encoded == ["nan", "inf", "-inf", 0.5] and json.dumps(encoded, allow_nan=False)
    decoded = record_data.decode_lrs(encoded)
    assert decoded is not None and math.isnan(decoded[0]) and decoded[1:] == [math.inf, -math.inf, 0.5]
    assert record_data.decode_lrs(["zero"]) is None and record_data.decode_lrs([True]) is None
    assert record_data.same_lrs([math.nan], [math.nan]) and not record_data.same_lrs([math.nan], [0.0])


# Verdicts from a bound record --------------------------------------------------------------------------------

def test_a_bound_record_whose_step0_ran_at_the_warmup_start_is_not_affected(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and code == 0, report
    assert report["step0_lrs"] == [0.0] and report["newest_step0_lrs"] == [0.0]
    assert "observed by accelerate-warmup-patch 0.6.0 (reset)" in report["why"] and "fixed it" in report["why"]
    assert report["record"]["bound"] is True


def test_a_copy_of_a_patched_run_is_still_not_affected(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    _, report = one(tmp_path / "copy")
    assert report["verdict"] == "not affected", report


def test_a_step0_that_ran_at_a_restored_lr_is_affected_whatever_the_patch_set(tmp_path: Path) -> None:
    # a patched job resumed from a save made at step 0 by an unpatched one: the restore put the lr back
    patched_run(tmp_path / "run", observed([0.001], [0.0]))
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert report["step0_lr"] == 0.001 and report["newest_step0_lr"] == 0.0
    assert "step 0 ran at 0.001 (observed by" in report["why"] and "0.19.8 runs it at 0" in report["why"]


def test_an_unpatched_rerun_over_a_patched_runs_folder_is_not_that_records_save(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]))
    kept = (tmp_path / "run" / "global_step6" / record_data.RECORD_FILE).read_text()
    files.write_run(tmp_path / "run", lr=2e-3)  # the rerun: same tag, same step count, other model states
    (tmp_path / "run" / "global_step6" / record_data.RECORD_FILE).write_text(kept)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1, report
    assert report["step0_lr"] == 0.002
    assert any("ignored, not that save's record" in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize(("change", "said"), [
    ({"deepspeed": "0.19.8"}, "names DeepSpeed 0.19.8, the checkpoint 0.15.2"),
    ({"scheduler": {"class": "WarmupCosineLR", "step0": "fixed", "lrs_before": None, "lrs_after": None}},
     "names scheduler WarmupCosineLR, the checkpoint's config WarmupLR"),
    ({"global_steps": 3}, "names global step 3 and the checkpoint 6"),
])
def test_a_record_that_disagrees_with_the_save_beside_it_is_ignored(tmp_path: Path, change: dict[str, Any],
                                                                    said: str) -> None:
    # a record copied beside another run's files: its binding may even match (the same bytes), its facts do not
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    record = {**json.loads((folder / record_data.RECORD_FILE).read_text()), **change}
    write_record(folder, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None, report
    assert any(said in note for note in report["notes"]), report["notes"]


@pytest.mark.parametrize("breakage", [
    {"bound_to": None}, {"bound_to": {"file": "mp_rank_00_model_states.pt", "size": "12"}},
    {"step0": {"how": "guessed"}}, {"step0": {"how": "observed", "deepspeed": "0.15.2", "lrs": ["zero"],
                                              "global_steps": 0}},
    {"step0": {"how": "observed", "deepspeed": "0.15.2", "lrs": [0.0], "global_steps": None}},
    {"step0": observed([], [])}, {"step0": observed([0.0], [0.0, 0.0])},
    {"global_steps": None}, {"global_steps": "6"}, {"loads": {"tag": "x"}}, {"record": True},
    {"first_step": {"observed": "yes"}},
])
def test_a_record_2_with_a_field_of_the_wrong_type_is_absent_with_a_note(tmp_path: Path,
                                                                          breakage: dict[str, Any]) -> None:
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    write_record(folder, {**json.loads((folder / record_data.RECORD_FILE).read_text()), **breakage})
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and report["record"] is None and code == 1, report
    assert any("ignored, not a record this audit reads" in note for note in report["notes"]), report["notes"]


def test_an_unbound_record_never_clears_a_run(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]), bound=False)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "bound to no file" in report["why"] and report["step0_lr"] is None
    assert any("unbound (a checkpoint engine that writes later)" in note for note in report["notes"])


def test_an_unbound_record_that_names_a_harm_counts(tmp_path: Path) -> None:
    folder = patched_run(tmp_path / "run", observed([0.001], [0.0]), bound=False, mode="warn")
    record = json.loads((folder / record_data.RECORD_FILE).read_text())
    record["scheduler"] |= {"step0": "warned"}
    write_record(folder, record)
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and "warned, not fixed" in report["why"], report


# The chain ---------------------------------------------------------------------------------------------------

def unrecorded(deepspeed: str | None, global_steps: int = 3) -> dict[str, Any]:
    return {"how": "unrecorded", "deepspeed": deepspeed, "global_steps": global_steps, "scheduler": "WarmupLR",
            "tag": "global_step3", "why": "the save it resumed from (global_step3) holds no record: step 0 ran "
                                         "unpatched, or patched by 0.4.0 or older"}


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


def test_a_chain_that_ends_in_an_unknown_release_is_unknown(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", unrecorded(None), version="0.19.8")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0 and "release that ran step 0 is not known" in report["why"]


@pytest.mark.parametrize("how", ["record-1", "unbound", "unobserved"])
def test_a_chain_that_ends_in_a_claim_clears_only_where_the_release_needs_no_fix(tmp_path: Path, how: str) -> None:
    for release, verdict in (("0.15.2", "unknown"), ("0.19.8", "not affected")):
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
    ("0.16.5+91d1c55", 20, "affected", "affected"), ("0.19.8", 20, "not affected", None),
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


# The runtime's side of the chain (loaded_record.loaded), with a stand-in engine: no torch here ---------------------

class _Engine:
    """What loaded_record.loaded asks of an engine after a load: its step count and an optimizer (none here)."""

    optimizer = None

    def __init__(self, global_steps: int) -> None:
        self.global_steps = global_steps


def test_a_load_carries_the_bound_records_step0_and_keeps_the_chain_short(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]),
                         loads=[{"tag": f"t{i}", "deepspeed": "0.15.2", "global_steps": i, "record": 2, "bound": True}
                                for i in range(20)])
    engine = _Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == "observed" and history.step0["lrs"] == [0.0]
    assert len(history.loads) == record_data.MAX_LOADS and history.loads[0]["tag"] == "global_step6"
    assert history.loads[0]["bound"] is True


@pytest.mark.parametrize(("what", "how"), [("none", "unrecorded"), ("copied", "unrecorded"),
                                           ("record 1", "record-1"), ("record 1 of another save", "unrecorded"),
                                           ("record 1 the audit refuses", "unrecorded"), ("NaN literal", "unrecorded")])
def test_a_load_of_a_save_without_its_own_record_says_step_0_ran_unrecorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str, how: str) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    files.write_run(tmp_path / "run")
    folder = tmp_path / "run" / "global_step6"
    if what == "copied":  # a record bound to other model states
        patched_run(tmp_path / "other", observed([0.0], [0.0]), lr=5e-3)
        shutil.copy(tmp_path / "other" / "global_step6" / record_data.RECORD_FILE, folder)
    elif what.startswith("record 1"):  # the job recognises a record 1, and its save, by the audit's one rule
        record_1 = {"record": 1, "package": "accelerate-warmup-patch", "version": "0.5.0", "mode": "reset",
                    "deepspeed": "0.15.2", "reference": "0.19.8", "global_steps": 6,
                    "scheduler": {"class": "WarmupLR", "step0": "fixed"}}
        if what == "record 1 of another save":
            record_1["global_steps"] = 3
        elif what == "record 1 the audit refuses":
            del record_1["version"]
        write_record(folder, record_1)
    elif what == "NaN literal":  # not JSON: handed on, it would make the next record unwritable
        text = json.dumps(record2(folder, observed([0.0], [0.0]))).replace('"lrs": [0.0]', '"lrs": [NaN]')
        (folder / record_data.RECORD_FILE).write_text(text)
    engine = _Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == how, history
    assert history.step0["deepspeed"] == "0.15.2" and history.step0["global_steps"] == 6


def _history_after_loading(folder: Path, record: dict[str, Any] | str) -> loaded_record.LoadedHistory:
    """What a stand-in engine holds after loading ``folder``, whose record is ``record`` (a dict, or raw text)."""
    text = record if isinstance(record, str) else json.dumps(record)
    (folder / record_data.RECORD_FILE).write_text(text)
    engine = _Engine(6)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None
    return history


def test_a_loaded_record_whose_lr_parses_to_inf_cannot_make_the_jobs_later_records_unwritable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1e999 is a JSON number that parses to inf: handed on, json.dumps(allow_nan=False) of every later record fails
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    text = json.dumps(record2(folder, observed([0.0], [0.0]))).replace('"lrs": [0.0]', '"lrs": [1e999]')
    history = _history_after_loading(folder, text)
    assert history.step0["how"] == "unrecorded" and "not one this release reads" in history.step0["why"], history
    record_writer.write(str(folder), {"step0": history.step0, "loads": history.loads})  # the job's next record
    # a string "inf" is how a record writes it: handed on as written
    history = _history_after_loading(folder, record2(folder, observed(["inf"], [0.0])))
    assert history.step0["lrs"] == ["inf"]
    record_writer.write(str(folder), {"step0": history.step0, "loads": history.loads})


def test_a_loaded_record_carries_only_the_shape_the_job_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a value nested 900 deep (each check of 0.6.0 passed) made every later record ~6.5 MB; a long string, a huge
    # int and keys of its own are not handed on either
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    deep: Any = []
    for _ in range(900):
        deep = [deep]
    step0 = {**observed([0.0], [0.0]), "extra": deep, "why": "w" * 20_000, "mode": deep}
    hops = [{"tag": "t", "deepspeed": "0.15.2", "global_steps": 1, "record": 2, "bound": True}] * 20
    hops[1] = {"tag": deep, "deepspeed": "0.15.2", "global_steps": 10**25, "record": 2, "bound": True, "x": deep}
    history = _history_after_loading(folder, record2(folder, step0, loads=hops))
    assert history.step0["how"] == "observed" and history.step0["lrs"] == [0.0], history
    assert set(history.step0) <= set(record_data.STEP0_KEYS) and history.step0["mode"] is None
    assert len(history.step0["why"]) == 1000
    assert len(history.loads) == record_data.MAX_LOADS
    assert history.loads[2] == {"tag": None, "deepspeed": "0.15.2", "global_steps": None, "record": 2, "bound": True}
    written = json.dumps({"step0": history.step0, "loads": history.loads})
    assert len(written) < 4096, len(written)


# One record 2 and what is changed in it: whether the job hands it on and the audit reads it must agree (#48)
_CORPUS: dict[str, tuple[dict[str, Any], bool]] = {
    "as written": ({}, True),
    "no scheduler": ({"scheduler": None}, True),
    "first step observed": ({"first_step": {"observed": True, "lrs": [0.0], "global_steps": 0}}, True),
    "first step not observed": ({"first_step": {"observed": False, "why": "no hook"}}, True),
    "a load before": ({"loads": [{"tag": "t", "deepspeed": "0.15.2", "global_steps": 3, "record": 2,
                                  "bound": True}]}, True),
    "step 0 at nan": ({"step0": observed(["nan"], None)}, True),
    "no step yet": ({"step0": {"how": "no-step-yet", "deepspeed": "0.15.2"}}, True),
    "version not a string": ({"version": 6}, False),
    "no mode": ({"mode": None}, False),
    "reference not a string": ({"reference": ["0.19.8"]}, False),
    "global_steps negative": ({"global_steps": -1}, False),
    "scheduler.step0 unknown word": ({"scheduler": {"class": "WarmupLR", "step0": "healed"}}, False),
    "scheduler.class not a string": ({"scheduler": {"class": 3, "step0": "fixed"}}, False),
    "scheduler.lrs_before not lrs": ({"scheduler": {"class": "WarmupLR", "step0": "fixed", "lrs_before": "0"}}, False),
    "bound_to not an object": ({"bound_to": "mp_rank_00"}, False),
    "first_step observed without lrs": ({"first_step": {"observed": True, "global_steps": 0}}, False),
    "first_step.observed not a bool": ({"first_step": {"observed": "yes"}}, False),
    "step0.how unknown": ({"step0": {"how": "guessed"}}, False),
    "observed step0 without its release": ({"step0": {**observed([0.0], [0.0]), "deepspeed": None}}, False),
    "step0.lrs not lrs": ({"step0": observed(["0.0"], None)}, False),
    "loads not a list": ({"loads": {"tag": "t"}}, False),
    "package another's": ({"package": "someone-else"}, False),
    "record 3": ({"record": 3}, False),
}


@pytest.mark.parametrize("case", sorted(_CORPUS))
def test_a_record_the_job_carries_is_exactly_a_record_the_audit_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      case: str) -> None:
    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    change, valid = _CORPUS[case]
    folder = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    record = {**json.loads((folder / record_data.RECORD_FILE).read_text()), **change}
    history = _history_after_loading(folder, record)  # the job, at a load
    _, report = one(tmp_path / "run")  # the audit
    assert (report["record"] is not None) is valid, report
    assert (history.step0["how"] == record["step0"]["how"]) is valid, history
    if not valid:
        assert "not one this release reads" in history.step0["why"], history
        assert any("not a record this audit reads" in note for note in report["notes"]), report


def test_a_records_temporary_file_is_named_as_partial_and_a_stale_one_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".accelerate_warmup_patch.0a1b2c.partial"
    fresh = tmp_path / ".accelerate_warmup_patch.ff.partial"
    for left in (stale, fresh):
        left.write_text("{")  # what a process killed between the write and the rename leaves
    old = stale.stat().st_mtime - record_writer.STALE_PARTIAL_S - 60
    os.utime(stale, (old, old))
    record_writer.write(str(tmp_path), {"record": 2})
    assert not stale.exists() and fresh.exists()  # a younger one may be another job's write in progress
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name, record_data.RECORD_FILE]
    assert record_data.PARTIAL.match(fresh.name) and not fresh.name.endswith(".json")
    files.write_run(tmp_path / "run")
    (tmp_path / "run" / "global_step6" / fresh.name).write_text("{")
    _, report = one(tmp_path / "run")
    assert report["record"] is None and not any("partial" in note for note in report["notes"]), report


def test_a_fresh_unpatched_rerun_that_saved_fewer_tags_is_not_cleared_by_an_older_bound_record(tmp_path: Path) -> None:
    # a patched run saved global_step3 and global_step9; an unpatched rerun from scratch saved global_step3 over
    # it (its record is then not that save's) and crashed: latest names global_step3, global_step9 is still there
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step9", global_steps=9)
    kept = (tmp_path / "run" / "global_step9" / record_data.RECORD_FILE).read_text()
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step3", global_steps=3)
    record = (tmp_path / "run" / "global_step3" / record_data.RECORD_FILE).read_text()
    files.write_run(tmp_path / "run", tag="global_step3", global_steps=3, lr=2e-3)  # the rerun's save
    (tmp_path / "run" / "global_step3" / record_data.RECORD_FILE).write_text(record)
    assert (tmp_path / "run" / "global_step9" / record_data.RECORD_FILE).read_text() == kept
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and code == 0, report
    assert "the files cannot tell which" in report["why"], report


def test_a_patched_start_resumed_unpatched_on_a_fixed_release_keeps_its_proof(tmp_path: Path) -> None:
    patched_run(tmp_path / "run", observed([0.0], [0.0]), tag="global_step3", global_steps=3)
    (tmp_path / "run" / "latest").unlink()
    files.write_run(tmp_path / "run", tag="global_step6", version="0.19.8")  # resumed unpatched on 0.19.8
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and "observed by" in report["why"], report


def test_an_observed_step0_without_the_patchs_reference_is_held_against_the_tables(tmp_path: Path) -> None:
    patched_run(tmp_path / "left", observed([0.0], None, patch_did="left"))
    patched_run(tmp_path / "hurt", observed([0.001], None, patch_did="left"))
    code, reports = audit(tmp_path / "hurt", tmp_path / "left")
    assert [(r["verdict"], r["newest_step0_lr"]) for r in reports] == [("affected", 0.0), ("not affected", 0.0)]
    assert code == 1


def test_a_warned_run_whose_step0_was_right_but_whose_peak_was_not_is_affected(tmp_path: Path) -> None:
    # 0.16.0 starts WarmupLR at warmup_min_lr as 0.19.8 does, but without warmup_max_lr it peaks at 0.001, where
    # 0.19.8 peaks at the optimizer's lr (0.01 here): step 0 ran right, every later warmup step did not
    no_peak = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_num_steps": 5}}
    patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.16.0", patch_did="warned"), version="0.16.0",
                scheduler=no_peak, lr=0.01, mode="warn")
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "affected" and code == 1, report
    assert "warmup_max_lr" in report["why"] and report["step0_lr"] == 0.0, report


def test_a_reset_run_whose_peak_the_patch_fixed_is_not_affected(tmp_path: Path) -> None:
    # the same run in reset mode: the patch gave it 0.19.8's peak as well (its process ran the fixes)
    no_peak = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_num_steps": 5}}
    patched_run(tmp_path / "run", observed([0.0], [0.0], deepspeed="0.16.0"), version="0.16.0", scheduler=no_peak,
                lr=0.01)
    code, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected" and code == 0, report


# Every save in a folder counts (#47 item 2) -------------------------------------------------------------------

@pytest.mark.parametrize(("version", "verdict"), [("0.15.2", "unknown"), ("0.19.8", "not affected")])
def test_a_checkpoint_step_rerun_that_stops_earlier_keeps_the_folder_from_not_affected(
        tmp_path: Path, version: str, verdict: str) -> None:
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


@pytest.mark.parametrize(("version", "verdict"), [("0.15.2", "unknown"), ("0.19.8", "not affected")])
def test_a_patched_start_resumed_unpatched_under_custom_tags_is_never_affected(tmp_path: Path, version: str,
                                                                               verdict: str) -> None:
    # a patched run saved epoch1, epoch2; resumed unpatched, it saved epoch3, epoch4: their step 0 ran in the
    # patched process (epoch2's bound record), unless that process started afresh, which the files cannot tell
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
    files.write_run(tmp_path / "run", tag="pytorch_model", global_steps=6, version="0.19.8")
    files.write_run(tmp_path / "run", tag="critic", global_steps=3, client_state={"module": other})
    reports = {r["engine"]: r for r in audit(tmp_path / "run")[1]}
    assert reports["pytorch_model"]["verdict"] == "not affected", reports
    assert reports["critic"]["verdict"] == "affected", reports


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
    tag = _zero3_save(tmp_path / "run", 1e-3)
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
        tag = _zero3_save(tmp_path / "run", 1e-3)
        write_record(tag, record2(tag, observed([0.0], [0.0])))
    else:
        patched_run(tmp_path / "run", observed([0.0], [0.0]))
    universal = _universal(tmp_path / "run")
    engine = _Engine(6)
    states = next(universal.glob("*model_states.pt"))
    loaded_record.loaded(engine, str(states), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None and history.step0["how"] == how, history
    if zero3:
        assert "hold no weights" in history.step0["why"], history
    else:
        assert history.step0["lrs"] == [0.0]


@pytest.mark.parametrize(("patched", "version", "verdict"), [(True, "0.15.2", "unknown"), (False, "0.15.2", "unknown"),
                                                             (True, "0.19.8", "not affected")])
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


class _UniversalEngine(_Engine):
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
    for engine, how in ((_UniversalEngine(6), "unbound"), (_Engine(6), "unrecorded")):
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
