"""Where the runs are: the local file system, or an object store through fsspec (any fsspec URL: ``s3://``,
``gs://``, ``az://``...; fsspec and the store's own package, e.g. from the ``[s3]`` or ``[gcs]`` extra, are imported
only for such a PATH, never by the training-time patch).

A place lists folders for the walk (``entries``) and gives each run a store (``store``) holding what the walk
listed of the run's tag folders, so that reading a save neither lists its folder again nor asks whether the
record is there: on a network file system or an object store every call is a round trip. Every read goes through
``checkpoint_pickle``'s bounds. On an object store a model-states file is read with two ranged requests (its last
64 KiB: the zip's end records and central directory; then the ``data.pkl`` member near its start), never whole.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, NamedTuple, Protocol

from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable

FOLDER, FILE, LINKED_FOLDER, OTHER = "folder", "file", "linked folder", "other"


class Entry(NamedTuple):  # a tuple: a fleet's walk makes millions of them
    """One name in a folder's listing: a folder, a regular file (with its size where the listing says it), a
    symlink to a folder, or anything else (a FIFO, a device, a link to a file or to nothing)."""

    name: str
    kind: str
    size: int | None = None


Listing = Mapping[str, Entry]  # a folder's names other than folders


class Store(Protocol):
    """What reading a save needs of the place its files are in."""

    def names(self, folder: PurePath) -> list[str]:
        """The names in ``folder`` (raises OSError when it cannot be listed)."""

    def exists(self, path: PurePath) -> bool:
        """Whether there is anything named ``path`` (a link, a FIFO and a broken link count)."""

    def read_capped(self, path: PurePath, cap: int) -> bytes:
        """The bytes of the regular file ``path``; raises Unreadable past ``cap`` or for anything else."""

    def load(self, path: PurePath, directory: checkpoint_pickle.ZipDirectory | None = None) -> Any:
        """The data of the torch checkpoint ``path`` (``checkpoint_pickle``'s reader and bounds); ``directory``,
        where given, gets its zip's members (what a record is bound to)."""

    def directory(self, path: PurePath) -> checkpoint_pickle.ZipDirectory:
        """The size and zip members of ``path`` from its central directory alone (``checkpoint_pickle``'s bounds);
        raises Unreadable."""


class Place(Protocol):
    """Where a PATH's runs are: its root, a folder's entries, and a run's store."""

    root: PurePath

    def check_root(self) -> None:
        """Raises OSError (or NotAFolder) when the root is missing or not a folder."""

    def entries(self, folder: PurePath) -> list[Entry]:
        """A folder's entries, sorted by name; raises OSError when it cannot be listed."""

    def store(self, listed: Mapping[str, Listing]) -> Store:
        """A run's store, with what the walk listed of its tag folders (by the folder's path)."""

    def tree(self, folder: PurePath) -> dict[str, list[Entry]] | None:
        """Every folder under ``folder`` with its entries, from one recursive listing where the place has one
        that costs less than a listing per folder (an object store's); else None."""

    reads_every_latest: bool  # False: `latest` is read only where a save folder holds several tags


class NotAFolder(Exception):
    pass


def place(path: str) -> Place:
    """The place a PATH names: an fsspec URL (``scheme://...``, not ``file://``), else the local file system."""
    scheme, sep, _ = path.partition("://")
    if sep and scheme.isidentifier() and scheme != "file":
        return FsspecPlace(path)
    return LocalPlace(path[len("file://"):] if path.startswith("file://") else path)


# The local file system -----------------------------------------------------------------------------------------

def _local_kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        try:
            return LINKED_FOLDER if entry.is_dir() else OTHER  # follows the link: a dangling link is no folder
        except OSError:  # a link loop
            return OTHER
    if entry.is_dir(follow_symlinks=False):
        return FOLDER
    return FILE if entry.is_file(follow_symlinks=False) else OTHER


class LocalPlace:
    def __init__(self, path: str) -> None:
        self.root: PurePath = Path(path)

    def check_root(self) -> None:
        if not stat.S_ISDIR(os.stat(self.root).st_mode):  # missing, a loop, no permission: its own OSError
            raise NotAFolder

    def entries(self, folder: PurePath) -> list[Entry]:
        with os.scandir(folder) as listing:
            return sorted((Entry(e.name, _local_kind(e)) for e in listing), key=lambda entry: entry.name)

    def store(self, listed: Mapping[str, Listing]) -> Store:
        return LocalStore(listed)

    def tree(self, folder: PurePath) -> dict[str, list[Entry]] | None:
        return None  # a listing per folder is what a file system has

    reads_every_latest = True  # a call is cheap here, and a `latest` that is no regular file is worth its note


class LocalStore:
    """The local file system, with what the walk listed. A folder the walk did not list is listed here; a name it
    saw as a regular file is opened without a stat first (``checkpoint_pickle.open_regular``'s fstat still
    checks it)."""

    def __init__(self, listed: Mapping[str, Listing] | None = None) -> None:
        self._listed = dict(listed or {})

    def _entry(self, path: PurePath) -> Entry | None:
        listing = self._listed.get(str(path.parent))
        return None if listing is None else listing.get(path.name)

    def names(self, folder: PurePath) -> list[str]:
        listing = self._listed.get(str(folder))
        return list(listing) if listing is not None else os.listdir(folder)

    def exists(self, path: PurePath) -> bool:
        if str(path.parent) in self._listed:
            return self._entry(path) is not None
        return os.path.lexists(path)

    def _regular(self, path: PurePath) -> bool:
        entry = self._entry(path)
        return entry is not None and entry.kind == FILE

    def read_capped(self, path: PurePath, cap: int) -> bytes:
        return checkpoint_pickle.read_capped(str(path), cap, self._regular(path))

    def load(self, path: PurePath, directory: checkpoint_pickle.ZipDirectory | None = None) -> Any:
        return checkpoint_pickle.load(str(path), self._regular(path), directory)

    def directory(self, path: PurePath) -> checkpoint_pickle.ZipDirectory:
        return checkpoint_pickle.zip_directory(str(path), self._regular(path))


LOCAL = LocalStore()  # lists what it reads itself: for a save no walk found


# Object stores, through fsspec -----------------------------------------------------------------------------------

class UrlPath(PurePosixPath):
    """A path in an object store, written as its URL (``s3://bucket/key``); the bucket and key are a posix path."""

    scheme = "s3"

    def __str__(self) -> str:
        return f"{self.scheme}://{super().__str__()}"

    def __reduce__(self) -> tuple[Any, ...]:  # --jobs hands runs to other processes
        return (url_path, (self.scheme, super().__str__()))


_URL_TYPES: dict[str, type[UrlPath]] = {}


def url_path(scheme: str, path: str) -> UrlPath:
    """``scheme://path`` as a path (each scheme its own class, so that a derived path keeps it)."""
    kind = _URL_TYPES.get(scheme)
    if kind is None:
        kind = _URL_TYPES[scheme] = type(f"UrlPath_{scheme}", (UrlPath,), {"scheme": scheme})
    return kind(path)


# the package fsspec needs for a scheme (fsspec's own registry, which is not importable without fsspec), and the
# extra of pyproject.toml that installs it with fsspec, where there is one
_STORE_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
                   "abfss": "adlfs"}
_EXTRAS = {"s3fs": "s3", "gcsfs": "gcs"}


def install_hint(scheme: str) -> str:
    """What to install for ``scheme://`` PATHs, in words that work for a package that is not on PyPI."""
    package = _STORE_PACKAGES.get(scheme)
    if package is None:
        return f"pip install fsspec and the package fsspec's registry names for {scheme}://"
    extra = _EXTRAS.get(package)
    also = f" (the [{extra}] extra: pip install '<the wheel or the clone>[{extra}]')" if extra else ""
    return f"pip install fsspec {package}{also}"


def _why(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:300] if not isinstance(error, OSError) else str(text)[:300].lower()


class FsspecPlace:
    """An object store (or any fsspec file system) named by a URL. Listing is the store's own list call, one per
    folder (a prefix and its delimiter on S3), with sizes, so no file is asked about on its own."""

    def __init__(self, url: str) -> None:
        self.root: PurePath
        try:
            import fsspec
        except ImportError:
            self.fs: Any = None
            self.root = url_path(url.partition("://")[0], url.partition("://")[2].rstrip("/"))
            return
        scheme = url.partition("://")[0]
        self.fs, path = fsspec.core.url_to_fs(url)
        self.root = url_path(scheme, path.rstrip("/"))

    def _path(self, path: PurePath) -> str:
        return PurePosixPath.__str__(path)  # the bucket and key, as the file system takes them

    def check_root(self) -> None:
        if self.fs is None:
            scheme = self.root.scheme if isinstance(self.root, UrlPath) else "?"
            raise OSError(f"{scheme}:// needs fsspec and the store's package: {install_hint(scheme)}")
        # the first listing (entries) says whether it is there; a key that is a file is not a folder
        try:
            info = self.fs.info(self._path(self.root))
        except FileNotFoundError:
            raise
        except Exception as error:  # no credentials, no bucket, a timeout: the PATH's line
            raise OSError(_why(error)) from None
        if info.get("type") != "directory":
            raise NotAFolder

    def entries(self, folder: PurePath) -> list[Entry]:
        try:
            listed = self.fs.ls(self._path(folder), detail=True)
        except Exception as error:
            raise OSError(_why(error)) from None
        entries = []
        itself = self._path(folder)
        for info in listed:
            full = str(info.get("name", "")).rstrip("/")
            name = full.rpartition("/")[2]
            if not name or full == itself:  # a "folder/" placeholder key
                continue
            if info.get("type") == "directory":
                entries.append(Entry(name, FOLDER))
            else:
                size = info.get("size")
                entries.append(Entry(name, FILE, size if isinstance(size, int) else None))
        return sorted(entries, key=lambda entry: entry.name)

    def store(self, listed: Mapping[str, Listing]) -> Store:
        return FsspecStore(self.fs, listed)

    def tree(self, folder: PurePath) -> dict[str, list[Entry]] | None:
        """One recursive listing (no delimiter: a request per 1,000 keys): for a Trainer output, whose saves would
        otherwise cost two listings each."""
        try:
            found = self.fs.find(self._path(folder), detail=True)
        except Exception as error:
            raise OSError(_why(error)) from None
        base = self._path(folder)
        folders: dict[str, dict[str, Entry]] = {str(folder): {}}
        for name, info in found.items():
            parts = str(name)[len(base):].strip("/").split("/")
            if not parts[-1]:
                continue
            at = folder
            for part in parts[:-1]:
                folders.setdefault(str(at), {})[part] = Entry(part, FOLDER)
                at = at / part
                folders.setdefault(str(at), {})
            size = info.get("size") if isinstance(info, dict) else None
            folders.setdefault(str(at), {})[parts[-1]] = Entry(parts[-1], FILE, size if isinstance(size, int) else None)
        return {key: sorted(entries.values(), key=lambda entry: entry.name) for key, entries in folders.items()}

    reads_every_latest = False  # a request each: read where it decides which tag is the newest


class FsspecStore:
    """A run's files in an object store: small files in one request each, a model-states file in two ranged
    ones. Any error of the store (no credentials, a timeout, a missing key) is that file's Unreadable."""

    def __init__(self, fs: Any, listed: Mapping[str, Listing]) -> None:
        self.fs = fs
        self._listed = dict(listed)
        self.requests = 0  # counted for the benchmark: the calls this store made
        self.bytes = 0

    def _entry(self, path: PurePath) -> Entry | None:
        listing = self._listed.get(str(path.parent))
        return None if listing is None else listing.get(path.name)

    def names(self, folder: PurePath) -> list[str]:
        listing = self._listed.get(str(folder))
        if listing is None:
            self.requests += 1
            try:
                return [str(name).rstrip("/").rpartition("/")[2] for name in self.fs.ls(PurePosixPath.__str__(folder))]
            except Exception as error:
                raise OSError(_why(error)) from None
        return list(listing)

    def exists(self, path: PurePath) -> bool:
        if str(path.parent) in self._listed:
            return self._entry(path) is not None
        self.requests += 1
        try:
            return bool(self.fs.exists(PurePosixPath.__str__(path)))
        except Exception:
            return False

    def read_range(self, path: PurePath, start: int, end: int) -> bytes:
        self.requests += 1
        try:
            data = bytes(self.fs.cat_file(PurePosixPath.__str__(path), start=start, end=end))
        except Exception as error:
            raise Unreadable(f"cannot read it: {_why(error)}") from None
        self.bytes += len(data)
        return data

    def size(self, path: PurePath) -> int:
        entry = self._entry(path)
        if entry is not None and entry.size is not None:
            return entry.size
        self.requests += 1
        try:
            return int(self.fs.size(PurePosixPath.__str__(path)))
        except Exception as error:
            raise Unreadable(f"cannot read it: {_why(error)}") from None

    def read_capped(self, path: PurePath, cap: int) -> bytes:
        size = self.size(path)
        if size > cap:
            raise Unreadable(f"holds more than {cap} bytes (the bound for this file): not read")
        data = self.read_range(path, 0, size) if size else b""
        if len(data) > cap:
            raise Unreadable(f"holds more than {cap} bytes (the bound for this file): not read")
        return data

    def load(self, path: PurePath, directory: checkpoint_pickle.ZipDirectory | None = None) -> Any:
        size = self.size(path)
        with checkpoint_pickle.RangedFile(lambda start, end: self.read_range(path, start, end), size) as file:
            return checkpoint_pickle.load_file(file, directory)  # type: ignore[arg-type]

    def directory(self, path: PurePath) -> checkpoint_pickle.ZipDirectory:
        size = self.size(path)
        with checkpoint_pickle.RangedFile(lambda start, end: self.read_range(path, start, end), size) as file:
            return checkpoint_pickle.zip_directory_of(file)  # type: ignore[arg-type]
