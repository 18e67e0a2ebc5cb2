"""The package's log lines: INFO on rank 0 only, each warning once per process.

Everything goes to ``logging.getLogger("accelerate_warmup_patch")``. Imported only when there is
something to say: ``logging`` is not on the start-up path.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("accelerate_warmup_patch")
_warned: set[str] = set()


def rank() -> int:
    """This process's global rank as the launchers export it; 0 outside a launch."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return 0


def info(message: str, *args: object) -> None:
    """INFO on rank 0, DEBUG elsewhere: one line per job, not one per rank."""
    _make_visible()
    logger.log(logging.INFO if rank() == 0 else logging.DEBUG, message, *args)


def warn_once(key: str, message: str, *args: object) -> None:
    """A warning, the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        _make_visible()
        logger.warning(message, *args)


def _make_visible() -> None:
    """With no logging configured anywhere, Python shows only warnings: give our INFO line a home."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[accelerate_warmup_patch] %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
