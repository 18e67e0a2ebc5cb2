"""Reading the data of a torch checkpoint file without torch, and without running any of its pickle.

``torch.load(weights_only=False)``, which DeepSpeed uses, imports and calls whatever the file's pickle names. This
reader imports and calls nothing the file names. Every global becomes a stand-in class of this module that keeps
the module and name and nothing else, and what the pickle would do with it (a call by ``REDUCE``, ``NEWOBJ`` or
``OBJ``, a ``BUILD``, items set or appended) is recorded on a stand-in instance as data. So a checkpoint holding
numpy's rng state, an ``argparse.Namespace`` or a dataclass of the user's reads like any other, and one naming
``os.system`` runs nothing. A few names are read for what they mean, by functions of this module that only look
at data: torch's tensor rebuilds (a tensor is its shape and storage dtype; no storage is read),
``collections.OrderedDict``, ``torch.Size``, sets and ``_codecs.encode``.

Bounds, so that a hostile or broken file costs seconds and tens of MB at most (``BOUNDS``): the bytes of a pickle
(a zip member's declared size and the bytes it really holds, read in chunks), and a scan of its opcodes before
anything is built (``pickle_scan``: opcodes, objects built, stack depth, memo indices, distinct globals, digits of
a number in text). Past a bound the file is ``Unreadable``, naming the bound. Nesting is bounded where the data is used
(``plain``): the unpickler itself builds deep nests without recursion.

Both formats torch writes: the zip archive (``<name>/data.pkl`` beside ``<name>/data/N``, torch 1.6 and newer) and
the legacy one (four pickles in a row, then the raw storages, which are never read). The files are opened, read
and their zip directories walked by ``torch_file``, below the audit and the record's binding alike. Standard
library only.
"""

from __future__ import annotations

import _compat_pickle
import io
import math
import os
import pickle
from typing import IO, Any, Callable, cast

from ...torch_file import (
    NotRegular,
    RangedFile,
    Unreadable,
    ZipDirectory,
    data_pkl,
    open_fd,
    open_regular,
    pread,
    read_capped,
    reason,
    zip_directory,
    zip_directory_of,
)
from .pickle_scan import BOUNDS, EndsEarly, full_scan, scan

__all__ = ["BOUNDS", "EndsEarly", "NotRegular", "RangedFile", "Unreadable", "ZipDirectory", "load", "load_file",
           "loads", "open_regular", "plain", "read_capped", "scan", "zip_directory", "zip_directory_of"]

# torch.serialization.MAGIC_NUMBER: the first pickle of a legacy-format file
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


# The stand-ins ----------------------------------------------------------------------------------------------

class _Global(type):
    """The type of every stand-in class: calling one (a pickle's REDUCE) records the call and runs nothing."""

    pickled_module: str
    pickled_name: str
    meaning: Callable[..., Any] | None  # what the reader reads the name as (_MEANINGS), looked up once

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        meaning = cls.meaning
        if meaning is not None:
            try:
                return meaning(*args, **kwargs)
            except Exception:  # not the shape torch writes: keep the call as data
                pass
        return cast(Any, cls).__new__(cls, *args, **kwargs)

    def __repr__(cls) -> str:
        return f"<{cls.pickled_module}.{cls.pickled_name}>"


class StandIn(metaclass=_Global):
    """What the pickle built from a name: the arguments it was called with, and what was set on it after."""

    pickled_module, pickled_name = "", "?"
    meaning = None

    def __new__(cls, *args: Any, **kwargs: Any) -> StandIn:  # NEWOBJ calls this directly, bypassing __call__
        made = object.__new__(cls)
        made.args, made.kwargs = args, kwargs
        made.state, made.items, made.elements = None, [], []
        return made

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: list[tuple[Any, Any]]
    elements: list[Any]

    @property
    def name(self) -> str:
        return f"{self.pickled_module}.{self.pickled_name}"

    def __setstate__(self, state: Any) -> None:  # BUILD
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:  # SETITEM(S) on a dict-like object
        self.items.append((key, value))

    def append(self, value: Any) -> None:  # APPEND(S) on a list-like object
        self.elements.append(value)

    def extend(self, values: Any) -> None:
        self.elements.extend(values)

    def add(self, value: Any) -> None:  # ADDITEMS on a set-like object
        self.elements.append(value)

    def __call__(self, *args: Any, **kwargs: Any) -> StandIn:  # a REDUCE whose callable the pickle built
        return _Called(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<{self.name}(...)>"


class _Called(StandIn):
    pickled_name = "(a call)"

    def __new__(cls, func: Any, args: Any, kwargs: Any) -> _Called:
        made = cast(_Called, StandIn.__new__(cls, *args, **kwargs))
        made.func = func
        return made

    func: Any


class _Data:
    """What a BUILD on one of the reader's own objects sets: kept aside, so that it cannot replace their fields."""

    pickled_state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.pickled_state = state


class Storage(_Data):
    """A storage the pickle refers to: its dtype's name and element count; its bytes are never read."""

    def __init__(self, kind: str, numel: int) -> None:
        self.kind = kind
        self.numel = numel


class Persistent(_Data):
    """A persistent id torch does not write: kept as data."""

    def __init__(self, pid: Any) -> None:
        self.pid = pid


class Tensor(_Data):
    """A tensor's place in the data: its shape and storage dtype, no values."""

    def __init__(self, kind: str | None, size: Any) -> None:
        self.kind = kind
        self._size = size  # as pickled: its whole numbers are the shape, read when asked (most never are)

    @property
    def shape(self) -> tuple[int, ...]:
        size = self._size
        return tuple(n for n in size if isinstance(n, int)) if isinstance(size, (tuple, list)) else ()

    def __repr__(self) -> str:
        return f"<tensor {self.kind or '?'} {list(self.shape)}>"


class OrderedData(dict):  # type: ignore[type-arg]
    """A collections.OrderedDict: its items (a dict keeps their order); a BUILD's state (torch's ``_metadata``)."""

    pickled_state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.pickled_state = state


def _tensor(storage: Any, offset: Any = 0, size: Any = (), *_: Any, **__: Any) -> Tensor:
    return Tensor(storage.kind if isinstance(storage, Storage) else None, size)


def _parameter(data: Any, *_: Any) -> Any:
    return data  # a Parameter is its tensor


def _from_type(func: Any, new_type: Any, args: Any, state: Any = None) -> Any:
    # only find_class makes a callable here: func is a stand-in class, so this calls nothing of the file's
    if isinstance(func, _Global) and isinstance(args, tuple):
        return func(*args)
    raise TypeError("not torch's shape")


def _ordered(*args: Any) -> OrderedData:
    return OrderedData(*args)  # () or a list of pairs: data only


def _set(items: Any = ()) -> set[Any]:
    return set(items) if isinstance(items, (list, tuple)) else set()


def _frozenset(items: Any = ()) -> frozenset[Any]:
    return frozenset(_set(items))


def _size(items: Any = ()) -> tuple[Any, ...]:
    if not isinstance(items, (list, tuple)):
        raise TypeError("not a shape")
    return tuple(items)


def _encode(text: Any, encoding: Any = "latin1") -> bytes:  # protocol 2's bytes: _codecs.encode(str, 'latin1')
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise TypeError("not protocol 2's bytes")
    return text.encode("latin1")


def _device(*args: Any) -> str:
    return ":".join(str(a) for a in args if isinstance(a, (str, int)))


# what a few names mean, as data; every other name stays a stand-in
_MEANINGS: dict[tuple[str, str], Callable[..., Any]] = {
    ("torch._utils", "_rebuild_tensor"): _tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _tensor,
    ("torch._utils", "_rebuild_tensor_v3"): _tensor,
    ("torch._utils", "_rebuild_parameter"): _parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _from_type,
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
    ("collections", "OrderedDict"): _ordered,
    ("builtins", "set"): _set, ("__builtin__", "set"): _set,
    ("builtins", "frozenset"): _frozenset, ("__builtin__", "frozenset"): _frozenset,
    ("_codecs", "encode"): _encode,
}


# The load ---------------------------------------------------------------------------------------------------

# Stand-in classes are shared by the files of one process: a class costs microseconds to make, and a fleet's files
# name the same few globals. No opcode changes a class (a BUILD, SETITEM or APPEND reaches its instances only), so
# one file cannot leave anything on another's. Bounded, so that files naming new globals by the thousand each
# cannot grow it: past the bound a file's stand-ins are its own.
_SHARED_STAND_INS: dict[tuple[str, str], _Global] = {}
_SHARED_BOUND = 4096


def _stand_in(key: tuple[str, str]) -> _Global:
    made = _Global("StandIn", (StandIn,), {"pickled_module": key[0], "pickled_name": key[1],
                                           "meaning": _MEANINGS.get(key), "__module__": __name__})
    if len(_SHARED_STAND_INS) < _SHARED_BOUND:
        _SHARED_STAND_INS[key] = made
    return made


class _Reader(pickle.Unpickler):
    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file, encoding="utf-8", errors="replace")
        self._globals: dict[tuple[str, str], _Global] = {}

    def find_class(self, module: str, name: str) -> Any:
        # nothing is imported: a class of our own that keeps the two names (Python 2's names as Python 3 reads
        # them, as the standard unpickler's fix_imports does: protocol 2 writes subprocess.Popen as commands.Popen)
        key = (str(module), str(name))
        key = _compat_pickle.NAME_MAPPING.get(key, (_compat_pickle.IMPORT_MAPPING.get(key[0], key[0]), key[1]))
        found = self._globals.get(key)
        if found is None:
            found = _SHARED_STAND_INS.get(key) or _stand_in(key)
            self._globals[key] = found
        return found

    def persistent_load(self, pid: Any) -> Any:
        # zip: ('storage', type, key, location, numel); legacy: (..., size, view_metadata)
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            kind = pid[1].pickled_name if isinstance(pid[1], _Global) else str(pid[1])
            return Storage(kind, pid[4] if isinstance(pid[4], int) else 0)
        return Persistent(pid)


def loads(data: bytes, start: int = 0) -> tuple[Any, int]:
    """The value of the pickle at ``start`` in ``data`` and where it ends; scanned against BOUNDS first."""
    stop = scan(data, start)
    try:
        return _Reader(io.BytesIO(data[start:stop] if start or stop != len(data) else data)).load(), stop
    except Unreadable:
        raise
    except Exception as error:  # a malformed pickle: the full scan's words where it has some (a skimmed pickle's
        full_scan(data, start)  # stack is not simulated), else the unpickler's own message
        raise Unreadable(f"its pickle is damaged ({type(error).__name__}: {str(error)[:200]})") from None


def load(path: str, known_regular: bool = False, directory: ZipDirectory | None = None) -> Any:
    """The data of the torch checkpoint at ``path``; raises Unreadable (NotRegular for a FIFO, device, ...).
    ``directory``, where given, is filled with the zip's members (only then is a tuple made per member)."""
    fd, status = open_fd(path, known_regular)
    try:
        with RangedFile(lambda start, end: pread(fd, start, end), status.st_size) as file:
            return load_file(file, directory)  # type: ignore[arg-type]
    finally:
        os.close(fd)


def load_file(file: IO[bytes], directory: ZipDirectory | None = None) -> Any:
    """The data of the torch checkpoint open as ``file`` (seekable), under the same bounds as ``load``; for a
    store that opens its own files (an object store's ranged reads)."""
    try:
        head = file.read(4)
        if head.startswith(b"PK"):
            return _load_zip(file, directory)
        if head[:1] == b"\x80":
            file.seek(0)
            return _load_legacy(file)
    except (OSError, EOFError) as error:
        raise Unreadable(f"cannot read it: {reason(error)}") from None
    raise Unreadable("not a torch checkpoint (neither torch's zip nor its legacy format)")


def _load_zip(file: IO[bytes], directory: ZipDirectory | None) -> Any:
    try:
        data = data_pkl(file, BOUNDS["pickle_bytes"], directory)
    except Unreadable:
        raise
    except Exception as error:  # BadZipFile, a broken local header, a CRC error, zlib's errors
        raise Unreadable(f"a damaged zip archive ({type(error).__name__}: {str(error)[:200]})") from None
    return loads(data)[0]


def _load_legacy(file: IO[bytes]) -> Any:
    # the four pickles lie at the head of the file; the storages after them are never read
    data = file.read(BOUNDS["pickle_bytes"])
    at = 0
    values = []
    for _ in range(4):
        try:
            value, at = loads(data, at)
        except EndsEarly:
            if len(data) == BOUNDS["pickle_bytes"]:  # cut by the read above, not by the file's end
                raise Unreadable(f"its pickles take more than {BOUNDS['pickle_bytes']} bytes (a bound of the "
                                 "audit): not read") from None
            raise
        values.append(value)
        if len(values) == 1 and value != LEGACY_MAGIC:
            raise Unreadable("a pickle, but not a torch checkpoint (no torch magic number)")
    return values[3]


# Plain data for the audit's report ------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """``value`` as plain JSON data: dicts with string keys, lists, strings, finite numbers, booleans, None.

    A tensor, a stand-in, bytes or a non-finite number become a string that says what it was; a set a list.
    Raises Unreadable past BOUNDS' depth or values (a deep nest, a huge list), without recursing further."""
    budget = [BOUNDS["values"]]
    return _plain(value, 0, budget)


def _plain(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise Unreadable(f"a value of more than {BOUNDS['values']} items (a bound of the audit)")
    if depth > BOUNDS["depth"]:
        raise Unreadable(f"a value nested deeper than {BOUNDS['depth']} (a bound of the audit)")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= 63 else f"<an int of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value if len(value) <= 1000 else value[:1000] + "..."
    if isinstance(value, dict):
        return {_key(k): _plain(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, depth + 1, budget) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (Tensor, StandIn, _Global)):
        return repr(value)
    return f"<{type(value).__name__}>"


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, float)) or (isinstance(key, int) and key.bit_length() <= 63):
        return str(key)
    return repr(key) if isinstance(key, (Tensor, StandIn, _Global)) else f"<{type(key).__name__}>"
