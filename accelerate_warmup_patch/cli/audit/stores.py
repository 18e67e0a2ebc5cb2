"""Where a run's files are read from: the local file system here, an object store through fsspec (``fsspec_store``).

A store is handed to each run by the walk that found it, holding what the walk already listed of the run's tag
folders, so that reading a save neither lists its folder again nor asks whether the record is there: on a
network file system every call is a round trip. Every read goes through ``checkpoint_pickle``'s bounds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, Protocol

from . import checkpoint_pickle


class Store(Protocol):
    """What reading a save needs of the place its files are in."""

    def names(self, folder: PurePath) -> list[str]:
        """The names in ``folder`` (raises OSError when it cannot be listed)."""

    def exists(self, path: PurePath) -> bool:
        """Whether there is anything named ``path`` (a link, a FIFO and a broken link count)."""

    def read_capped(self, path: PurePath, cap: int) -> bytes:
        """The bytes of the regular file ``path``; raises Unreadable past ``cap`` or for anything else."""

    def load(self, path: PurePath) -> Any:
        """The data of the torch checkpoint ``path`` (``checkpoint_pickle``'s reader and bounds)."""


class LocalStore:
    """The local file system, with what the walk listed: per folder, each name and whether it was a regular file
    (not a link). A folder the walk did not list is listed here; a name it saw as a regular file is opened
    without a stat first (``checkpoint_pickle.open_regular``'s fstat still checks it)."""

    def __init__(self, listed: Mapping[str, Mapping[str, bool]] | None = None) -> None:
        self._listed = dict(listed or {})

    def names(self, folder: PurePath) -> list[str]:
        listed = self._listed.get(str(folder))
        return list(listed) if listed is not None else os.listdir(folder)

    def exists(self, path: PurePath) -> bool:
        listed = self._listed.get(str(path.parent))
        return path.name in listed if listed is not None else os.path.lexists(path)

    def _regular(self, path: PurePath) -> bool:
        return bool(self._listed.get(str(path.parent), {}).get(path.name))

    def read_capped(self, path: PurePath, cap: int) -> bytes:
        return checkpoint_pickle.read_capped(str(path), cap, self._regular(path))

    def load(self, path: PurePath) -> Any:
        return checkpoint_pickle.load(str(path), self._regular(path))


LOCAL = LocalStore()  # lists what it reads itself: for a save no walk found
