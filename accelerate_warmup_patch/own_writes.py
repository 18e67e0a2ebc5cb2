"""What this process wrote itself in a save, so that the record is bound only to its own bytes (record_writer.py).

A record binds what rank 0 reads back after save_checkpoint returned. Another job saving the same tag at the same
moment may have written the files in between. So, during a save whose record it writes, this process notes each
states file as its own torch.save left it (the checkpoint engine's save, wrapped: targets.py), and the record is
bound only where those files still hold those bytes when read back (docs/mark.md, "A race").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from . import record_data
from .state import STATE


@contextlib.contextmanager
def saving(on: bool) -> Iterator[dict[str, tuple[int, str | None]] | None]:
    """While it is open (and ``on``), this thread's own writes of states files are noted, path -> file fact."""
    if not on:
        yield None
        return
    writes: dict[str, tuple[int, str | None]] = {}
    STATE.saving.writes = writes
    try:
        yield writes
    finally:
        STATE.saving.writes = None


def own_write_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """``TorchCheckpointEngine.save(state_dict, path)``: the original first, its result returned unchanged; then,
    in a save whose record this process writes, the file's facts as its own write left them (one read of its zip
    central directory, never the weights)."""
    result = wrapped(*args, **kwargs)
    writes = getattr(STATE.saving, "writes", None)
    if writes is not None:
        path = kwargs.get("path", args[1] if len(args) > 1 else None)
        if isinstance(path, str):
            writes[os.path.abspath(path)] = record_data.file_fact(path)  # never raises: a fact of "?" at worst
    return result


def rewritten_since(folder: str, writes: dict[str, tuple[int, str | None]] | None) -> str | None:
    """Why the states files this process wrote into ``folder`` in this save are not, now, what it wrote (another
    job saved into the same tag since), or that it wrote none there; None where each holds its own bytes."""
    if writes is None:
        return "this process's own writes of the save were not watched"
    here = os.path.abspath(folder)
    noted = {os.path.basename(path): fact for path, fact in writes.items() if os.path.dirname(path) == here}
    if not noted:
        return ("this process wrote none of the tag folder's states files itself, so it cannot tell its save's "
                "bytes from another job's")
    changed = record_data.rewritten(noted, {name: record_data.file_fact(os.path.join(here, name)) for name in noted})
    if not changed:
        return None
    named = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return (f"{named}: not the bytes this process wrote in this save: another job saved into the same tag folder "
            "at the same moment, and the files are not known to be this run's")
