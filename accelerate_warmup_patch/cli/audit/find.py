"""Finding runs: each run under a PATH once, its tag folders in the order they were saved."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import checkpoint_pickle
from .checkpoint_pickle import Unreadable
from .verdicts import SKIPPED, UNREADABLE

LATEST_BYTES = 4096  # the bound of a save folder's `latest`
# the rank files an engine writes per tag: mp_rank_00_model_states.pt, zero_pp_rank_0_mp_rank_00_model_states.pt
_MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
# one save of a run that saves many: the HF Trainer's checkpoint-N, accelerate's automatic checkpoint_N
_SAVE_ROUND = re.compile(r"^checkpoint[-_](\d+)$")


class NoRun(Exception):
    """A PATH that holds no DeepSpeed checkpoint, or cannot be read at all."""


@dataclass(frozen=True)
class Run:
    path: Path  # the run: the folder named, a save folder (with ``latest``), or a Trainer output folder
    tags: tuple[Path, ...]  # its tag folders, earliest save first, newest last
    notes: tuple[str, ...] = ()  # what finding it met: a `latest` that is not a regular file, say

    @property
    def tag(self) -> Path:
        return self.tags[-1]


@dataclass
class Found:
    """What a PATH holds: its runs, and the folders under it that were not searched (path, verdict, why)."""

    runs: list[Run] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _reason(error: OSError) -> str:
    return (error.strerror or str(error)).lower() if isinstance(error, OSError) else str(error)


def model_states(tag: Path) -> Path | None:
    """The rank-0 model-states file of a tag folder (every rank's holds the same config and scheduler)."""
    try:
        names = [n for n in os.listdir(tag) if _MODEL_STATES.match(n)]
    except OSError:
        return None
    ranked = sorted(names, key=lambda n: tuple(int(g or 0) for g in _MODEL_STATES.match(n).groups()))  # type: ignore[union-attr]
    return tag / ranked[0] if ranked else None


def find_runs(path: str) -> Found:
    """Each run under ``path`` once, with its tags (a tag folder named is that tag alone), and the folders under it
    that could not be searched. Raises NoRun for a PATH that is missing, not a folder, unlistable or empty of runs.
    Symlinked folders inside it are not followed (each is named), so a symlink loop ends."""
    root = Path(path)
    try:
        mode = os.stat(root).st_mode
    except OSError as error:
        raise NoRun(f"{path}: {_reason(error)}") from None
    if not stat.S_ISDIR(mode):
        raise NoRun(f"{path}: not a folder (give a checkpoint folder, a tag folder or a folder of runs)")
    try:
        os.listdir(root)
    except OSError as error:
        raise NoRun(f"{path}: cannot list it: {_reason(error)}") from None
    found = Found()
    if model_states(root) is not None:
        found.runs.append(Run(root, (root,)))
        return found

    def unlistable(error: OSError) -> None:
        found.skipped.append((str(error.filename or "?"), UNREADABLE,
                              f"cannot list it: {_reason(error)} (a run in it, if any, was not audited)"))

    tags: list[Path] = []
    for folder, subfolders, files in os.walk(root, onerror=unlistable):
        for name in [n for n in subfolders if os.path.islink(os.path.join(folder, n))]:
            found.skipped.append((os.path.join(folder, name), SKIPPED,
                                  "a symlink to a folder: not followed (name it as a PATH to audit what it points to)"))
            subfolders.remove(name)
        if any(_MODEL_STATES.match(name) for name in files):
            tags.append(Path(folder))
            subfolders[:] = []  # a tag holds no other run
        else:
            subfolders.sort()
    if not tags:
        if found.skipped:
            return found
        raise NoRun(f"{path}: no DeepSpeed checkpoint in it (no *model_states.pt in any folder)")
    saves: dict[Path, list[Path]] = {}  # save folder (the one save_checkpoint was given) -> its tags
    for tag in tags:
        saves.setdefault(tag.parent, []).append(tag)
    runs: dict[Path, list[tuple[int, list[Path]]]] = {}
    notes: dict[Path, list[str]] = {}
    for save, its_tags in saves.items():
        round_ = _SAVE_ROUND.match(save.name)
        run = save.parent if round_ and save != root else save  # the Trainer's checkpoint-N: the output folder
        runs.setdefault(run, []).append((int(round_.group(1)) if round_ and save != root else 0,
                                         _in_order(save, its_tags, notes.setdefault(run, []))))
    for run, rounds in sorted(runs.items()):
        ordered = [tag for _, its in sorted(rounds, key=lambda r: (r[0], _order(r[1][-1]))) for tag in its]
        found.runs.append(Run(run, tuple(ordered), tuple(notes[run])))
    return found


def _in_order(save: Path, tags: list[Path], notes: list[str]) -> list[Path]:
    """A save folder's tags, earliest first; the newest is the one ``latest`` names (what DeepSpeed resumes from),
    else the highest step number."""
    ordered = sorted(tags, key=_order)
    latest = save / "latest"
    if not os.path.lexists(latest):
        return ordered
    try:
        named = save / checkpoint_pickle.read_capped(str(latest), LATEST_BYTES).decode("utf-8").strip()
    except (Unreadable, UnicodeDecodeError) as error:
        notes.append(f"{latest}: {error}: ignored, the newest tag is the highest step")
        return ordered
    if named in ordered:
        ordered.remove(named)
        ordered.append(named)
    else:  # DeepSpeed's load_checkpoint would look for that tag and not find it
        notes.append(f"{latest} names {named.name!r}, which holds no model-states file here: ignored, the newest tag "
                     "is the highest step")
    return ordered


def _order(tag: Path) -> tuple[int, float]:
    number = re.search(r"(\d+)$", tag.name)
    try:
        mtime = tag.stat().st_mtime
    except OSError:
        mtime = 0.0
    return (int(number.group(1)) if number else -1, mtime)

