"""The package's log lines: INFO on rank 0 only, each warning once per process.

Everything goes to ``logging.getLogger("accelerate_warmup_patch")``, by the convention of libraries: the package
configures nothing. Where nothing configures logging (no handler on the root logger, no level set on ours, the
root logger's default level), Python would show only warnings, through its last-resort handler, and never the
INFO line that says what the patch changed; then, and only then, the package's own stderr handler shows its
INFO and WARNING lines. The moment the program configures logging (``basicConfig``, ``dictConfig``, a handler
or a level), every line goes through that configuration alone: never twice, never at a level it hides.
Imported only when there is something to say: ``logging`` is not on the start-up path.
"""

from __future__ import annotations

import logging
import os

from .state import STATE

logger = logging.getLogger("accelerate_warmup_patch")
# not attached to any logger: the program's configuration never sees it, and it never sees the program's lines
_stderr = logging.StreamHandler()
_stderr.setFormatter(logging.Formatter("[accelerate_warmup_patch] %(levelname)s: %(message)s"))


def rank() -> int:
    """This process's global rank as the launchers export it; 0 outside a launch."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 0


def info(message: str, *args: object) -> None:
    """INFO on rank 0, DEBUG elsewhere: one line per job, not one per rank."""
    _log(logging.INFO if rank() == 0 else logging.DEBUG, message, args)


def warn_once(key: str, message: str, *args: object) -> None:
    """A warning, the first time ``key`` is seen in this process."""
    if key not in STATE.warned:
        STATE.warned.add(key)
        _log(logging.WARNING, message, args)


def warn_job_once(key: str, message: str, *args: object) -> None:
    """A warning once per job: on rank 0, the first time ``key`` is seen; DEBUG on the other ranks."""
    if key not in STATE.warned:
        STATE.warned.add(key)
        _log(logging.WARNING if rank() == 0 else logging.DEBUG, message, args)


def _log(level: int, message: str, args: tuple[object, ...]) -> None:
    if not _unconfigured():
        logger.log(level, message, *args)
    elif level >= logging.INFO and not logger.disabled and logging.root.manager.disable < level:
        _stderr.handle(logger.makeRecord(logger.name, level, "(unknown file)", 0, message, args, None))


def _unconfigured() -> bool:
    """True while neither the program nor anything it ran has configured logging for the package's lines."""
    root = logging.getLogger()
    return (not root.handlers and not logger.handlers and logger.level == logging.NOTSET and logger.propagate
            and root.level == logging.WARNING)
