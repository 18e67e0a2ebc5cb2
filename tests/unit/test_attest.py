"""Every rank's word to the record's writer (attest.py, #55 item 1), every call to the job's store bounded
(bounded.py, #56 item 2), and a record written whole or not at all (whole_file.py, #56 item 3). Real ranks on real
engines: tests/test_ranks.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelerate_warmup_patch import (
    attest,
    binding,
    bounded,
    loaded_record,
    own_writes,
    record_data,
    record_writer,
    step_watch,
)
from accelerate_warmup_patch.state import STATE

CHILDREN = Path(__file__).resolve().parents[1] / "children"


class JobStore:
    """Stands in for torch.distributed's TCPStore (the unit tier has no torch): the calls attest and own_writes
    make, with its answers; ``stalled`` set makes every call wait until it is cleared, as a store that stops
    answering does."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.calls = 0
        self.answering = threading.Event()
        self.answering.set()

    def _answer(self) -> None:
        self.calls += 1
        self.answering.wait()

    def set(self, key: str, value: str) -> None:
        self._answer()
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        self._answer()
        return all(key in self.values for key in keys)

    def get(self, key: str) -> bytes:
        self._answer()
        return self.values[key]

    def multi_get(self, keys: list[str]) -> list[bytes]:
        self._answer()
        return [self.values[key] for key in keys]

    def delete_key(self, key: str) -> bool:
        self._answer()
        return self.values.pop(key, None) is not None


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(bounded, "OP_S", 0.05)
    monkeypatch.setattr(bounded, "SAVE_S", 0.5)
    monkeypatch.setattr(STATE, "late_call", None)
    yield


def word(save: str = "s1", ran: str = "as 0.19.8 runs it", mode: str = "reset", lrs: str = "") -> attest.Word:
    return attest.Word(save, mode, ran, lrs)


def unheard(store: JobStore, world_size: int, own: attest.Word | None = None) -> str | None:
    return attest.unheard(store, bounded.Budget(), world_size=world_size, own_rank=0, own=own or word())


def test_the_record_speaks_for_every_rank_only_where_each_told_the_writers_word(short_bounds: None) -> None:
    store = JobStore()
    assert unheard(store, 1) is None  # a job of one rank: nothing to ask
    for rank in (1, 2):
        attest.tell(store, bounded.Budget(), rank, word())
    assert unheard(store, 3) is None
    assert str(unheard(store, 4)).startswith("rank 3 of 4 told nothing for this save"), unheard(store, 4)
    assert str(unheard(store, 7)).startswith("ranks 3, 4, 5 and 1 more of 7 told nothing")
    # a word of an earlier save is no word on this one (a rank disarmed since)
    assert str(unheard(store, 3, word(save="s2"))).startswith("ranks 1, 2 of 3 told nothing")
    attest.tell(store, bounded.Budget(), 2, word(ran="not as 0.19.8 runs it", mode="warn", lrs="[0.001]"))
    assert unheard(store, 3) == ("rank 2 of 3 (mode warn) says its first optimizer step ran not as 0.19.8 runs it at "
                                 "[0.001]; this rank's ran as 0.19.8 runs it")
    assert str(attest.unheard(None, bounded.Budget(), world_size=2, own_rank=0, own=word())).startswith(
        "rank 1 of 2 told nothing")
    assert list(store.values) == [f"{attest.KEY}1", f"{attest.KEY}2"]  # one key a rank, whatever the saves


def test_the_writer_reads_every_ranks_word_in_two_calls_at_any_world_size(short_bounds: None) -> None:
    store = JobStore()
    for rank in range(1, 512):
        attest.tell(store, bounded.Budget(), rank, word())
    store.calls = 0
    assert unheard(store, 512) is None and store.calls == 2  # one check of every key, one multi_get


def test_a_stalled_store_never_holds_a_save_past_its_bound(short_bounds: None, tmp_path: Path) -> None:
    store = JobStore()
    attest.tell(store, bounded.Budget(), 1, word())
    store.answering.clear()  # the store stops answering
    try:
        why = str(unheard(store, 2))
        assert "did not answer the writer's ask for the ranks' words within" in why, why
        # the call that waits keeps its thread; no other call is started while it waits, in this save or the next
        budget = bounded.Budget()
        attest.tell(store, budget, 1, word())  # returns: the rank's word is then missing
        assert budget.given_up is not None and "has not returned yet" in budget.given_up
        this = own_writes.SaveNotes(True, store, writes={})
        assert "has not returned yet" in str(own_writes.rewritten_since(str(tmp_path), this, {"a.pt": (1, None)}))
    finally:
        store.answering.set()
    late = STATE.late_call
    assert late is not None
    late.join()  # the stalled call returns once the store answers again, and the next save asks as before
    assert unheard(store, 2) is None


def test_a_save_gives_up_on_the_store_once_its_time_is_spent(short_bounds: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    budget = bounded.Budget()
    monkeypatch.setattr(budget, "deadline", 0.0)
    with pytest.raises(bounded.Late, match=r"this save's 0\.5 s for the job's store were spent"):
        bounded.call(budget, "a call", lambda: None)
    with pytest.raises(ZeroDivisionError):  # the call's own error is its caller's
        bounded.call(bounded.Budget(), "a call", lambda: 1 // 0)


@pytest.mark.parametrize("no_tmpfile", [False, True], ids=["O_TMPFILE", "a temporary name"])
@pytest.mark.parametrize("function,when,nth", [("write", "before", 1), ("write", "after", 1), ("link", "before", 1),
                                               ("link", "after", 1), ("replace", "before", 1),
                                               ("close", "before", 1), ("close", "after", 1)])
def test_a_kill_at_any_moment_of_a_first_write_leaves_the_whole_record_or_nothing(
        tmp_path: Path, function: str, when: str, nth: int, no_tmpfile: bool) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    killed = subprocess.run([sys.executable, str(CHILDREN / "killed_write.py"), str(folder), function, when, str(nth),
                             *(["--no-tmpfile"] if no_tmpfile else [])], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    left = sorted(path.name for path in folder.iterdir())
    if no_tmpfile and killed.returncode != 0 and left and left != [record_data.RECORD_FILE]:
        # a file system without O_TMPFILE: the temporary name may stay, never taken for a record, and the next
        # write into the folder, or a load of it, removes it once it is older than a write can take
        assert all(record_data.PARTIAL.match(name) for name in left), left
        old = os.stat(folder).st_mtime - record_writer.STALE_PARTIAL_S - 60
        for name in left:
            os.utime(folder / name, (old, old))
        loaded_record.loaded(_Engine(), str(folder / "mp_rank_00_model_states.pt"), {})
        assert sorted(path.name for path in folder.iterdir()) == []
        return
    assert left in ([], [record_data.RECORD_FILE]), (left, killed.stderr[-2000:])
    if left:
        assert json.loads((folder / record_data.RECORD_FILE).read_text()) == {"record": 2, "whole": True}


def test_a_kill_leaves_nothing_behind_on_a_file_system_with_o_tmpfile(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for when in ("before", "after"):
        subprocess.run([sys.executable, str(CHILDREN / "killed_write.py"), str(folder), "link", when, "1"],
                       capture_output=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert sorted(path.name for path in folder.iterdir()) == ([] if when == "before" else
                                                                  [record_data.RECORD_FILE])


class _Engine:
    global_steps = 3


class _Optimizer:
    def __init__(self, groups: int) -> None:
        self.param_groups = [{"lr": 0.0} for _ in range(groups)]


class _EngineOf:
    """What loaded_record.loaded asks of an engine: its step count and its optimizer's groups."""

    def __init__(self, groups: int) -> None:
        self.global_steps, self.optimizer = 6, _Optimizer(groups)


@pytest.mark.parametrize("groups", [1, 1300])
def test_a_resumed_job_hands_on_only_a_story_of_its_own_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              groups: int) -> None:
    # #56 item 4: a loaded record of 1,300 groups' lrs made every later record of a one-group model 45 KB
    from records import observed, patched_run

    monkeypatch.setattr(STATE, "loaded", {})
    monkeypatch.setattr(STATE, "watches", {})
    monkeypatch.setattr(step_watch, "watch", lambda engine, again=False: None)  # its torch hook: not in this tier
    folder = patched_run(tmp_path / "run", observed([0.0] * 1300, [0.0] * 1300))
    engine = _EngineOf(groups)
    loaded_record.loaded(engine, str(folder / "mp_rank_00_model_states.pt"), {"ds_version": "0.15.2"})
    history = loaded_record.history(engine)
    assert history is not None
    if groups == 1300:
        assert history.step0["how"] == "observed" and len(history.step0["lrs"]) == 1300
        return
    assert history.step0["how"] == "unbound" and "of 1300 param groups, this job's optimizer has 1" in \
        history.step0["why"], history.step0
    assert len(record_data.fitted({"step0": history.step0, "loads": history.loads})) < 1000


def test_a_one_rank_save_is_bound_from_its_own_writes_as_a_read_of_the_folder_binds_it(tmp_path: Path) -> None:
    # #56 item 1: each zip directory read once (right after the own torch.save), no listing; the same binding
    import shutil

    from records import zero3_save

    tag = zero3_save(tmp_path / "run", 1e-3)
    notes = own_writes.SaveNotes(writer=True)
    for path in sorted(tag.iterdir()):
        saved = shutil.copy(path, tmp_path / path.name)
        with own_writes.saving(notes):
            own_writes.own_write_wrapper(lambda state, where, source=saved: shutil.copy(source, where), None,
                                         ({}, str(path)), {})
    found = binding.bound_from_own(own_writes.noted_in(notes, str(tag)))
    assert found is not None and found.bound == binding.read_back(str(tag))[0], found
    assert found.bound["others"]["files"] == 2 and binding.unchanged(str(tag), found.identities)
    (tag / "layer_01-model_states.pt").write_bytes((tag / "layer_01-model_states.pt").read_bytes() + b"\0")
    assert not binding.unchanged(str(tag), found.identities)  # another write since: a stat tells


def test_the_writer_reads_no_zip_directory_another_rank_read_and_told_unless_a_stat_shows_another_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # #56 item 1 with several ranks: rank 1 tells its stamp with the identity its own read saw
    import shutil

    from records import zero3_save

    from accelerate_warmup_patch import torch_file

    tag = zero3_save(tmp_path / "run", 1e-3)
    partition = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    shutil.copy(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt", tmp_path / "rank1.pt")
    store = JobStore()
    writer, rank1 = own_writes.SaveNotes(True, store), own_writes.SaveNotes(False, store)
    for path in sorted(tag.iterdir()):
        saved = shutil.copy(path, tmp_path / path.name)
        with own_writes.saving(writer):
            own_writes.own_write_wrapper(lambda state, where, source=saved: shutil.copy(source, where), None,
                                         ({}, str(path)), {})
    with own_writes.saving(rank1):
        own_writes.own_write_wrapper(lambda state, where: shutil.copy(tmp_path / "rank1.pt", where), None,
                                     ({}, str(partition)), {})
    reads: list[str] = []
    real = torch_file.zip_directory

    def counted(path: str, *args: Any, **kwargs: Any) -> torch_file.ZipDirectory:
        reads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(torch_file, "zip_directory", counted)

    def told(names: list[str]) -> dict[str, tuple[binding.Stamp, tuple[int, ...]]]:
        return own_writes.told_stamps(writer, str(tag), names)

    found = binding.read_back_known(str(tag), own_writes.known(writer, str(tag)), told)
    assert reads == [] and found.bound == binding.read_back(str(tag))[0], reads
    assert own_writes.rewritten_since(str(tag), writer, found.stamps) is None
    # another job's rank 1 writes its partition after this job's rank 1 did and told: a stat shows it, and it is read
    with own_writes.saving(rank1):
        own_writes.own_write_wrapper(lambda state, where: shutil.copy(tmp_path / "rank1.pt", where), None,
                                     ({}, str(partition)), {})
    shutil.copy(tag / "layer_01-model_states.pt", partition)
    writer.told.clear()
    reads.clear()
    store.calls = 0
    again = binding.read_back_known(str(tag), own_writes.known(writer, str(tag)), told)
    assert store.calls == 3, store.calls  # rank 1's file asked in one call: a check, a multi_get, a delete_key
    assert reads == [str(partition)], reads
    assert "zero_pp_rank_1_mp_rank_00_optim_states.pt: not the bytes this job wrote" in str(
        own_writes.rewritten_since(str(tag), writer, again.stamps))
