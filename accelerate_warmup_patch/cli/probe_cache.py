"""The probe's answers kept on disk, each for exactly the code it asked, so that ``doctor`` and ``status`` pay the
child that imports torch and DeepSpeed (probe_build.py, 3-10 s) once per build, not once per call.

What the probe's answer depends on is the code it runs: the build's ``deepspeed/runtime/lr_schedules.py`` (which
imports only torch's Optimizer and DeepSpeed's logger, read @ v0.15.2 and v0.19.8), torch, Python, and this package's
own code (the probe's checks, the table the answer is compared with). A kept answer's key is all of them (``Key``):
the scheduler file's path and sha256, found as ``import deepspeed.runtime.lr_schedules`` would find it but without
importing anything (``scheduler_file``), the DeepSpeed and torch versions, the interpreter, this package's version
and the sha256 of its own modules, and ``FORMAT``. An answer is kept only where the child says it ran that very file
with those very bytes (``keep``); any other key, an edit of the file included, is a miss, and the child is asked.

Where they are: ``$XDG_CACHE_HOME/accelerate-warmup-patch/probes/`` (``~/.cache`` where the variable is unset or not
an absolute path), one file per key, written whole or not at all (a temporary file renamed over it). The cache fails
open: a folder that cannot be written, a file that cannot be read, is not ours, not JSON or not of this key is a
miss, never an error and never an answer. ``--no-cache`` (doctor's, status's) neither reads nor writes it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import tempfile
import time
from importlib.machinery import ModuleSpec
from typing import Any

from .. import releases
from ..torch_file import Unreadable, open_fd, read_capped

FORMAT = 1  # the layout of a kept answer and what the probe asks: a change of either makes every kept one a miss
FOLDER = ("accelerate-warmup-patch", "probes")
MODULE = "deepspeed.runtime.lr_schedules"
SOURCE_CAP = 16 << 20  # a scheduler module is tens of KiB; this package's modules together under a MiB
ENTRY_CAP = 1 << 20  # a kept answer is about a KiB
# the answer's keys, as probe_build._run writes them: a kept file without all of them is not an answer
ANSWER_KEYS = ("deepspeed", "lacks", "lacks_changes", "differs_from_table", "step_lr", "verdicts", "vendor")

Key = dict[str, Any]


def folder() -> str | None:
    """The folder of kept answers; None where there is no home to put it in."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative path is to be ignored
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, *FOLDER)


def _find(name: str, path: list[str] | None) -> ModuleSpec | None:
    """The spec the import system would find for ``name`` (each finder on sys.meta_path, in order), without
    importing it or its parents."""
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(name, path, None)
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def scheduler_file() -> str | None:
    """The file ``import deepspeed.runtime.lr_schedules`` would run in a process of this environment, found as the
    import system finds it (the meta path's finders, each parent package's folders) with nothing imported; None
    where it cannot be told (no such file, a module with no file)."""
    path: list[str] | None = None
    try:
        for name in ("deepspeed", "deepspeed.runtime", MODULE):
            spec = _find(name, path)
            if spec is None:
                return None
            if name == MODULE:
                return os.path.realpath(spec.origin) if spec.has_location and spec.origin else None
            path = list(spec.submodule_search_locations or [])
            if not path:
                return None
    except Exception:  # a third party's finder that fails: the child is asked
        return None
    return None


def digest(path: str) -> str:
    """The sha256 of a regular file's bytes; raises Unreadable."""
    return hashlib.sha256(read_capped(path, SOURCE_CAP)).hexdigest()


def own_code() -> str:
    """The sha256 of this package's modules (their paths and bytes), the probe's checks and the table among them."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for folder_, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        found += [os.path.join(folder_, name) for name in files if name.endswith(".py")]
    total = hashlib.sha256()
    for path in sorted(found):
        total.update(os.path.relpath(path, root).replace(os.sep, "/").encode() + b"\0")
        total.update(read_capped(path, SOURCE_CAP) + b"\0")
    return total.hexdigest()


def key(deepspeed: str) -> tuple[Key | None, str]:
    """The key of the installed build's answer, or None with the reason it has none (then the child is asked and
    nothing is kept)."""
    found = scheduler_file()
    if found is None:
        return None, f"{MODULE} has no file this command can find without importing deepspeed"
    try:
        return {"format": FORMAT, "file": found, "sha256": digest(found), "deepspeed": deepspeed,
                "torch": releases.installed("torch"), "python": sys.version, "executable": sys.executable,
                "package": releases.installed("accelerate-warmup-patch"), "package_code": own_code()}, ""
    except (Unreadable, OSError) as error:
        return None, f"{found} cannot be read: {error}"


def _entry(key_: Key) -> str | None:
    where = folder()
    if where is None:
        return None
    name = hashlib.sha256(json.dumps(key_, sort_keys=True).encode()).hexdigest()
    return os.path.join(where, f"{name}.json")


def _read_ours(path: str) -> bytes:
    """A kept file's bytes, if it is a regular file of this user that no one else may write; raises OSError or
    Unreadable otherwise (a kept answer is trusted as proof, so another user's file is not read)."""
    fd, status = open_fd(path, known_regular=False)
    try:
        owner = getattr(os, "geteuid", None)
        if owner is not None and status.st_uid != owner():
            raise Unreadable("another user's file")
        if status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise Unreadable("writable by others")
        if status.st_size > ENTRY_CAP:
            raise Unreadable(f"over {ENTRY_CAP} bytes")
        data = b""
        while len(data) <= ENTRY_CAP:
            chunk = os.read(fd, ENTRY_CAP + 1 - len(data))
            if not chunk:
                break
            data += chunk
        return data
    finally:
        os.close(fd)


def look_up(key_: Key) -> dict[str, Any] | None:
    """The answer kept for exactly ``key_``, with ``answered`` saying so; None on any miss (nothing kept, the cache
    off, a file unreadable, not ours, not JSON, of another key or without an answer's keys)."""
    path = _entry(key_)
    if path is None:
        return None
    try:
        kept = json.loads(_read_ours(path))
    except (OSError, Unreadable, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != key_:
        return None
    answer, when = kept.get("answer"), kept.get("probed_at")
    if not isinstance(answer, dict) or not isinstance(when, str) or "error" in answer or \
            any(name not in answer for name in ANSWER_KEYS):
        return None
    return {**answer, "answered": answered(key_, "kept", when=when, where=path)}


def keep(key_: Key | None, answer: dict[str, Any], why_none: str = "", write: bool = True) -> dict[str, Any]:
    """``answer``, just probed, with ``answered`` saying so; written to the cache for ``key_`` (unless not ``write``)
    where the child ran that very file with those very bytes (``answer["ran"]``) and it is still those bytes. Never
    raises: why nothing was written is ``answered["not_kept"]``."""
    answer = dict(answer)
    ran = answer.pop("ran", None)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if key_ is None:
        return {**answer, "answered": answered(None, "probed", when=when, not_kept=why_none)}
    why_not = _why_not(key_, answer, ran) if write else "--no-cache"
    path = None
    if why_not is None:
        path = _entry(key_)
        why_not = _write(path, {"key": key_, "probed_at": when, "answer": answer}) if path else \
            "no home folder to keep it in"
    return {**answer, "answered": answered(key_, "probed", when=when, where=None if why_not else path,
                                           not_kept=why_not)}


def _why_not(key_: Key, answer: dict[str, Any], ran: Any) -> str | None:
    """Why this answer is not proof for ``key_`` (None where it is)."""
    if not isinstance(ran, dict) or ran.get("file") is None:
        return "the child did not say which file it ran"
    if os.path.realpath(ran["file"]) != key_["file"]:
        return f"the child ran {ran['file']}, not {key_['file']}"
    try:
        now = digest(key_["file"])
    except (Unreadable, OSError) as error:
        return f"{key_['file']} cannot be read again: {error}"
    if ran.get("sha256") != key_["sha256"] or now != key_["sha256"]:
        return f"{key_['file']} changed while it was probed"
    if answer.get("deepspeed") != key_["deepspeed"]:
        return f"the child's deepspeed says {answer.get('deepspeed')}, its metadata {key_['deepspeed']}"
    return None


def _write(path: str, kept: dict[str, Any]) -> str | None:
    """Write ``kept`` to ``path`` whole or not at all (a temporary file beside it, renamed over it); the reason where
    it could not be, None where it was."""
    temporary = None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".probe-", suffix=".tmp", dir=os.path.dirname(path))
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(kept, out)  # in its order: the verdicts are printed as kept
        os.replace(temporary, path)
        return None
    except (OSError, TypeError, ValueError) as error:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        return f"not written: {error}"


def answered(key_: Key | None, how: str, *, when: str, where: str | None = None,
             not_kept: str | None = None) -> dict[str, Any]:
    """Where an answer comes from, as ``probed["answered"]`` says it: ``how`` (``probed``: a child now; ``kept``: the
    cache, for this very file), the file, its sha256, when it was probed, the kept file and why none was written."""
    return {"how": how, "file": key_["file"] if key_ else None, "sha256": key_["sha256"] if key_ else None,
            "probed_at": when, "cache": where, "not_kept": not_kept or None}


def said(answer: dict[str, Any]) -> str:
    """One line on where ``answer`` comes from, as doctor and status print it."""
    how = answer["answered"]
    code = f"{os.path.basename(how['file'])} sha256 {how['sha256'][:12]}" if how["file"] else "its code"
    if how["how"] == "kept":
        return (f"answered from the cache: probed at {how['probed_at']} for this very file ({code}; {how['file']}); "
                "--no-cache probes again")
    kept = f"kept in {os.path.dirname(how['cache'])}" if how["cache"] else f"not kept: {how['not_kept']}"
    return f"probed now ({code}); {kept}"
