"""What this job wrote itself in a save, so that the record is bound only to its own bytes (record_writer.py).

A record binds what its writer reads back after save_checkpoint returned. Another job saving the same tag at the
same moment may have written the files in between. So, during a save, every armed process notes each states file
as its own torch.save left it (the checkpoint engine's save, wrapped: targets.py). The record's writer keeps its
notes; every other rank tells the writer its notes through the store that torch.distributed set up for this job
(a key-value store its ranks share and no other job reaches: a ``set`` and a ``check``, no collective, so a rank
that is not armed cannot make the job wait). The record is bound only where every states file it binds was
written by this job and still holds those bytes when read back (docs/mark.md, "A race").
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import binding, bounded, torch_file
from .state import STATE

Stamp = binding.Stamp
KEY = "accelerate_warmup_patch/own_write/"  # the store's keys: this prefix, then the node (or ""), then the path


@dataclass
class SaveNotes:
    """One save's own writes in this process, and how the ranks that do not write the record tell the one that does."""

    writer: bool  # this process writes the save's record
    kv: Any = None  # torch.distributed's store of this job, where it has several ranks (job_kv)
    node: str = ""  # "<host>:" where each node saves into a tag folder of its own, so that equal paths stay apart
    writes: dict[str, Stamp] = field(default_factory=dict)  # absolute path -> its stamp right after the own write
    told: dict[str, Stamp | None] = field(default_factory=dict)  # the writer's: what the other ranks told it
    budget: bounded.Budget = field(default_factory=bounded.Budget)  # this save's time for the store (bounded.py)
    save: str = ""  # the save's name, alike on every rank (attest.save_id), once the save has begun
    # absolute path -> its zip directory as read right after the own write (with its identity), so that the writer's
    # binding reads it no second time (binding.read_back_known)
    directories: dict[str, torch_file.ZipDirectory] = field(default_factory=dict)
    read: Any = None  # the writer's: its binding's read of the tag folder (binding.ReadBack), for the write
    identities: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the writer's: each told file's identity

    def key(self, path: str) -> str:
        return f"{KEY}{self.node}{path}"


def notes_of_save(writer: bool, node_local: bool) -> SaveNotes:
    """The notes of a save about to run, in a process that writes its record (``writer``) or a rank of its job."""
    return SaveNotes(writer, job_kv(), f"{socket.gethostname()}:" if node_local else "")


def job_kv() -> Any:
    """The store torch.distributed's default process group was set up with, where it has several ranks; else None.

    ``distributed_c10d._get_default_store`` is torch's own name for it (read in torch 2.13), not a public one: it
    is asked by name and, where a torch lacks it, the other ranks' files stay untold and the record unbound.
    """
    distributed = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if distributed is None or not distributed.is_available() or not distributed.is_initialized():
            return None
        if distributed.get_world_size() < 2:
            return None
        return distributed.distributed_c10d._get_default_store()
    except Exception:
        return None


@contextlib.contextmanager
def saving(this: SaveNotes | None) -> Iterator[SaveNotes | None]:
    """While it is open, this thread's own writes of states files are noted in ``this`` (None: not watched)."""
    if this is None:
        yield None
        return
    STATE.saving.notes = this
    try:
        yield this
    finally:
        STATE.saving.notes = None


def own_write_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``TorchCheckpointEngine.save(state_dict, path)``: the original first, its result returned unchanged; then,
    in a watched save, the file's stamp as this process's write left it (one read of its zip central directory,
    never the weights), told to the record's writer where this process is another rank."""
    result = wrapped(*args, **kwargs)
    this = getattr(STATE.saving, "notes", None)
    if this is not None:
        path = kwargs.get("path", args[1] if len(args) > 1 else None)
        if isinstance(path, str):
            where = os.path.abspath(path)
            this.writes[where] = _noted(this, where)  # never raises: a stamp of "?" at worst
            if not this.writer:
                _tell(this, where, this.writes[where])
    return result


def _noted(this: SaveNotes, path: str) -> Stamp:
    """``path``'s stamp as this process's own write left it (binding.file_stamp's), its zip directory kept."""
    try:
        found = torch_file.zip_directory(path, known_regular=True)  # just written by torch.save: fstat checks it
    except (OSError, torch_file.Unreadable):
        return -1, binding.UNREADABLE
    this.directories[path] = found
    return found.size, binding.members_digest(found.members) if found.zip else None


def known(this: SaveNotes | None, folder: str) -> dict[str, torch_file.ZipDirectory]:
    """The zip directories this process read of its own writes into ``folder``, by name."""
    here = os.path.abspath(folder)
    return {} if this is None else {os.path.basename(path): found for path, found in this.directories.items()
                                    if os.path.dirname(path) == here}


def noted_in(this: SaveNotes | None, folder: str) -> dict[str, tuple[torch_file.ZipDirectory, Stamp]]:
    """The zip directory and stamp of each of this process's own writes into ``folder`` that it read, by name."""
    here = os.path.abspath(folder)
    return {} if this is None else {os.path.basename(path): (found, this.writes[path])
                                    for path, found in this.directories.items() if os.path.dirname(path) == here}


def told_stamps(this: SaveNotes | None, folder: str, names: list[str]) -> dict[str, tuple[Stamp, tuple[int, ...]]]:
    """What the other ranks told of the files ``names`` in ``folder`` in this save, each with the identity its own
    read saw (asked at once: ask_all), so that the writer's binding takes them without reading them again; a file
    told without one is left out."""
    if this is None:
        return {}
    paths = {name: os.path.join(os.path.abspath(folder), name) for name in names}
    ask_all(this, list(paths.values()))
    found = {name: (this.told.get(path), this.identities.get(path)) for name, path in paths.items()}
    return {name: (stamp, identity) for name, (stamp, identity) in found.items() if stamp is not None and identity}


def all_read(this: SaveNotes | None, folder: str) -> bool:
    """Whether this process wrote states files into ``folder`` in this save and read each one's zip directory."""
    if this is None:
        return False
    here = os.path.abspath(folder)
    mine = [path for path in this.writes if os.path.dirname(path) == here]
    return bool(mine) and all(path in this.directories for path in mine)


def _tell(this: SaveNotes, path: str, stamp: Stamp) -> None:
    """Put this rank's stamp of ``path`` in the job's store, before save_checkpoint's closing barrier, so that it is
    there when the writer looks after that barrier. Never raises: an untold file leaves the record unbound."""
    if this.kv is None:
        return
    key, kv = this.key(path), this.kv
    found = this.directories.get(path)
    identity = ",".join(str(part) for part in found.identity) if found is not None else ""
    value = f"{stamp[0]}\0{stamp[1] or '-'}\0{identity}"  # the identity lets the writer stat it, not read it again

    def tell() -> None:
        kv.set(key, value)
        kv.check([key])  # answered after the set on the same connection: the store holds it now

    with contextlib.suppress(Exception):  # bounded.Late too: the writer finds it untold
        bounded.call(this.budget, "a rank's tell of its file", tell)


def _asked(this: SaveNotes, path: str) -> Stamp | None:
    """What a rank of this job told about ``path`` in this save, or None (it told nothing, or cannot be asked)."""
    if this.kv is None:
        return None
    key, kv = this.key(path), this.kv

    def ask() -> Any:
        if not kv.check([key]):  # never ``get`` a missing key: it waits for it
            return None
        value = kv.get(key)
        with contextlib.suppress(Exception):  # the next save of this tag tells it again
            kv.delete_key(key)
        return value

    try:
        return _parsed(this, path, bounded.call(this.budget, "the writer's ask for a rank's file", ask))
    except Exception:
        return None


def _parsed(this: SaveNotes, path: str, value: Any) -> Stamp | None:
    """A told value as its stamp (its identity kept in ``this.identities``); None for none, or one not ours."""
    if value is None:
        return None
    try:
        size, digest, identity = bytes(value).decode("utf-8", "surrogateescape").split("\0")
        if identity:
            this.identities[path] = tuple(int(part) for part in identity.split(","))
        return int(size), None if digest == "-" else digest
    except ValueError:
        return None


def ask_all(this: SaveNotes, paths: list[str]) -> None:
    """Ask what the other ranks told of ``paths`` (those this process did not write and has not asked) in one bounded
    call: a ``check`` of them all and a ``multi_get`` (a ``check`` each only where some are missing), then each key
    removed; what is not there, or not asked in time, stays untold."""
    wanted = [path for path in paths if path not in this.writes and path not in this.told]
    got: dict[str, Any] = {}
    if wanted and this.kv is not None:
        kv, keys = this.kv, [this.key(path) for path in wanted]

        def ask() -> dict[str, Any]:
            present = keys if kv.check(keys) else [key for key in keys if kv.check([key])]
            many = getattr(kv, "multi_get", None)
            values = many(present) if callable(many) and present else [kv.get(key) for key in present]
            for key in present:
                with contextlib.suppress(Exception):  # the next save of this tag tells it again
                    kv.delete_key(key)
            return dict(zip(present, values))

        with contextlib.suppress(Exception):
            got = bounded.call(this.budget, "the writer's ask for the ranks' files", ask)
    for path in wanted:
        this.told[path] = _parsed(this, path, got.get(this.key(path)))


def _written(this: SaveNotes, path: str) -> Stamp | None:
    """This job's stamp of ``path`` in this save: this process's own, else the one another rank told (asked once)."""
    if path in this.writes:
        return this.writes[path]
    if path not in this.told:
        this.told[path] = _asked(this, path)
    return this.told[path]


def rewritten_since(folder: str, this: SaveNotes | None, now: dict[str, Stamp]) -> str | None:
    """Why the states files a record in ``folder`` binds (``now``: each one's stamp as read back, binding.read_back)
    are not the bytes this job's save wrote (another job saved into the same tag, or a file was written by no process
    of this job that was watched); None where each of them holds this job's own bytes."""
    if this is None:
        return "this process's own writes of the save were not watched"
    here = os.path.abspath(folder)
    written = {name: _written(this, os.path.join(here, name)) for name in now}
    untold = sorted(name for name, stamp in written.items() if stamp is None)
    if untold:
        late = f"; {this.budget.given_up}" if this.budget.given_up else ""
        return (f"{_named(untold)}: written by no process of this job that the patch watched in this save (a rank "
                "not armed, or with records off, or one this process cannot ask), so this save's bytes cannot be "
                f"told from another job's{late}")
    changed = binding.rewritten({name: stamp for name, stamp in written.items() if stamp is not None}, now)
    if not changed:
        return None
    return (f"{_named(changed)}: not the bytes this job wrote in this save: another job saved into the same tag "
            "folder at the same moment, and the files are not known to be this run's")


def _named(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
