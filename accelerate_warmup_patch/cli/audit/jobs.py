"""``--jobs N``: runs judged in N worker processes, their reports handed back in the order the runs were found.

Processes, not threads: judging a run is Python work (the pickle's scan and load, the verdict), which threads of
one interpreter do one at a time. Only this process writes, so lines are whole and never interleaved. At most a
few runs per worker are in flight, so memory stays flat however many the walk finds. The workers ignore SIGINT (a
terminal's Ctrl-C reaches the whole process group): this process decides to stop, and ends them.
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .find import Run

if TYPE_CHECKING:
    from multiprocessing.pool import AsyncResult

_IN_FLIGHT_PER_WORKER = 2  # batches
_BATCH = 16  # runs a message: enough to pay for the message, few enough for the first line to come soon


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # Pool.terminate ends a worker with it


def _judge(batch: list[Run | dict[str, Any]], config_root: str | None) -> list[dict[str, Any]]:
    from .report import judge  # the worker's own import: report imports this module

    return [item if isinstance(item, dict) else judge(item, config_root) for item in batch]


def judged(found: Iterable[Run | Any], workers: int, config_root: str | None,
           row_type: type[Any]) -> Iterator[dict[str, Any]]:
    """The report of each item of ``found`` in order: a ``row_type`` item's own ``report``, a Run judged in a
    worker, BATCH at a time (one message each way per batch, not per run). A fresh interpreter per worker (spawn):
    the parent's threads and signal handlers stay here."""
    import multiprocessing  # here: an audit without --jobs does not pay for its import

    pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_ignore_interrupts)
    pending: collections.deque[AsyncResult[list[dict[str, Any]]]] = collections.deque()
    batch: list[Run | dict[str, Any]] = []
    try:
        for item in found:
            batch.append(item.report if isinstance(item, row_type) else item)
            if len(batch) >= _BATCH:
                pending.append(pool.apply_async(_judge, (batch, config_root)))
                batch = []
            while len(pending) > workers * _IN_FLIGHT_PER_WORKER or (pending and pending[0].ready()):
                yield from pending.popleft().get()
        if batch:
            pending.append(pool.apply_async(_judge, (batch, config_root)))
        while pending:
            yield from pending.popleft().get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()
