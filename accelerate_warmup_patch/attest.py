"""Every rank's word on its first optimizer step, told to the writer of the save's record (#55: a job is all its ranks).

At each save, before DeepSpeed's own save runs, every armed rank that does not write the record puts one value in
the job's key-value service (torch.distributed's, the one own_writes.py tells its files through): the save it is
for, its mode, and its word on how its own optimizer's first optimizer step ran (word_of: as the
reference release runs it, or not, with its lrs). save_checkpoint ends with a barrier, so after it returns every
armed rank's value is there; the writer reads them once (no collective, no wait on a rank that is not armed) and
the record is bound only where every rank of the world told, for this save, the same word as the writer's own.
Each rank keeps one key, overwritten at each save: what the service holds stays one value per rank. Every call is
bounded (bounded.py).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from typing import Any

from . import bounded, record_data, reference, releases, schedules, step_watch

KEY = "accelerate_warmup_patch/rank/"  # then the rank's global rank
NAMED = 3  # the ranks a reason names; the others are counted


@dataclass(frozen=True)
class Word:
    """One rank's word for one save."""

    save: str  # which save (save_id)
    mode: str  # the mode armed on that rank
    ran: str  # how its first optimizer step ran (word_of)
    lrs: str = ""  # the lrs it ran at, as text, cut: for the reason only

    def text(self) -> str:
        return "\n".join((self.save, self.mode, self.ran, self.lrs[:200]))


def word_of(engine: Any, mode: str, save: str, built_at: int | None = None) -> Word:
    """How this process's first optimizer step ran, in words every rank computes alike (attest.py): as the reference
    release runs it (each rank against the reference's formula for its own scheduler and groups), or not (with its
    lrs), or where there is no formula, at which lrs; or that it was not step 0, or was not seen."""
    first = step_watch.first_step(engine)
    scheduler = getattr(engine, "lr_scheduler", None)
    if first is None:
        fresh = int(engine.global_steps) == 0 and not stepped_outside_the_engine(engine, scheduler)
        return Word(save, mode, "nowhere yet (no optimizer step)" if fresh else "unseen by the patch")
    if not first["observed"]:
        return Word(save, mode, "unseen by the patch")
    steps, skipped = first["global_steps"], first["skipped_steps"] or 0
    if steps is None or steps - skipped != 0:
        return Word(save, mode, "after step 0 (step 0 ran before this process saw the engine)")
    name = schedules.class_name(scheduler) if scheduler is not None else None
    formula = expected(scheduler, name, first["last_batch_iteration"], first["lrs"], built_at)
    lrs = json.dumps(first["lrs"])
    if formula is None:  # no formula for this class: every rank must have run what the writer ran
        return Word(save, mode, f"at {lrs[:120]}")
    ran = record_data.decode_lrs(first["lrs"])
    if ran is not None and record_data.same_lrs(ran, formula):
        return Word(save, mode, f"as {releases.BEHAVIOR_REFERENCE} runs it")
    return Word(save, mode, f"not as {releases.BEHAVIOR_REFERENCE} runs it", lrs)


def stepped_outside_the_engine(engine: Any, scheduler: Any) -> bool:
    """Whether the optimizer or the scheduler moved though ``global_steps`` did not: a script that calls
    ``engine.backward()`` and steps them itself. Its step 0 ran, and no record may say that none did."""
    try:
        moved = scheduler is not None and int(scheduler.last_batch_iteration) > -1
        optimizer = schedules.torch_optimizer(getattr(engine, "optimizer", None))
        return moved or bool(getattr(optimizer, "state", None))
    except Exception:  # what cannot be read is no proof that nothing ran
        return True


def expected(scheduler: Any, name: str | None, iteration: Any, observed: list[Any],
             built_at: int | None) -> list[float] | None:
    """What the reference runs the first optimizer step at: its formula for this scheduler's parameters at the position
    the scheduler held when that step ran (a user may have stepped it before training), or, for one built at a later
    iteration that had not stepped, the optimizer's lr (``observed``: what its groups held), where the reference too
    writes none (reference.step_lrs). None where there is no formula (OneCycle, LRRangeTest) or the position is not
    known."""
    if scheduler is None or not isinstance(iteration, int):
        return None
    try:
        ran = record_data.decode_lrs(observed)
        if built_at is not None and ran is None:
            return None
        return reference.step_lrs(scheduler, name, iteration, ran or [], built_at)
    except Exception:  # a scheduler whose parameters are not DeepSpeed's: nothing is claimed for it
        return None


def world() -> int:
    """The job's world size (torch.distributed's), 1 where it has none."""
    distributed = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return int(distributed.get_world_size())
    except Exception:
        return 2  # a job whose size cannot be read may have other ranks: they are not known to have told
    return 1


def save_id(save_dir: Any, tag: Any, global_steps: int) -> str:
    """The same on every rank of one save: the folder (None where each node names its own) and tag as the user's call
    named them, and the step count."""
    return hashlib.sha256(f"{save_dir}\0{tag}\0{global_steps}".encode("utf-8", "surrogateescape")).hexdigest()[:16]


def tell(kv: Any, budget: bounded.Budget, rank: int, word: Word) -> None:
    """Put this rank's word in the job's service (a set, then a check that it holds it). Never raises: a rank whose
    word is not there leaves the record unbound."""
    key, value = f"{KEY}{rank}", word.text()

    def put() -> None:
        kv.set(key, value)
        kv.check([key])

    try:
        bounded.call(budget, "a rank's word", put)
    except Exception:
        return


def unheard(kv: Any, budget: bounded.Budget, *, world_size: int, own_rank: int, own: Word) -> str | None:
    """Why the record may not speak for every rank of this job: a rank of the ``world_size`` that told nothing for this
    save, or told another word than ``own`` (the writer's); None where every other rank told ``own``'s word."""
    others = [rank for rank in range(world_size) if rank != own_rank]
    if not others:
        return None
    if kv is None:
        return f"rank {others[0]} of {world_size} told nothing: the job's store cannot be asked from this rank"
    try:
        told = bounded.call(budget, "the writer's ask for the ranks' words", lambda: _read(kv, others))
    except Exception as error:
        return f"the ranks' words could not be read ({type(error).__name__}: {str(error)[:200]})"
    silent, other = [], []
    for rank in others:
        word = _parsed(told.get(rank))
        if word is None or word.save != own.save:
            silent.append(rank)
        elif word.ran != own.ran:
            other.append((rank, word))
    if silent:
        return (f"{_ranks(silent)} of {world_size} told nothing for this save (not armed, records off, or its store "
                "did not answer): how its first optimizer step ran is not known")
    if other:
        rank, word = other[0]
        more = f" ({len(other) - 1} more ranks likewise)" if len(other) > 1 else ""
        return (f"rank {rank} of {world_size} (mode {word.mode}) says its first optimizer step ran {word.ran}"
                f"{' at ' + word.lrs if word.lrs else ''}; this rank's ran {own.ran}{more}")
    return None


def _read(kv: Any, ranks: list[int]) -> dict[int, bytes]:
    """Each rank's value where it has one: one check of them all, then one multi_get (a get each where the service
    has no multi_get); only where some are missing, a check of each."""
    keys = [f"{KEY}{rank}" for rank in ranks]
    if not kv.check(keys):  # never ``get`` a missing key: it waits for it
        present = [rank for rank, key in zip(ranks, keys) if kv.check([key])]
        return _read(kv, present) if present else {}
    many = getattr(kv, "multi_get", None)
    values = many(keys) if callable(many) else [kv.get(key) for key in keys]
    return dict(zip(ranks, values))


def _parsed(value: Any) -> Word | None:
    if value is None:
        return None
    try:
        save, mode, ran, lrs = bytes(value).decode("utf-8", "surrogateescape").split("\n", 3)
    except ValueError:
        return None
    return Word(save, mode, ran, lrs)


def _ranks(ranks: list[int]) -> str:
    named = ", ".join(str(rank) for rank in ranks[:NAMED])
    return f"rank {named}" if len(ranks) == 1 else \
        f"ranks {named}" + (f" and {len(ranks) - NAMED} more" if len(ranks) > NAMED else "")
