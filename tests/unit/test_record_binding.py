"""The record's binding to the save beside it (record_data's binding, own_writes' noted writes): what the writer
binds, what a copy keeps, and what a race, a rerun or another job's bytes undo.
Synthetic checkpoints written with the standard library alone (tests/unit/audit_files.py, records.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files
from audit_files import one
from records import observed, patched_run, record2, write_record, zero3_save

from accelerate_warmup_patch import binding, own_writes, record_data, record_writer, torch_file
from accelerate_warmup_patch.cli.audit import find

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



@pytest.mark.parametrize("differs", ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "layer_01-model_states.pt"])
def test_a_rerun_whose_model_states_file_is_byte_identical_is_still_not_that_saves_record(
        tmp_path: Path, differs: str) -> None:
    # under ZeRO 3 (and the pipeline's mp_rank_00) the file the audit reads is the same bytes for every run: the
    # binding covers the optimizer's and the layers' files beside it, whose CRC-32s change with the training
    tag = zero3_save(tmp_path / "run", 1e-3)
    write_record(tag, record2(tag, observed([0.0], [0.0])))
    bound = json.loads((tag / record_data.RECORD_FILE).read_text())["bound_to"]
    assert bound["others"]["files"] == 2, bound
    shutil.copytree(tmp_path / "run", tmp_path / "copy")  # a copy holds
    _, report = one(tmp_path / "copy")
    assert report["verdict"] == "not affected" and report["record"]["bound"] is True, report
    (tag / "notes.txt").write_text("a file of the user's own")  # not DeepSpeed's: not bound
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "not affected", report
    other = zero3_save(tmp_path / "other", 2e-3)  # the unpatched rerun: other partitions
    shutil.copy(other / differs, tag / differs)
    assert binding.same_binding(bound, binding.bind(str(tag))) is False
    _, report = one(tmp_path / "run")
    assert report["record"] is None and report["verdict"] == "affected", report
    assert any("the other states files" in note for note in report["notes"]), report["notes"]


def test_a_zero_0_save_over_an_earlier_zero_1_save_keeps_its_record_as_a_claim(tmp_path: Path) -> None:
    # found by the search of run histories (#55 item 6): a ZeRO 0 rerun into a tag of a ZeRO 1 run leaves that
    # run's optimizer-states file beside the new model states, which the rerun's record (others: 0 files) does not
    # bind. Ignoring the record judged the save as a process that left none: "affected", for a run that was fixed
    tag = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", {"fp32": files.Tensor((16,))})
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and report["record"]["bound"] is False, report
    assert "bound to these model states but not to the other states files" in report["why"], report
    assert any("and 1 more lie beside them" in note for note in report["notes"]), report["notes"]
    # a harm it names still counts; a record that bound other states files is still not that save's when they differ
    warned = record2(tag, observed([1e-3], [0.0]), mode="warn")
    warned["scheduler"]["step0"] = record_data.WARNED
    warned["bound_to"] = {**binding.bind(str(tag)), "others": binding.others_binding([])}
    write_record(tag, warned)
    assert one(tmp_path / "run")[1]["verdict"] == "affected"
    write_record(tag, record2(tag, observed([0.0], [0.0])))  # binds the optimizer's file as it is
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", {"fp32": files.Tensor((32,))})
    assert one(tmp_path / "run")[1]["record"] is None


def test_a_one_rank_save_over_a_two_rank_save_keeps_its_record_as_a_claim(tmp_path: Path) -> None:
    # a one-rank ZeRO 2 rerun into a tag of a two-rank job: its record binds its own rank-0 partition (the files it
    # wrote: binding.bound_from_own), and the earlier job's rank-1 partition stays beside it
    tag = patched_run(tmp_path / "run", observed([0.0], [0.0]))
    files.write_torch_zip(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", {"fp32": files.Tensor((16,))})
    write_record(tag, record2(tag, observed([0.0], [0.0])))
    files.write_torch_zip(tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt", {"fp32": files.Tensor((16,))})
    _, report = one(tmp_path / "run")
    assert report["verdict"] == "unknown" and report["record"]["bound"] is False, report
    # one that sorts before its own (a bf16 run's) is not told from its own changed: not that save's record
    stale = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    stale.rename(tag / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert one(tmp_path / "run")[1]["record"] is None


def raced(tag: Path, notes: own_writes.SaveNotes | None) -> str | None:
    """Why a record in ``tag`` is not bound to this job's bytes, as the record's writer asks after its read-back."""
    return own_writes.rewritten_since(str(tag), notes, binding.read_back(str(tag))[1])


def _written_by(notes: own_writes.SaveNotes, path: Path, source: str | Path) -> None:
    """``path`` saved in a watched save of this thread, as the checkpoint engine's wrapped save does."""
    with own_writes.saving(notes):
        own_writes.own_write_wrapper(lambda state, where: shutil.copy(source, where), None, ({}, str(path)), {})


def test_a_record_is_bound_only_to_files_that_still_hold_the_bytes_its_writer_wrote(tmp_path: Path) -> None:
    # two jobs saving one tag (#47 item 1): the writer notes each file as its own torch.save left it
    files.write_run(tmp_path / "run")
    tag = tmp_path / "run" / "global_step6"
    states = tag / "mp_rank_00_model_states.pt"
    writes = own_writes.SaveNotes(writer=True)
    _written_by(writes, states, shutil.copy(states, tmp_path / "saved.pt"))
    assert writes.writes == {os.path.abspath(states): binding.file_stamp(str(states))}
    assert raced(tag, writes) is None
    # nothing of its own, nothing told: nothing to bind
    assert "written by no process of this job" in str(raced(tag, own_writes.SaveNotes(True)))
    assert raced(tag, None) is not None
    bound = binding.bind(str(tag))
    files.write_run(tmp_path / "other", lr=2e-3)  # the other job's bytes land after this job's own write
    shutil.copy(tmp_path / "other" / "global_step6" / "mp_rank_00_model_states.pt", states)
    assert "another job" in str(raced(tag, writes))
    # bound before the folder changed, while the record was written: written again, unbound
    now = own_writes.SaveNotes(True, writes={os.path.abspath(states): binding.file_stamp(str(states))})
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
    tag = zero3_save(tmp_path / "run", 1e-3)
    partition = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    files.write_torch_zip(tmp_path / "rank1.pt", {"optimizer_state_dict": {"lr": 1e-3, "fp32": files.Tensor((16,))}})
    store = JobStore()
    writer, rank1 = own_writes.SaveNotes(True, store), own_writes.SaveNotes(False, store)
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
        raced(tag, own_writes.SaveNotes(True, store, writes=writer.writes, told=dict(writer.told))))
    # a rank that told nothing (not armed, records off) or a store that cannot be asked: not bound
    for untold in (own_writes.SaveNotes(True, store, writes=writer.writes),
                   own_writes.SaveNotes(True, writes=writer.writes)):
        assert str(raced(tag, untold)).startswith(
            "zero_pp_rank_1_mp_rank_00_optim_states.pt: written by no process of this job"), untold
    # where each node saves into a folder of its own, one node's rank does not answer for another node's path
    _written_by(own_writes.SaveNotes(False, store, node="node-b:"), partition, tmp_path / "rank1.pt")
    node_a = own_writes.SaveNotes(True, store, node="node-a:", writes=writer.writes)
    assert "written by no process" in str(raced(tag, node_a))


def test_a_record_of_0_6_0_bound_to_the_model_states_alone_is_still_read(tmp_path: Path) -> None:
    tag = zero3_save(tmp_path / "run", 1e-3)
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


