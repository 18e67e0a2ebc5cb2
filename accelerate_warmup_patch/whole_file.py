"""A small file written whole or not at all, and nothing left behind by a kill (#56 item 3).

Where the file system can (Linux's ``O_TMPFILE``: ext4, xfs, btrfs, tmpfs, Lustre), the text is written into a file
with no name in the folder and only then given its name (``linkat``): a process killed before that leaves nothing,
after it the whole file. Where a file of that name is there already (a rerun into the same tag), the nameless file
is linked under a temporary name and renamed over it; a kill in the microseconds between leaves that temporary
file. Where ``O_TMPFILE`` is refused (NFS, another system), the text goes to the temporary name first and is renamed.
The temporary name (``PARTIAL``) is one no reader takes for the file: it does not end in ``.json``. Such files are
removed when ``clean`` meets them older than ``STALE_S`` (a younger one may be another job's write in progress): at
each write into the folder, and when a job loads from it.
"""

from __future__ import annotations

import os
import re
import time

PROC_FD = "/proc/self/fd/"
STALE_S = 60  # a file of a few KB is written in milliseconds: a temporary one this old was left by a killed process


def write(folder: str, name: str, text: str, partial: re.Pattern[str], names: list[str] | None = None) -> None:
    """``folder``/``name`` holding ``text``, whole or not at all; ``partial`` matches the temporary names
    (``.{stem}.<hex>.partial``), which ``clean`` removes first (from ``names``, the folder's listing, where the caller
    has just read it). Raises FileNotFoundError where ``folder`` is not a folder."""
    data = text.encode("utf-8")
    stem = os.path.splitext(name)[0]
    clean(folder, partial, names)
    try:
        # the permissions of the checkpoint's own files (0666 less the umask), not mkstemp's 0600
        handle = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o666)
    except (FileNotFoundError, NotADirectoryError) as error:
        raise FileNotFoundError(f"no checkpoint folder {folder!r} (a checkpoint engine that writes elsewhere?)") \
            from error
    except (AttributeError, OSError):  # no O_TMPFILE here: the temporary name, then the rename
        _through_a_temporary_name(folder, name, stem, data, partial if names is not None else None)
        return
    try:
        _write_all(handle, data)
        try:
            _name(handle, os.path.join(folder, name))
            return
        except FileExistsError:
            temporary = _temporary(folder, stem)  # a file of that name is there: linked aside, renamed over it
            _name(handle, temporary)
            _renamed(temporary, os.path.join(folder, name))
        except OSError:  # no /proc to name it by, or a file system without hard links
            _through_a_temporary_name(folder, name, stem, data, partial if names is not None else None)
    finally:
        os.close(handle)


def _name(handle: int, path: str) -> None:
    """Give the nameless file ``handle`` the name ``path``: linkat of /proc/self/fd/N with AT_SYMLINK_FOLLOW (Python
    calls linkat, not link, only where a folder descriptor is given; an absolute path ignores it)."""
    os.link(f"{PROC_FD}{handle}", path, src_dir_fd=handle, follow_symlinks=True)


def _through_a_temporary_name(folder: str, name: str, stem: str, data: bytes,
                              partial: re.Pattern[str] | None = None) -> None:
    if partial is not None:
        clean(folder, partial)  # the only write that can leave a temporary file: the leftovers of earlier ones go
    temporary = _temporary(folder, stem)
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        _write_all(handle, data)
    except BaseException:
        os.close(handle)
        os.unlink(temporary)
        raise
    os.close(handle)
    _renamed(temporary, os.path.join(folder, name))


def _temporary(folder: str, stem: str) -> str:
    return os.path.join(folder, f".{stem}.{os.urandom(6).hex()}.partial")


def _renamed(temporary: str, final: str) -> None:
    try:
        os.replace(temporary, final)
    except BaseException:
        os.unlink(temporary)
        raise


def _write_all(handle: int, data: bytes) -> None:
    """One write for a small file; more only where the system writes part of it."""
    view = memoryview(data)
    while view:
        view = view[os.write(handle, view):]


def clean(folder: str, partial: re.Pattern[str], names: list[str] | None = None) -> None:
    """Remove the temporary files of earlier writes into ``folder`` that a killed process left (another job's write
    in progress, younger than STALE_S, is left alone; ``names``: the folder's listing, where known). Never raises."""
    try:
        names = os.listdir(folder) if names is None else names
    except OSError:
        return
    now = time.time()
    for name in names:
        if partial.match(name):
            path = os.path.join(folder, name)
            try:
                if now - os.lstat(path).st_mtime > STALE_S:
                    os.unlink(path)
            except OSError:
                pass  # gone already, or not ours to remove: the file is written all the same
