"""DeepSpeed model-states files written with the standard library alone, laid out as torch writes them.

A torch zip archive holds ``archive/data.pkl`` (a protocol-2 pickle) beside ``archive/data/N`` (one storage per
tensor) and ``archive/version``; DeepSpeed's save folder holds the tag folders and ``latest``. The pickle names
torch's and numpy's globals by their module and name (``Global``), so that no torch or numpy is needed to write
them; ``torch.load`` reads these files back as the real objects (checked with torch 2 and numpy 2.4: an ndarray,
an argparse.Namespace, tensors of the right shape and dtype).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import pickle
import random
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any, ClassVar

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


class Deep:
    """A list nested ``depth`` deep: [[[...]]]."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


# the pure-Python pickler, whose dispatch table a subclass may extend (typeshed declares neither save nor write)
_PurePickler: Any = pickle._Pickler


class _Pickler(_PurePickler):  # type: ignore[misc]
    dispatch: ClassVar[dict[type, Any]] = dict(_PurePickler.dispatch)

    def __init__(self, file: io.BytesIO, legacy: bool = False) -> None:
        super().__init__(file, protocol=2)
        self.legacy = legacy  # the legacy format's persistent ids end with view_metadata
        self.storages: list[tuple[int, int]] = []  # (elements, bytes) per storage

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
        self.storages.append((numel, numel * _ELEMENT_BYTES.get(obj.storage, 4)))
        self.save(Global("torch._utils", "_rebuild_tensor_v2"))
        self.write(MARK)
        self.save(("storage", Global("torch", obj.storage), str(key), "cpu", numel, *((None,) if self.legacy else ())))
        self.write(BINPERSID)
        stride = tuple(int(_product(obj.shape[i + 1:])) for i in range(len(obj.shape)))
        for item in (0, obj.shape, stride, False, Call(Global("collections", "OrderedDict"), ())):
            self.save(item)
        self.write(TUPLE + REDUCE)

    def save_deep(self, obj: Deep) -> None:
        # a list nested obj.depth deep, built without recursion: that many empty lists, each appended to the one
        # below it (pickling such a list the ordinary way would overflow the pickler's own recursion)
        self.write(b"]" * obj.depth + b"a" * (obj.depth - 1))

    dispatch[Global] = save_global_ref
    dispatch[Deep] = save_deep
    dispatch[Call] = save_call
    dispatch[New] = save_new
    dispatch[Tensor] = save_tensor


_ELEMENT_BYTES = {"ByteStorage": 1, "CharStorage": 1, "BoolStorage": 1, "HalfStorage": 2, "BFloat16Storage": 2,
                  "ShortStorage": 2, "DoubleStorage": 8, "LongStorage": 8}


def _product(shape: tuple[int, ...]) -> int:
    total = 1
    for n in shape:
        total *= n
    return total


def torch_pickle(value: Any, legacy: bool = False) -> tuple[bytes, list[tuple[int, int]]]:
    """The protocol-2 pickle torch would write for ``value``, and each storage's elements and bytes."""
    out = io.BytesIO()
    pickler = _Pickler(out, legacy)
    pickler.dump(value)
    return out.getvalue(), pickler.storages


def write_torch_legacy(path: Path, value: Any) -> Path:
    """``value`` saved as torch.save(_use_new_zipfile_serialization=False) saves it: the magic number, the protocol
    version, sys_info, the value, the storage keys, then the storages' raw bytes."""
    data, storages = torch_pickle(value, legacy=True)
    sys_info = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 4}}
    with open(path, "wb") as out:
        for head in (0x1950A86A20F9469CFC6C, 1001, sys_info):
            out.write(pickle.dumps(head, protocol=2))
        out.write(data)
        out.write(pickle.dumps([str(key) for key in range(len(storages))], protocol=2))
        for numel, size in storages:
            out.write(struct.pack("<q", numel) + b"\0" * size)
    return path


def write_torch_zip(path: Path, value: Any = None, *, data_pkl: bytes | None = None,
                    compress: int = zipfile.ZIP_STORED) -> Path:
    """``value`` saved as torch.save saves it (zip format), or ``data_pkl`` as its pickle."""
    storages: list[tuple[int, int]] = []
    if data_pkl is None:
        data_pkl, storages = torch_pickle(value)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=compress) as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        for key, (_, size) in enumerate(storages):
            archive.writestr(f"archive/data/{key}", b"\0" * size, compress_type=zipfile.ZIP_STORED)
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


# Zip members written by hand: bombs, odd methods and flags -------------------------------------------------

def write_zip_member(path: Path, *, name: str = "archive/data.pkl", prefix: bytes = b"", chunk: bytes = b"",
                     count: int = 0, suffix: bytes = b"", method: int = zipfile.ZIP_DEFLATED, flags: int = 0,
                     local_name: str | None = None) -> Path:
    """A zip (zip64 fields) of one member ``prefix + chunk * count + suffix``, deflated without building it: a
    segment ended by a full flush is independent of what came before, so one compressed ``chunk`` is written
    ``count`` times. ``local_name`` writes another name in the local header than in the central directory."""
    crc = zlib.crc32(prefix)
    for _ in range(count):
        crc = zlib.crc32(chunk, crc)
    crc = zlib.crc32(suffix, crc)
    size = len(prefix) + len(chunk) * count + len(suffix)
    if method == zipfile.ZIP_DEFLATED:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        head = packer.compress(prefix) + packer.flush(zlib.Z_FULL_FLUSH)
        segment = packer.compress(chunk) + packer.flush(zlib.Z_FULL_FLUSH) if count else b""
        tail = packer.compress(suffix) + packer.flush()
    else:
        head, segment, tail = prefix, chunk, suffix
    packed = len(head) + len(segment) * count + len(tail)
    raw_name, local = name.encode(), (local_name or name).encode()
    with open(path, "wb") as out:
        out.write(struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 45, flags, method, 0, 0x21, crc, 0xFFFFFFFF,
                              0xFFFFFFFF, len(local), 20) + local + struct.pack("<HHQQ", 1, 16, size, packed))
        out.write(head)
        for _ in range(count):
            out.write(segment)
        out.write(tail)
        directory_at = out.tell()
        entry = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 45, 45, flags, method, 0, 0x21, crc,
                            0xFFFFFFFF, 0xFFFFFFFF, len(raw_name), 28, 0, 0, 0, 0, 0xFFFFFFFF)
        entry += raw_name + struct.pack("<HHQQQ", 1, 24, size, packed, 0)
        out.write(entry)
        end64_at = out.tell()
        out.write(struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, len(entry), directory_at))
        out.write(struct.pack("<4sIQI", b"PK\x06\x07", 0, end64_at, 1))
        out.write(struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(entry), 0xFFFFFFFF, 0))
    return path


# The audit run in this interpreter ---------------------------------------------------------------------------

def audit(*paths: Path, text: bool = False) -> tuple[int, Any]:
    """``audit PATH...`` through its ``main``: the exit code and the JSON list (``text``: the text output)."""
    from accelerate_warmup_patch.cli import audit as audit_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = audit_cli.main([str(p) for p in paths], as_json=not text)
    return code, (out.getvalue() if text else json.loads(out.getvalue()))


def one(path: Path) -> tuple[int, dict[str, Any]]:
    """The exit code and the one report of ``path``."""
    code, reports = audit(path)
    assert len(reports) == 1, reports
    return code, reports[0]
