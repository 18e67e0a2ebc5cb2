"""Finding runs: each run under a PATH once, as the walk meets it, its tag folders in the order they were saved.

The walk lists each folder once (``os.scandir`` on a disk: the entries' types come with the listing, so nothing is
stat'ed to tell a folder from a file or a link; an object store's list call in a bucket) and hands each run what
it listed of its tag folders (``stores``), so that reading the run lists nothing again. A run is yielded as soon as
the folder holding it has been walked, so the first run is out long before the last folder is listed, and nothing
is kept of a run once it is yielded.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath

from ... import binding
from . import stores
from .checkpoint_pickle import Unreadable
from .stores import LOCAL, Entry, Listing, Place, Store

LATEST_BYTES = 4096  # the bound of a save folder's `latest`
# the rank files an engine writes per tag, as the writer of the record binds them (one pattern for both)
_MODEL_STATES = binding.MODEL_STATES
# one save of a run that saves many: the HF Trainer's checkpoint-N, accelerate's automatic checkpoint_N
_SAVE_ROUND = re.compile(r"^checkpoint[-_](\d+)$")
# DeepSpeed's own tag names, one sequence per engine; any other tag (accelerate's pytorch_model, pytorch_model_1
# for two prepared models) is an engine of its own
_STEP_TAG = re.compile(r"^global_step(\d+)$")
STEP_ENGINE = "global_step*"  # the engine field of a run's global_step<N> tags, beside other engines


class NoRun(Exception):
    """A PATH that holds no DeepSpeed checkpoint, or cannot be read at all."""


@dataclass(frozen=True)
class Run:
    path: PurePath  # the run: the folder named, a save folder (with ``latest``), or a Trainer output folder
    tags: tuple[PurePath, ...]  # its tag folders, earliest save first, newest last
    notes: tuple[str, ...] = ()  # what finding it met: a `latest` that is not a regular file, say
    engine: str | None = None  # which engine, where the run's folder holds the saves of several
    store: Store = field(default=LOCAL, compare=False)  # where its files are read, with what the walk listed
    # the other engines' tags in the same folder: a tag name is not proof of which engine saved it (saves.py weighs
    # those whose model is this engine's, epoch1..epoch4 across an upgrade say)
    siblings: tuple[PurePath, ...] = ()
    # the tags a `latest_universal` beside them names: ds_to_universal's output, a copy of another save's model states
    universal: tuple[PurePath, ...] = ()

    @property
    def tag(self) -> PurePath:
        return self.tags[-1]


@dataclass(frozen=True)
class Unsearched:
    """A folder under a PATH that could not be listed: a run in it, if any, was not audited."""

    path: PurePath
    why: str


@dataclass(frozen=True)
class Symlinked:
    """A symlink to a folder under a PATH: not followed (so a link loop ends); named as a PATH, it is audited."""

    path: PurePath


def _reason(error: OSError) -> str:
    return error.strerror.lower() if isinstance(error, OSError) and error.strerror else str(error)


def model_states(tag: PurePath, store: Store = LOCAL) -> PurePath | None:
    """The rank-0 model-states file of a tag folder (every rank's holds the same config and scheduler)."""
    try:
        name = binding.lowest_ranked(store.names(tag))
    except OSError:
        return None
    return tag / name if name is not None else None


def walk(path: str, exclude: Sequence[str] = ()) -> Iterator[Run | Unsearched | Symlinked]:
    """Each run under ``path`` (a folder, or an fsspec URL) once, with its tags (a tag folder named is that tag
    alone), and each folder under it that could not be listed or is a symlink, as the walk meets them. Raises
    NoRun, before yielding anything, for a PATH that is missing, not a folder or unlistable, and after the walk
    for one that held nothing. Folders matching an ``exclude`` glob (by name, or by path under ``path``) are not
    entered."""
    where = stores.place(path)
    root = where.root
    try:
        where.check_root()
    except stores.NotAFolder:
        raise NoRun(f"{path}: not a folder (give a checkpoint folder, a tag folder or a folder of runs)") from None
    except OSError as error:
        raise NoRun(f"{path}: {_reason(error)}") from None
    try:
        entries = where.entries(root)
    except OSError as error:
        raise NoRun(f"{path}: cannot list it: {_reason(error)}") from None
    files = _files(entries)
    if any(_MODEL_STATES.match(name) for name in files):
        yield Run(root, (root,), store=where.store({str(root): files}))
        return
    walker = _Walk(where, tuple(exclude))
    yielded = False
    for item in walker.folder(root, entries):
        yielded = True
        yield item
    if not yielded:
        raise NoRun(f"{path}: no DeepSpeed checkpoint in it (no *model_states.pt in any folder)")


def _files(entries: list[Entry]) -> Listing:
    return {entry.name: entry for entry in entries if entry.kind not in (stores.FOLDER, stores.LINKED_FOLDER)}


@dataclass
class _Save:
    """A save folder's tags (earliest first) with their listings, and what reading its ``latest`` met."""

    round: int
    tags: list[tuple[PurePath, Listing]]
    notes: list[str]
    universal: PurePath | None = None  # the tag its `latest_universal` names (ds_to_universal's output)


class _Walk:
    def __init__(self, where: Place, exclude: tuple[str, ...]) -> None:
        self.where, self.root, self.exclude = where, where.root, exclude
        self.listed: dict[str, list[Entry]] = {}  # folders a recursive listing already gave, until walked

    def _entries(self, folder: PurePath) -> list[Entry]:
        listed = self.listed.pop(str(folder), None)
        return listed if listed is not None else self.where.entries(folder)

    def _excluded(self, folder: PurePath) -> bool:
        relative = str(folder)[len(str(self.root)):].lstrip("/")
        return any(fnmatch.fnmatchcase(folder.name, glob) or fnmatch.fnmatchcase(relative, glob)
                   for glob in self.exclude)

    def _list_below(self, folder: PurePath) -> None:
        """The saves of a Trainer output in one listing, where the place has one; if it fails, each folder is
        listed on its own and says what it met."""
        try:
            below = self.where.tree(folder) or {}
        except OSError:
            return
        below.pop(str(folder), None)  # listed already
        self.listed.update(below)

    def folder(self, folder: PurePath, entries: list[Entry]) -> Generator[
            Run | Unsearched | Symlinked, None, _Save | None]:
        """Walks ``folder`` (listed as ``entries``): yields the runs under it; returns its own save when it is
        a ``checkpoint-N`` save of a run above it, which the parent reports with its other saves."""
        tags: list[tuple[PurePath, Listing]] = []
        rounds: list[_Save] = []
        if str(folder) not in self.listed and any(e.kind == stores.FOLDER and _SAVE_ROUND.match(e.name)
                                                  for e in entries):
            self._list_below(folder)
        for entry in entries:
            if entry.kind == stores.LINKED_FOLDER:
                yield Symlinked(folder / entry.name)
                continue
            if entry.kind != stores.FOLDER:
                continue
            child = folder / entry.name
            if self._excluded(child):
                continue
            try:
                listing = self._entries(child)
            except OSError as error:
                yield Unsearched(child, f"cannot list it: {_reason(error)} (a run in it, if any, was not audited)")
                continue
            files = _files(listing)
            if any(_MODEL_STATES.match(name) for name in files):
                tags.append((child, files))  # a tag holds no other run: not entered
                continue
            save = yield from self.folder(child, listing)
            if save is not None:
                rounds.append(save)
        own = _in_order(self.where, folder, tags, entries) if tags else None
        round_ = _SAVE_ROUND.match(folder.name)
        handed = None
        if own is not None and round_ and folder != self.root:  # the Trainer's checkpoint-N: the run is above
            handed, own = _Save(int(round_.group(1)), own.tags, own.notes, own.universal), None
        saves = ([own] if own is not None else []) + sorted(rounds, key=lambda save: save.round)
        if saves:
            yield from _runs(self.where, folder, saves)
        return handed


def _runs(where: Place, folder: PurePath, saves: list[_Save]) -> Iterator[Run]:
    """The run in ``folder``, one per engine: DeepSpeed's global_step<N> tags are one engine's saves over time,
    any other tag name (accelerate's pytorch_model, pytorch_model_1) an engine of its own, judged on its own."""
    engines: dict[str | None, list[tuple[PurePath, Listing]]] = {}
    for save in saves:
        for tag, listing in save.tags:
            engines.setdefault(None if _STEP_TAG.match(tag.name) else tag.name, []).append((tag, listing))
    notes = tuple(note for save in saves for note in save.notes)
    universal = tuple(save.universal for save in saves if save.universal is not None)
    several = len(engines) > 1
    every = [item for its in engines.values() for item in its]
    for engine in sorted(engines, key=lambda name: (name is not None, name or "")):
        its = engines[engine]
        store = where.store({str(tag): listing for tag, listing in (every if several else its)})
        own = {tag for tag, _ in its}
        siblings = tuple(tag for tag, _ in every if tag not in own)
        yield Run(folder, tuple(tag for tag, _ in its), notes,
                  (engine or STEP_ENGINE) if several else None, store, siblings, universal)


def _in_order(where: Place, save: PurePath, tags: list[tuple[PurePath, Listing]], entries: list[Entry]) -> _Save:
    """A save folder's tags, earliest first, and the tag its ``latest_universal`` names, if any."""
    found = _ordered(where, save, tags, entries)
    universal = next((entry for entry in entries if entry.name == LATEST_UNIVERSAL), None)
    if universal is not None:
        store = where.store({str(save): {LATEST_UNIVERSAL: universal}})
        try:
            named = store.read_capped(save / LATEST_UNIVERSAL, LATEST_BYTES).decode("utf-8").strip()
        except (Unreadable, UnicodeDecodeError):
            named = ""
        found.universal = next((tag for tag, _ in tags if named and tag == save / named), None)
    return found


# ds_to_universal writes it beside its output folder, naming it (checkpoint/ds_to_universal.py @ v0.15.2, v0.19.8)
LATEST_UNIVERSAL = "latest_universal"


def _ordered(where: Place, save: PurePath, tags: list[tuple[PurePath, Listing]], entries: list[Entry]) -> _Save:
    """A save folder's tags, earliest first; the newest is the one ``latest`` names (what DeepSpeed resumes from),
    else the highest step number."""
    ordered = sorted(tags, key=lambda tag: _order(tag[0]))
    notes: list[str] = []
    latest = next((entry for entry in entries if entry.name == "latest"), None)
    if latest is None or (len(tags) == 1 and not where.reads_every_latest):
        return _Save(0, ordered, notes)
    store = where.store({str(save): {"latest": latest}})
    try:
        named = store.read_capped(save / "latest", LATEST_BYTES).decode("utf-8").strip()
    except (Unreadable, UnicodeDecodeError) as error:
        notes.append(f"{save / 'latest'}: {error}: ignored, the newest tag is the highest step")
        return _Save(0, ordered, notes)
    found = next((tag for tag in ordered if tag[0] == save / named), None)
    if found is not None:
        ordered.remove(found)
        ordered.append(found)
    else:  # DeepSpeed's load_checkpoint would look for that tag and not find it
        notes.append(f"{save / 'latest'} names {named!r}, which holds no model-states file here: ignored, the "
                     "newest tag is the highest step")
    return _Save(0, ordered, notes)


def _order(tag: PurePath) -> tuple[int, str]:
    number = re.search(r"(\d+)$", tag.name)
    return (int(number.group(1)) if number else -1, tag.name)
