"""Reading the plain data of a torch checkpoint file without torch, without running its pickle, without its tensors.

``torch.load(weights_only=False)``, which DeepSpeed uses, calls whatever the file's pickle names. Here every
global the pickle names goes through ``find_class``: an explicit allow-list maps the names torch writes for
tensors, storages, dtypes and sizes (read off real DeepSpeed checkpoints with ``pickletools``) and a few
plain containers to inert stand-ins of this module, and any other name is refused before anything of it is
imported or called. A storage is never read: ``persistent_load`` returns a stand-in that knows its dtype
name and element count, so the cost is the pickle's size, whatever the tensors weigh. Standard library only.

Both formats torch writes: the zip archive (``<name>/data.pkl`` beside ``<name>/data/N``, torch 1.6 and
newer) and the legacy one (four pickles in a row, then the raw storages, which are never read).
"""

from __future__ import annotations

import pickle
import zipfile
from collections import OrderedDict
from typing import IO, Any

# torch.serialization.MAGIC_NUMBER: the first pickle of a legacy-format file
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_STORAGE_NAMES = frozenset(f"{kind}Storage" for kind in (
    "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool", "ComplexFloat",
    "ComplexDouble", "QInt8", "QUInt8", "QInt32", "QUInt4x2", "QUInt2x4", "Untyped"))
_DTYPE_NAMES = frozenset((
    "float32", "float", "float64", "double", "float16", "half", "bfloat16", "int64", "long", "int32", "int",
    "int16", "short", "int8", "uint8", "bool", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "uint16", "uint32", "uint64"))


class Unreadable(Exception):
    """The file cannot be read as plain data; the message says why (and names a refused global)."""


class Refused(Unreadable):
    """The pickle names a global outside the allow-list: nothing of it was imported or called."""

    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"its pickle names {module}.{name}, which is not plain data: refused, nothing of it ran")
        self.global_name = f"{module}.{name}"


class Storage:
    """A storage the pickle refers to: its dtype's name and element count; its bytes are never read."""

    def __init__(self, kind: str, numel: int) -> None:
        self.kind = kind
        self.numel = numel


class Tensor:
    """A tensor's place in the data: its shape and storage dtype, no values."""

    def __init__(self, storage: object = None, offset: object = 0, size: object = (), *_: object) -> None:
        self.kind = storage.kind if isinstance(storage, Storage) else None
        self.shape = tuple(size) if isinstance(size, (tuple, list)) else ()

    def __setstate__(self, state: object) -> None:
        pass  # a subclass's or a Parameter's extra state: not plain data we need

    def __repr__(self) -> str:
        return f"<tensor {self.kind or '?'} {list(self.shape)}>"


class Size(tuple):  # type: ignore[type-arg]
    """torch.Size: a tuple of ints."""


class _StorageType:
    def __init__(self, name: str) -> None:
        self.name = name


class _Name(str):
    """A dtype or a device: only its name."""


def _rebuild_tensor(*args: object) -> Tensor:
    return Tensor(*args)


def _rebuild_parameter(data: object, *_: object) -> object:
    return data  # a Parameter is its tensor


def _rebuild_from_type(func: object, new_type: object, args: object, state: object = None) -> object:
    # func is one of this module's stand-ins: only find_class can have produced a callable
    return func(*args) if callable(func) and isinstance(args, tuple) else Tensor()


def _device(*args: object) -> _Name:
    return _Name(":".join(str(a) for a in args))


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "set"): set, ("__builtin__", "set"): set,
    ("builtins", "frozenset"): frozenset, ("__builtin__", "frozenset"): frozenset,
    ("torch", "Size"): Size,
    ("torch", "device"): _device,
    ("torch", "Tensor"): Tensor,
    ("torch.nn.parameter", "Parameter"): Tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is not None:
            return allowed
        if module == "torch" and name in _STORAGE_NAMES:
            return _StorageType(name)
        if module == "torch" and name in _DTYPE_NAMES:
            return _Name(name)
        raise Refused(module, name)

    def persistent_load(self, pid: Any) -> Storage:
        # zip: ('storage', type, key, location, numel); legacy: (..., size, view_metadata)
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise Unreadable(f"a persistent id torch does not write: {str(pid)[:80]}")
        kind = pid[1].name if isinstance(pid[1], _StorageType) else str(pid[1])
        return Storage(kind, pid[4] if isinstance(pid[4], int) else 0)


def _load(stream: IO[bytes]) -> Any:
    try:
        return _Unpickler(stream).load()
    except Unreadable:
        raise
    except Exception as error:  # a truncated or malformed pickle
        raise Unreadable(f"its pickle is damaged ({type(error).__name__}: {error})") from None


def load(path: str) -> Any:
    """The plain data of the torch checkpoint at ``path``; raises Unreadable (Refused for a global not allowed)."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
            if head.startswith(b"PK"):
                return _load_zip(file)
            if head[:1] == b"\x80":
                file.seek(0)
                return _load_legacy(file)
    except OSError as error:
        raise Unreadable(f"cannot read it: {error.strerror or error}") from None
    raise Unreadable("not a torch checkpoint (neither torch's zip nor its legacy format)")


def _load_zip(file: IO[bytes]) -> Any:
    try:
        archive = zipfile.ZipFile(file)
    except zipfile.BadZipFile as error:
        raise Unreadable(f"a damaged zip archive ({error})") from None
    with archive:
        names = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(names) != 1:
            raise Unreadable("a zip archive without torch's <name>/data.pkl")
        with archive.open(names[0]) as stream:
            return _load(stream)


def _load_legacy(file: IO[bytes]) -> Any:
    if _load(file) != LEGACY_MAGIC:
        raise Unreadable("a pickle, but not a torch checkpoint (no torch magic number)")
    _load(file)  # the protocol version
    _load(file)  # sys_info: byte order and type sizes; the storages are not read
    return _load(file)
