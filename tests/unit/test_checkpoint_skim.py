"""The skim (checkpoint_pickle's fast path for small pickles) never passes a pickle the full scan refuses, and
finds the same end where both pass: on real-shaped model states, every protocol, hostile bytes at the default
bounds, and thousands of damaged copies of a real pickle. The full scan (``_scan``) is the oracle: the one seam."""

from __future__ import annotations

import pickle
import random
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch.cli.audit import checkpoint_pickle, pickle_scan
from accelerate_warmup_patch.cli.audit.checkpoint_pickle import Unreadable


def verdict(scan: Any, data: bytes, start: int = 0) -> int | str:
    try:
        return int(scan(data, start))
    except Unreadable as error:
        return f"unreadable: {error}"


def same_as_full_scan(data: bytes) -> None:
    full = verdict(pickle_scan.full_scan, data)
    skimmed = verdict(checkpoint_pickle.scan, data)
    assert skimmed == full, (data[:80], skimmed, full)


@pytest.mark.parametrize("client_state", ["none", "gpt-neox", "megatron"])
def test_real_shaped_model_states_skim_to_the_same_end(client_state: str) -> None:
    state = {"none": None, "gpt-neox": files.gpt_neox_client_state(),
             "megatron": files.megatron_deepspeed_client_state()}[client_state]
    data, _ = files.torch_pickle(files.model_states(client_state=state))
    same_as_full_scan(data)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_skims_to_the_same_end(protocol: int) -> None:
    value = {"a": [1, 2.5, "x" * 300, b"y" * 300, (None, True)], "b": {i: str(i) for i in range(400)},
             "big": 10**50, "neg": -(10**20), "set": {1, 2}, "f": frozenset({3})}
    same_as_full_scan(pickle.dumps(value, protocol=protocol))


@pytest.mark.parametrize(("pickled", "words"), [
    (b"\x80\x02Nr\xff\xff\xff\xff.", "memo index 4294967295"),
    (b"\x80\x02Np99999999\n.", "memo index 99999999"),
    (b"\x80\x02" + b"".join(b"cm\nn%d\n0" % i for i in range(10_001)) + b"N.", "more than 10000 globals"),
    (b"\x80\x02I" + b"9" * 5000 + b"\n.", "more than 4300 digits"),
    (b"\x80\x02X\xff\xff\xff\x7f.", "damaged"),
])
def test_hostile_small_pickles_are_refused_with_the_bound_named(pickled: bytes, words: str) -> None:
    with pytest.raises(Unreadable, match=words):
        checkpoint_pickle.loads(pickled)
    same_as_full_scan(pickled)


def test_a_memo_index_just_past_what_the_skim_takes_is_the_full_scans_to_decide() -> None:
    same_as_full_scan(b"\x80\x02Nr\x00\x00\x3d\x00.")  # 3,997,696: under the bound, past the skim's 0x3CFFFF


def loaded(data: bytes) -> str:
    """What ``loads`` makes of ``data``: its value as plain data, or the words it is refused with."""
    try:
        return repr(checkpoint_pickle.plain(checkpoint_pickle.loads(data)[0]))
    except Unreadable as error:
        return f"unreadable: {error}"


@pytest.mark.slow
def test_damaged_copies_of_a_real_pickle_load_as_without_the_skim(monkeypatch: pytest.MonkeyPatch) -> None:
    # The skim leaves the stack to the unpickler; where the unpickler fails, the full scan gives its words, and
    # where the full scan refuses, the unpickler must not have built a value: the same outcome either way.
    data, _ = files.torch_pickle(files.model_states(client_state=files.gpt_neox_client_state()))
    rng = random.Random(42)
    copies = []
    for _ in range(2000):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        if rng.random() < 0.2:
            del damaged[rng.randrange(len(damaged)):]
        copies.append(bytes(damaged))
    skimmed = [loaded(copy) for copy in copies]
    monkeypatch.setitem(checkpoint_pickle.BOUNDS, "memo", pickle_scan._SKIM_MEMO - 1)  # no skim
    bound = f"past {pickle_scan._SKIM_MEMO - 1} "
    for copy, outcome in zip(copies, skimmed):
        assert outcome == loaded(copy).replace(bound, "past 4000000 "), copy


def test_the_legacy_formats_pickles_in_a_row_skim_to_each_end() -> None:
    first, second = pickle.dumps(checkpoint_pickle.LEGACY_MAGIC, 2), pickle.dumps({"x": [1, 2, 3]}, 2)
    data = first + second
    assert checkpoint_pickle.scan(data) == pickle_scan.full_scan(data, 0) == len(first)
    assert checkpoint_pickle.scan(data, len(first)) == pickle_scan.full_scan(data, len(first)) == len(data)
