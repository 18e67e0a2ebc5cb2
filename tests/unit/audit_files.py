"""DeepSpeed model-states files written with the standard library alone, laid out as torch writes them.

A torch zip archive holds ``archive/data.pkl`` (a protocol-2 pickle) beside ``archive/data/N`` (one storage per
tensor) and ``archive/version``; DeepSpeed's save folder holds the tag folders and ``latest``. The pickle names
torch's and numpy's globals by their module and name (``Global``), so that no torch or numpy is needed to write
them, and reads back through ``torch.load`` as the real thing would.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import pickle
import random
import struct
import zipfile
from pathlib import Path
from typing import Any

# pickle's opcodes that the hand-written pickles below use
GLOBAL, REDUCE, BUILD, NEWOBJ, MARK, TUPLE, BINPERSID = b"c", b"R", b"b", b"\x81", b"(", b"t", b"Q"


class Global:
    """A global named by module and name, written as pickle's GLOBAL opcode: nothing of it is imported."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # pickle's save_reduce wants a callable
        raise AssertionError("a stand-in of the test's own is never called")


class Call:
    """``func(*args)`` and then, where given, a BUILD with ``state``: what an object's __reduce__ returns."""

    def __init__(self, func: Global, args: tuple[Any, ...], state: Any = None) -> None:
        self.func, self.args, self.state = func, args, state


class New:
    """``cls.__new__(cls, *args)`` then a BUILD with ``state``: protocol 2's way for a plain object."""

    def __init__(self, cls: Global, args: tuple[Any, ...], state: Any = None) -> None:
        self.cls, self.args, self.state = cls, args, state


class Tensor:
    """A torch tensor as torch pickles it: _rebuild_tensor_v2 over a storage the archive holds."""

    def __init__(self, shape: tuple[int, ...], storage: str = "FloatStorage") -> None:
        self.shape, self.storage = shape, storage


class _Pickler(pickle._Pickler):  # type: ignore[name-defined,misc]  # the pure-Python one: its dispatch table is ours
    dispatch = dict(pickle._Pickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=2)
        self.storages: list[int] = []

    def save_global_ref(self, obj: Global) -> None:
        self.write(GLOBAL + obj.module.encode() + b"\n" + obj.name.encode() + b"\n")

    def save_call(self, obj: Call) -> None:
        self.save(obj.func)
        self.save(obj.args)
        self.write(REDUCE)
        if obj.state is not None:
            self.save(obj.state)
            self.write(BUILD)

    def save_new(self, obj: New) -> None:
        self.save(obj.cls)
        self.save(obj.args)
        self.write(NEWOBJ)
        if obj.state is not None:
            self.save(obj.state)
            self.write(BUILD)

    def save_tensor(self, obj: Tensor) -> None:
        key = len(self.storages)
        numel = 1
        for n in obj.shape:
            numel *= n
        self.storages.append(numel)
        self.save(Global("torch._utils", "_rebuild_tensor_v2"))
        self.write(MARK)
        self.save(("storage", Global("torch", obj.storage), str(key), "cpu", numel))
        self.write(BINPERSID)
        stride = tuple(int(_product(obj.shape[i + 1:])) for i in range(len(obj.shape)))
        for item in (0, obj.shape, stride, False, Call(Global("collections", "OrderedDict"), ())):
            self.save(item)
        self.write(TUPLE + REDUCE)

    dispatch[Global] = save_global_ref
    dispatch[Call] = save_call
    dispatch[New] = save_new
    dispatch[Tensor] = save_tensor


def _product(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def torch_pickle(value: Any) -> tuple[bytes, list[int]]:
    """The protocol-2 pickle torch would write for ``value``, and each storage's element count."""
    out = io.BytesIO()
    pickler = _Pickler(out)
    pickler.dump(value)
    return out.getvalue(), pickler.storages


def write_torch_zip(path: Path, value: Any = None, *, data_pkl: bytes | None = None,
                    compress: int = zipfile.ZIP_STORED) -> Path:
    """``value`` saved as torch.save saves it (zip format), or ``data_pkl`` as its pickle."""
    storages: list[int] = []
    if data_pkl is None:
        data_pkl, storages = torch_pickle(value)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=compress) as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        for key, numel in enumerate(storages):
            archive.writestr(f"archive/data/{key}", b"\0" * 4 * numel, compress_type=zipfile.ZIP_STORED)
        archive.writestr("archive/version", "3\n", compress_type=zipfile.ZIP_STORED)
    return path


def model_states(*, version: str = "0.15.2", scheduler: dict[str, Any] | None = None, lr: float = 1e-3,
                 groups: int = 1, global_steps: int = 6, client_state: dict[str, Any] | None = None,
                 ds_config: Any = None) -> dict[str, Any]:
    """A model-states dict as DeepSpeed's _save_checkpoint writes it (engine.py), ZeRO 0, one small layer."""
    if scheduler is None:
        scheduler = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": lr,
                                                    "warmup_num_steps": 5, "warmup_type": "linear"}}
    config = ds_config if ds_config is not None else {
        "train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adam", "params": {"lr": lr}},
        "scheduler": scheduler}
    module = Call(Global("collections", "OrderedDict"), ([["0.weight", Tensor((4, 4))], ["0.bias", Tensor((4,))]],))
    state: dict[str, Any] = {
        "module": module,
        "buffer_names": [],
        "optimizer": {"state": {}, "param_groups": [{"lr": lr, "params": [0, 1]} for _ in range(groups)]},
        "param_shapes": None,
        "frozen_param_shapes": None,
        "shared_params": {},
        "frozen_param_fragments": None,
        "lr_scheduler": {"last_batch_iteration": global_steps - 1},
        "data_sampler": None,
        "random_ltd": None,
        "sparse_tensor_module_names": set(),
        "skipped_steps": 0,
        "global_steps": global_steps,
        "global_samples": global_steps * 2,
        "dp_world_size": 1,
        "mp_world_size": 1,
        "ds_config": config,
        "ds_version": version,
    }
    state.update(client_state or {})
    return state


def write_run(save_dir: Path, tag: str = "global_step6", value: Any = None, *, latest: bool = True,
              record: dict[str, Any] | None = None, **states: Any) -> Path:
    """A DeepSpeed save folder with one tag: mp_rank_00_model_states.pt, ``latest``, and a record if given."""
    file = write_torch_zip(save_dir / tag / "mp_rank_00_model_states.pt",
                           value if value is not None else model_states(**states))
    if latest:
        (save_dir / "latest").write_text(tag)
    if record is not None:
        (save_dir / tag / "accelerate_warmup_patch.json").write_text(json.dumps(record))
    return file


# The client_states of the frameworks that drive DeepSpeed's schedulers ------------------------------------

def numpy_array(values: list[int], dtype: str = "<u4", numpy_core: str = "numpy.core") -> Call:
    """A numpy array as ndarray.__reduce__ pickles it: multiarray._reconstruct, then BUILD with its raw bytes."""
    dt = Call(Global("numpy", "dtype"), (dtype[1:], False, True), (3, dtype[0], None, None, None, -1, -1, 0))
    raw = struct.pack(f"<{len(values)}I", *values)
    return Call(Global(f"{numpy_core}.multiarray", "_reconstruct"), (Global("numpy", "ndarray"), (0,), b"b"),
                (1, (len(values),), dt, False, raw))


def numpy_rng_state(numpy_core: str = "numpy.core") -> tuple[Any, ...]:
    """np.random.get_state(): ('MT19937', a uint32 array of 624, pos, has_gauss, cached_gaussian)."""
    return ("MT19937", numpy_array(list(range(624)), numpy_core=numpy_core), 624, 0, 0.0)


def torch_rng_state() -> Tensor:
    return Tensor((5056,), "ByteStorage")  # torch.get_rng_state(): a uint8 tensor


def gpt_neox_client_state() -> dict[str, Any]:
    """What gpt-neox passes as client_state (megatron/checkpointing.py, save_ds_checkpoint): the iteration, a dict
    of the model's args, and the rng states (random, numpy, torch, cuda, the model-parallel tracker's)."""
    return {
        "iteration": 6,
        "args": {"num_layers": 2, "hidden_size": 16, "num_attention_heads": 2, "max_position_embeddings": 16,
                 "make_vocab_size_divisible_by": 128, "padded_vocab_size": 128, "tokenizer_type": "GPT2BPETokenizer",
                 "model_parallel_size": 1},
        "random_rng_state": random.Random(0).getstate(),
        "np_rng_state": numpy_rng_state("numpy._core"),  # numpy 2's module name
        "torch_rng_state": torch_rng_state(),
        "cuda_rng_state": torch_rng_state(),
        "rng_tracker_states": {"model-parallel-rng": torch_rng_state()},
    }


def megatron_deepspeed_client_state() -> dict[str, Any]:
    """What Megatron-DeepSpeed passes as client_state (megatron/checkpointing.py, save_checkpoint): ``args`` (the
    argparse.Namespace of the whole command line), checkpoint_version, iteration, and the rng states."""
    args = New(Global("argparse", "Namespace"), (), {"lr": 1e-3, "min_lr": 0.0, "deepspeed": True, "seed": 1234,
                                                     "train_iters": 6, "deepspeed_config": "ds_config.json"})
    return {
        "args": args,
        "checkpoint_version": 3.0,
        "iteration": 6,
        "random_rng_state": random.Random(0).getstate(),
        "np_rng_state": numpy_rng_state("numpy.core"),  # numpy 1's
        "torch_rng_state": torch_rng_state(),
        "cuda_rng_state": torch_rng_state(),
        "rng_tracker_states": {"model-parallel-rng": torch_rng_state()},
    }


@dataclasses.dataclass
class TrainState:
    """A training script's own dataclass in its client_state."""

    epoch: int = 1
    best_loss: float = 0.5


def user_client_state() -> dict[str, Any]:
    # a dataclass pickles as NEWOBJ of its class, then BUILD with its __dict__; its module is the user's script
    return {"train_state": New(Global("__main__", "TrainState"), (), dataclasses.asdict(TrainState())),
            "namespace": argparse.Namespace(a=1).__dict__}
