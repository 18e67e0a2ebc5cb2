"""The binding: how a record names the files it is about, and how a folder's files are read back to check it.

Standard library only, and nothing here touches torch or DeepSpeed: the writer (``record_writer``, in the training job)
and the reader (``cli/audit/read``, on any Python) share these functions, so that both sides compute the binding the
same way (docs/mark.md).

The binding names the model-states file an audit judges a tag folder by (the lowest-ranked ``*model_states.pt``)
with what its zip central directory already holds: each member's name, CRC-32 and size, hashed together, and the
file's size. Reading it costs one read of the directory at the end of the file, never the weights, and it holds
across ``cp -r``, ``rsync``, ``tar`` or an object-store sync, which change mtimes and inodes but not the bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import torch_file

# the rank files an engine writes per tag (engine.py's _get_ckpt_name @ v0.15.2, v0.19.8): mp_rank_00_model_states.pt,
# zero_pp_rank_0_mp_rank_00_model_states.pt; the audit reads the lowest-ranked one (cli/audit/find.model_states)
MODEL_STATES = re.compile(r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
# DeepSpeed's other states files in a tag folder, every rank's (engine.py's _get_ckpt_name, _get_zero_ckpt_name,
# the PipelineModule's layer files @ v0.15.2, v0.19.8): zero_pp_rank_N_mp_rank_MM_optim_states.pt (with a bf16_
# prefix under bf16), layer_NN-model_states.pt. Under ZeRO 3 and the pipeline the weights live there, not in the
# model-states file the audit reads, so the binding covers them too (docs/mark.md).
STATES_FILE = re.compile(r"(?:^|[_-])(?:model|optim)_states\.pt$")
Stamp = tuple[int, Optional[str]]  # a states file as a binding names it: its size and its members' digest (file_stamp)
MAX_BOUND_FILES = 1024  # the other states files a record binds (the lowest names): bounded time per save


def lowest_model_states(folder: str) -> str | None:
    """The name of the lowest-ranked ``*model_states.pt`` in ``folder`` (the file an audit reads), or None."""
    try:
        return lowest_ranked(os.listdir(folder))
    except OSError:
        return None


def lowest_ranked(names: list[str]) -> str | None:
    """The lowest-ranked model-states file among ``names`` (a tag folder's listing), or None: the one the record
    binds and the audit reads."""
    found = [name for name in names if MODEL_STATES.match(name)]
    return min(found, key=_rank) if found else None


def _rank(name: str) -> tuple[int, ...]:
    match = MODEL_STATES.match(name)
    return tuple(int(group or 0) for group in match.groups()) if match else (1 << 62,)


def members_digest(members: list[tuple[str, int, int]]) -> str:
    """The digest of a zip's members, each (name, CRC-32, size), in name order: ``sha256:<hex>``."""
    hasher = hashlib.sha256()
    for name, crc, size in sorted(members):
        hasher.update(f"{name}\0{crc:08x}\0{size}\n".encode("utf-8", "surrogateescape"))
    return "sha256:" + hasher.hexdigest()


def model_states_binding(name: str, size: int, members: list[tuple[str, int, int]]) -> dict[str, Any]:
    """The record's ``bound_to``: the file's name and size, its members' count and digest."""
    return {"file": name, "size": size, "members": len(members), "digest": members_digest(members)}


def bound_files(names: list[str]) -> list[str]:
    """The states files of a tag folder's listing that a record binds: the lowest-ranked model-states file, then
    the others (other_states); none where the folder holds no model-states file."""
    name = lowest_ranked(names)
    return [] if name is None else [name, *other_states(names, name)]


def other_states(names: list[str], bound_file: str) -> list[str]:
    """The tag folder's other states files a record binds besides ``bound_file``, in name order, at most
    MAX_BOUND_FILES."""
    return sorted(name for name in names if STATES_FILE.search(name) and name != bound_file)[:MAX_BOUND_FILES]


def others_binding(stamps: list[tuple[str, int, str | None]]) -> dict[str, Any]:
    """``bound_to["others"]``: how many other states files, and ``sha256:`` of each one's name, size and members'
    digest (``-`` for a file that is not a zip, ``?`` for one that could not be read), in name order."""
    hasher = hashlib.sha256()
    for name, size, digest in sorted(stamps):
        hasher.update(f"{name}\0{size}\0{digest or '-'}\n".encode("utf-8", "surrogateescape"))
    return {"files": len(stamps), "digest": "sha256:" + hasher.hexdigest()}


UNREADABLE = "?"  # the members' digest of another states file that could not be read (on either side)


def bind(folder: str) -> dict[str, Any]:
    """``bound_to`` for the lowest-ranked model-states file in ``folder`` and the other states files beside it
    (read_back)."""
    return read_back(folder)[0]


def read_back(folder: str) -> tuple[dict[str, Any], dict[str, Stamp]]:
    """``bound_to`` for the lowest-ranked model-states file in ``folder`` and the other states files beside it,
    read back now by the audit's own reader (torch_file) under its bounds, so that a record is never bound to a file
    the audit cannot read; where the model states cannot be read back as a zip, ``{"file": None, "unbound": why}``.
    Beside it, the stamp of each file it binds (file_stamp), from the same listing and the same read of each file."""
    found = read_back_known(folder, {})
    return found.bound, found.stamps


@dataclass
class ReadBack:
    """``read_back``'s binding and stamps, with the folder's listing and each bound file's identity as read."""

    bound: dict[str, Any]
    stamps: dict[str, Stamp] = field(default_factory=dict)
    names: list[str] | None = None  # the folder's listing (None where it could not be listed)
    identities: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> torch_file.identity as read


def read_back_known(folder: str, known: dict[str, torch_file.ZipDirectory],
                    told: Callable[[list[str]], dict[str, tuple[Stamp, tuple[int, ...]]]] = lambda names: {},
                    checked_later: bool = False) -> ReadBack:
    """``read_back``, where the zip directory of a file this process read already (``known``, by name: what its
    own torch.save left, read right after it), or the stamp of another states file that another rank read after its
    own torch.save of it (``told(names)``: by name, its stamp and the identity it read), is taken without a second read
    wherever a stat shows the same file (torch_file.identity): one read of each zip directory a save, and a stat.
    ``checked_later``: the caller stats every bound file after it wrote the record (``unchanged``), which shows any
    write since those reads: they are taken without a stat now."""
    try:
        names: list[str] | None = os.listdir(folder)
    except OSError:
        names = None
    bound_names = bound_files(names or [])
    if not bound_names:
        return ReadBack(unbound(f"no *model_states.pt in {os.path.basename(folder) or folder}"), names=names)
    name, others = bound_names[0], bound_names[1:]
    found = ReadBack({}, names=names)
    try:
        directory = _directory(os.path.join(folder, name), known.get(name), checked_later)
    except (OSError, torch_file.Unreadable) as error:
        found.bound = unbound(_not_a_zip(name, type(error).__name__, str(error)))
        return found
    if not directory.zip:
        found.bound = unbound(_not_a_zip(name, "BadZipFile", directory.why))
        return found
    found.stamps[name], found.identities[name] = (directory.size, members_digest(directory.members)), directory.identity
    heard_of = told([other for other in others if other not in known]) if others else {}
    for other in others:
        path = os.path.join(folder, other)
        heard = heard_of.get(other) if other not in known else None
        try:
            if heard is not None and (checked_later or torch_file.identity(os.stat(path)) == heard[1]):
                found.stamps[other], found.identities[other] = heard
                continue
            read = _directory(path, known.get(other), checked_later)
        except (OSError, torch_file.Unreadable):
            found.stamps[other] = -1, UNREADABLE
            continue
        found.stamps[other] = read.size, members_digest(read.members) if read.zip else None
        found.identities[other] = read.identity
    found.bound = model_states_binding(name, directory.size, directory.members)
    found.bound["others"] = others_binding([(other, *found.stamps[other]) for other in others])
    return found


def bound_from_own(own: dict[str, tuple[torch_file.ZipDirectory, Stamp]]) -> ReadBack | None:
    """The binding of a save whose every states file this process wrote itself (a job of one rank), from the zip
    directory each of its own torch.saves left and the stamp computed from it then (``own``, by name), with no listing,
    no read and no second digest; None where its lowest-ranked model-states file is not a zip (the folder is then
    read back, and says why). A file of another run left beside them is not bound: the audit, which binds every
    states file of the folder, then finds the record "not that save's"."""
    names = bound_files(list(own))
    if not names or not own[names[0]][0].zip:
        return None
    stamps = {name: own[name][1] for name in names}
    first, (size, digest) = own[names[0]][0], stamps[names[0]]
    bound = {"file": names[0], "size": size, "members": len(first.members), "digest": digest,
             "others": others_binding([(other, *stamps[other]) for other in names[1:]])}
    return ReadBack(bound, stamps, names=[], identities={name: own[name][0].identity for name in names})


def _directory(path: str, known: torch_file.ZipDirectory | None,
               checked_later: bool = False) -> torch_file.ZipDirectory:
    """``known`` where a stat shows the very file it was read from (or will: ``checked_later``), else the file's
    zip directory read now."""
    if known is not None and known.identity and (checked_later or
                                                 torch_file.identity(os.stat(path)) == known.identity):
        return known
    return torch_file.zip_directory(path)


def unchanged(folder: str, identities: dict[str, tuple[int, ...]]) -> bool:
    """Whether each file named in ``identities`` is still the very file read (a stat each)."""
    try:
        return all(torch_file.identity(os.stat(os.path.join(folder, name))) == known
                   for name, known in identities.items())
    except OSError:
        return False


def file_stamp(path: str) -> Stamp:
    """A states file as a binding names it: its size and its members' digest (None for a file that is not a zip;
    size -1 and UNREADABLE for one that cannot be read), from its zip central directory alone."""
    try:
        found = torch_file.zip_directory(path)
    except (OSError, torch_file.Unreadable):
        return -1, UNREADABLE
    return found.size, members_digest(found.members) if found.zip else None


def rewritten(noted: dict[str, Stamp], now: dict[str, Stamp]) -> list[str]:
    """The files a process wrote in a save (``noted``: name -> file_stamp right after its own write) that hold other
    bytes now, or are gone, or could not be read either time: another job wrote them since (docs/mark.md)."""
    return sorted(name for name, stamp in noted.items()
                  if UNREADABLE in (stamp[1], now.get(name, (-1, UNREADABLE))[1]) or now.get(name) != stamp)


def _not_a_zip(name: str, kind: str, why: str) -> str:
    return (f"{name} cannot be read back as a zip ({kind}: {why[:200]}; torch's legacy format, or a file not yet "
            "complete)")


def unbound(why: str) -> dict[str, Any]:
    return {"file": None, "unbound": why}


def same_binding(recorded: Any, actual: dict[str, Any]) -> bool:
    """Whether a record's ``bound_to`` names exactly the files ``actual`` describes (a record of 0.6.0, which bound
    the model-states file alone, is held to that file)."""
    return same_model_states(recorded, actual) and ("others" not in recorded or
                                                    recorded["others"] == actual.get("others"))


def same_model_states(recorded: Any, actual: dict[str, Any]) -> bool:
    """Whether a record's ``bound_to`` names a model-states file of the same bytes as ``actual``'s, whatever files
    are beside it: a copy of that file (ds_to_universal copies the model states into the universal checkpoint)."""
    return (isinstance(recorded, dict) and recorded.get("file") is not None and
            all(recorded.get(key) == actual.get(key) for key in ("file", "size", "members", "digest")))


def holds_weights(names: list[str], bound_file: str) -> bool:
    """Whether the model-states file ``bound_file`` of a tag folder holding ``names`` holds the model's weights, so
    that its bytes tell one run from another: not under ZeRO 3 (zero_pp_rank_* files hold placeholders) nor with the
    pipeline (its layer_* files hold the layers)."""
    return not bound_file.startswith("zero_pp_rank_") and \
        not any(name.startswith("layer_") and STATES_FILE.search(name) for name in names)


def binding_problem(recorded: Any, actual: dict[str, Any]) -> str:
    """Why a record's ``bound_to`` is not the file ``actual`` describes, in words."""
    if not isinstance(recorded, dict) or recorded.get("file") is None:
        why = recorded.get("unbound") if isinstance(recorded, dict) else None
        return f"it is unbound ({why or 'no reason given'})"
    if recorded.get("file") != actual.get("file"):
        return f"it is bound to {recorded.get('file')!r}, the folder's model states are {actual.get('file')!r}"
    if recorded.get("size") != actual.get("size"):
        return f"it is bound to a file of {recorded.get('size')} bytes, this one holds {actual.get('size')}"
    if not all(recorded.get(key) == actual.get(key) for key in ("members", "digest")):
        return "its digest of the model states' members is not this file's (other bytes: a rerun or a copy)"
    return ("its digest of the other states files (the optimizer's, the layers') is not this folder's (other bytes: "
            "a rerun, a race or a copy)")


def beside_its_own(record: dict[str, Any], actual: dict[str, Any] | None, others: list[tuple[str, int, str | None]],
                   *, deepspeed: str | None, global_steps: int | None, scheduler: str | None) -> int | None:
    """How many states files its writer did not write lie beside its own, where that is all that keeps a record
    from being this save's (not_this_saves names only the other states files): it names this save in every other
    way, its model states are these very bytes, and the first of the folder's other states files in name order
    (``others``: each one's name, size and members' digest, as read now), as many as it bound, are its own,
    unchanged (one rank's files sort before a later rank's). None where not. A one-rank writer binds the files it
    wrote alone (bound_from_own), so a rerun of ZeRO 0 over a ZeRO 1/2 save, or of one rank over a save of two,
    leaves files of the earlier run beside its own: such a record is a claim, never proof, for the job (at a load)
    and the audit alike."""
    bound_to = record.get("bound_to")
    recorded = bound_to.get("others") if isinstance(bound_to, dict) else None
    count = recorded.get("files") if isinstance(recorded, dict) else None
    if actual is None or not isinstance(count, int) or not 0 <= count < len(others):
        return None
    own = others_binding(sorted(others)[:count])
    if own != recorded or not_this_saves(record, {**actual, "others": own}, deepspeed=deepspeed,
                                         global_steps=global_steps, scheduler=scheduler) is not None:
        return None
    return len(others) - count


def not_this_saves(record: dict[str, Any], actual: dict[str, Any] | None, *, deepspeed: str | None,
                   global_steps: int | None, scheduler: str | None) -> str | None:
    """Why a record (as ``record_data.valid_record`` returns it) is not this save's, or None where it can be: the one
    rule of the job (at a load) and the audit. Every record names this save's step count and release, and its
    scheduler class where both name one; a bound record 2 is bound to these very files (``actual``: the folder's
    binding as read now, None where its model states are not a zip). A record 1 and an unbound record 2 can be this
    save's, as a claim, never proof."""
    if record["global_steps"] != global_steps:
        # The record is written after each save, with the engine's step count; the tag folder may be saved over
        # later by a job that wrote none (unpatched, off, or without the package), and the old record stays.
        return (f"it names global step {record['global_steps']} and the checkpoint "
                f"{'?' if global_steps is None else global_steps}: a record of an earlier save into this folder")
    if record["deepspeed"] != deepspeed:
        return f"it names DeepSpeed {record['deepspeed']}, the checkpoint {deepspeed}"
    if record["scheduler"] is not None and scheduler is not None and record["scheduler"]["class"] != scheduler:
        return f"it names scheduler {record['scheduler']['class']}, the checkpoint's config {scheduler}"
    bound_to = record.get("bound_to")
    if isinstance(bound_to, dict) and bound_to.get("file") is not None:
        if actual is None:
            return "it is bound to a zip, and the model states are torch's legacy format"
        if not same_binding(bound_to, actual):
            return binding_problem(bound_to, actual)
    return None
