"""checkpoint_pickle: any pickle read as data, nothing it names imported or called, every bound named.

Standard library only: the files are written by tests/unit/audit_files.py as torch writes them (zip and legacy).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
import audit_files as files

from accelerate_warmup_patch.cli.audit import checkpoint_pickle
from accelerate_warmup_patch.cli.audit.checkpoint_pickle import StandIn, Tensor, Unreadable


def _load(tmp_path: Path, value: Any, legacy: bool = False) -> Any:
    path = tmp_path / "mp_rank_00_model_states.pt"
    (files.write_torch_legacy if legacy else files.write_torch_zip)(path, value)
    return checkpoint_pickle.load(str(path))


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_gpt_neox_client_state_is_read_with_numpy_and_torch_names_kept(tmp_path: Path, legacy: bool) -> None:
    """gpt-neox, megatron/checkpointing.py, save_ds_checkpoint: random.getstate(), np.random.get_state() (numpy 2
    pickles its array as numpy._core.multiarray._reconstruct) and torch's rng states beside DeepSpeed's keys."""
    data = _load(tmp_path, files.model_states(client_state=files.gpt_neox_client_state()), legacy)
    assert data["ds_version"] == "0.15.2" and data["global_steps"] == 6
    assert data["ds_config"]["scheduler"]["type"] == "WarmupLR"
    array = data["np_rng_state"][1]
    assert isinstance(array, StandIn) and array.name == "numpy._core.multiarray._reconstruct"
    assert array.state[2].name == "numpy.dtype" and array.state[1] == (624,)  # BUILD recorded, not run
    assert isinstance(data["torch_rng_state"], Tensor) and data["torch_rng_state"].shape == (5056,)
    assert data["random_rng_state"][0] == 3
    assert data["module"]["0.weight"].shape == (4, 4) and data["module"]["0.weight"].kind == "FloatStorage"


def test_a_megatron_deepspeed_client_state_is_read_with_its_namespace_as_data(tmp_path: Path) -> None:
    """Megatron-DeepSpeed, megatron/checkpointing.py, save_checkpoint: state_dict['args'] (an argparse.Namespace,
    NEWOBJ then BUILD), checkpoint_version, iteration and the rng states (numpy 1: numpy.core.multiarray)."""
    data = _load(tmp_path, files.model_states(client_state=files.megatron_deepspeed_client_state()))
    args = data["args"]
    assert isinstance(args, StandIn) and args.name == "argparse.Namespace" and args.state["lr"] == 1e-3
    assert data["np_rng_state"][1].name == "numpy.core.multiarray._reconstruct"
    assert data["optimizer"]["param_groups"][0]["lr"] == 1e-3


def test_a_users_dataclass_is_read_as_data(tmp_path: Path) -> None:
    data = _load(tmp_path, files.model_states(client_state=files.user_client_state()))
    assert data["train_state"].name == "__main__.TrainState" and data["train_state"].state == {
        "epoch": 1, "best_loss": 0.5}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickle_that_names_commands_runs_none_of_them(tmp_path: Path, protocol: int) -> None:
    import argparse
    import os
    import subprocess

    marker = tmp_path / "it-ran"

    class Runs:
        def __init__(self, func: Any, *args: Any) -> None:
            self.func, self.args = func, args

        def __reduce__(self) -> tuple[Any, ...]:
            return self.func, self.args

    value = {"ds_version": "0.15.2", "system": Runs(os.system, f"touch {marker}"),
             "eval": Runs(eval, f"open({str(marker)!r}, 'w')"),
             "popen": Runs(subprocess.Popen, ["touch", str(marker)]), "ns": argparse.Namespace(a=1)}
    data, _ = checkpoint_pickle.loads(pickle.dumps(value, protocol=protocol))
    assert not marker.exists()
    assert data["ds_version"] == "0.15.2"
    assert data["system"].name in ("posix.system", "os.system") and data["system"].args == (f"touch {marker}",)
    assert data["eval"].name in ("builtins.eval", "__builtin__.eval")
    assert data["popen"].name == "subprocess.Popen"


def _bound(monkeypatch: pytest.MonkeyPatch, name: str, value: int) -> None:
    monkeypatch.setitem(checkpoint_pickle.BOUNDS, name, value)


@pytest.mark.parametrize(("bound", "value", "pickled", "words"), [
    ("opcodes", 100, b"\x80\x02" + b"N0" * 100 + b"N.", "more than 100 opcodes"),
    ("objects", 100, b"\x80\x02" + b"]0" * 101 + b"N.", "more than 100 objects"),
    ("stack", 100, b"\x80\x02N" + b"2" * 101 + b".", "stack grows past 100"),
    ("stack", 100, b"\x80\x02" + b"(" * 101 + b"N.", "stack grows past 100"),
    ("memo", 1000, b"\x80\x02Nr\xff\xff\xff\xff.", "memo index 4294967295"),
    ("memo", 1000, b"\x80\x02Np99999\n.", "memo index 99999"),
    ("globals", 10, b"\x80\x02" + b"".join(b"cm\nn%d\n0" % i for i in range(11)) + b"N.", "more than 10 globals"),
    ("digits", 4300, b"I" + b"9" * 5000 + b"\n.", "more than 4300 digits"),
    ("digits", 4300, b"L" + b"9" * 5000 + b"L\n.", "more than 4300 digits"),
])
def test_each_bound_is_named(monkeypatch: pytest.MonkeyPatch, bound: str, value: int, pickled: bytes,
                             words: str) -> None:
    _bound(monkeypatch, bound, value)
    with pytest.raises(Unreadable, match=words):
        checkpoint_pickle.loads(pickled)


@pytest.mark.parametrize("pickled", [b"", b"\x80\x02", b"\x80\x02N", b"\x80\x02\xff.", b"\x80\x02t.",
                                     b"\x80\x02X\xff\xff\xff\x7f.", b"\x80\x02R.", b"\x80\x02NNR."])
def test_a_damaged_pickle_is_unreadable_not_a_crash(pickled: bytes) -> None:
    with pytest.raises(Unreadable, match="damaged"):
        checkpoint_pickle.loads(pickled)


def test_a_deep_nest_loads_and_plain_refuses_it_without_recursing() -> None:
    data, _ = files.torch_pickle({"deep": files.Deep(200_000), "x": 1})
    value, _ = checkpoint_pickle.loads(data)
    assert value["x"] == 1
    with pytest.raises(Unreadable, match="nested deeper than 64"):
        checkpoint_pickle.plain(value)


def test_plain_turns_what_json_cannot_take_into_strings() -> None:
    data, _ = files.torch_pickle({"t": files.Tensor((2, 3)), "s": {1}, "b": b"xy", "inf": float("inf"),
                                  "big": 2 ** 100, "g": files.Call(files.Global("os", "system"), ("x",)), 1: None})
    value, _ = checkpoint_pickle.loads(data)
    assert checkpoint_pickle.plain(value) == {"t": "<tensor FloatStorage [2, 3]>", "s": [1], "b": "<2 bytes>",
                                              "inf": "inf", "big": "<an int of 101 bits>", "g": "<os.system(...)>",
                                              "1": None}


def test_only_regular_files_are_opened(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "fifo")
    for path, kind in ((tmp_path / "fifo", "a FIFO"), (Path("/dev/zero"), "a character device"),
                       (tmp_path, "a folder")):
        with pytest.raises(checkpoint_pickle.NotRegular, match=f"not a regular file \\({kind}\\)"):
            checkpoint_pickle.load(str(path))
        with pytest.raises(checkpoint_pickle.NotRegular):
            checkpoint_pickle.read_capped(str(path), 10)
    (tmp_path / "big").write_bytes(b"x" * 11)
    with pytest.raises(Unreadable, match="more than 10 bytes"):
        checkpoint_pickle.read_capped(str(tmp_path / "big"), 10)


@pytest.mark.parametrize("state", [b"}X\x05\x00\x00\x00shapeK\x07s", b"K\x07"], ids=["dict", "int"])
def test_a_build_on_a_tensor_cannot_change_its_shape(state: bytes) -> None:
    data, _ = files.torch_pickle(files.Tensor((2,)))
    value, _ = checkpoint_pickle.loads(data[:-1] + state + b"b.")  # BUILD on the rebuilt tensor, then STOP
    assert isinstance(value, Tensor) and value.shape == (2,)


def test_a_zip_with_two_data_pkl_members_says_so(tmp_path: Path) -> None:
    import warnings
    import zipfile

    path = tmp_path / "mp_rank_00_model_states.pt"
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as archive:
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name: the point of this file
        for version in ("0.19.8", "0.15.2"):
            archive.writestr("archive/data.pkl", pickle.dumps({"ds_version": version}, protocol=2))
    with pytest.raises(Unreadable, match=r"a zip archive with 2 <name>/data\.pkl members"):
        checkpoint_pickle.load(str(path))


def test_a_legacy_checkpoint_whose_pickles_pass_the_bound_names_the_bound(tmp_path: Path) -> None:
    """torch's legacy format reads its leading pickles within BOUNDS["pickle_bytes"]: one longer is cut there, and
    the audit says which bound it passed, not that the file is damaged."""
    cap = checkpoint_pickle.BOUNDS["pickle_bytes"]
    with pytest.raises(Unreadable, match=f"more than {cap} bytes"):
        _load(tmp_path, {"module": "x" * (cap + 1024)}, legacy=True)
