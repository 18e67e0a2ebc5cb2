"""``--jobs N``: runs judged in N worker processes, their reports handed back in the order the runs were found.

Processes, not threads: judging a run is Python work (the pickle's scan and load, the verdict), which threads of
one interpreter do one at a time. Only this process writes, so lines are whole and never interleaved. Runs go to
the workers BATCH at a time (a message each way per batch, not per run), at most a few batches per worker in
flight, so memory stays flat however many the walk finds. The workers ignore SIGINT (a terminal's Ctrl-C reaches
the whole process group): this process decides to stop. A job's SIGTERM may end the workers themselves: this
process, waiting on them, asks between short waits whether to stop, and a batch whose worker died is judged here.
"""

from __future__ import annotations

import collections
import signal
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Union

from .find import Run
from .run_report import judged_report

if TYPE_CHECKING:
    from concurrent.futures import Future

    Batch = list[Union[Run, dict[str, Any]]]  # runs to judge, and reports that need no judging, in the walk's order

_IN_FLIGHT_PER_WORKER = 2  # batches
_BATCH = 16  # runs a message: enough to pay for the message, few enough for the first line to come soon


class Stopped(Exception):
    """A signal asked to stop while this process waited on the workers."""


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def judge_batch(batch: Batch, config_root: str | None) -> list[dict[str, Any]]:
    return [item if isinstance(item, dict) else judged_report(item, config_root) for item in batch]


def judged(found: Iterable[Run | Any], workers: int, config_root: str | None, row_type: type[Any],
           stopping: Callable[[], bool] = lambda: False) -> Iterator[dict[str, Any]]:
    """The report of each item of ``found`` in order: a ``row_type`` item's own ``report``, a Run judged in a
    worker. A fresh interpreter per worker (spawn): the parent's threads and signal handlers stay here."""
    judges = _Workers(workers, config_root, stopping)
    batch: Batch = []
    try:
        for item in found:
            batch.append(item.report if isinstance(item, row_type) else item)
            if len(batch) >= _BATCH:
                judges.send(batch)
                batch = []
            while judges.waiting() > workers * _IN_FLIGHT_PER_WORKER or judges.ready():
                yield from judges.next()
        if batch:
            judges.send(batch)
        while judges.waiting():
            yield from judges.next()
    finally:
        judges.close()


class _Workers:
    """The worker processes and the batches sent to them, in order. A worker that died of something else than a
    signal of ours (out of memory, say) breaks the pool: its batches, and all after, are judged here."""

    def __init__(self, workers: int, config_root: str | None, stopping: Callable[[], bool]) -> None:
        import multiprocessing  # here: an audit without --jobs does not pay for these imports
        from concurrent.futures import ProcessPoolExecutor

        self.pool: Any = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_ignore_interrupts)
        self.config_root, self.stopping = config_root, stopping
        self.pending: collections.deque[tuple[Future[list[dict[str, Any]]] | None, Batch]] = collections.deque()
        self.broken = False

    def send(self, batch: Batch) -> None:
        from concurrent.futures.process import BrokenProcessPool

        future = None
        if not self.broken:
            try:
                future = self.pool.submit(judge_batch, batch, self.config_root)
            except BrokenProcessPool:
                self._broke()
        self.pending.append((future, batch))

    def _broke(self) -> None:
        if self.stopping():
            raise Stopped from None
        self.broken = True

    def waiting(self) -> int:
        return len(self.pending)

    def ready(self) -> bool:
        return bool(self.pending) and (self.pending[0][0] is None or self.pending[0][0].done())

    def next(self) -> list[dict[str, Any]]:
        """The oldest batch's reports, asking between short waits whether to stop."""
        from concurrent.futures import TimeoutError as Waiting
        from concurrent.futures.process import BrokenProcessPool

        future, batch = self.pending.popleft()
        while future is not None:
            try:
                return future.result(timeout=0.2)
            except Waiting:
                if self.stopping():
                    raise Stopped from None
            except BrokenProcessPool:
                self._broke()
                break
        return judge_batch(batch, self.config_root)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
