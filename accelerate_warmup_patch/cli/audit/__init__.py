"""``audit PATH...``: were finished runs hurt? The step-0 lr each run's checkpoints say it ran at, against the
reference release's.

A training log cannot tell (the HF Trainer logs the lr after the scheduler stepped, and never step 0's); the
checkpoint can. Every DeepSpeed model-states file holds ``ds_version`` (the release that wrote it), the
``ds_config`` the engine ran with (the HF Trainer and accelerate save it with their "auto" values filled
in), the scheduler's state (``{"last_batch_iteration": N}`` for DeepSpeed's), ``global_steps`` and, for the
optimizer, its param groups (``optimizer``, or ``param_shapes`` one entry per group under ZeRO and bf16). A run
this package patched also holds its record (``accelerate_warmup_patch.json`` in the tag folder), which says what
the patch did at step 0. What a release does comes from the guard table (``releases``, through ``config_facts``:
the answers ``doctor --config`` gives), never from an installed DeepSpeed: this subpackage imports neither torch,
deepspeed nor wrapt, and reads each file through ``checkpoint_pickle`` (nothing the pickle names is imported or
called, no tensor data is read, every read is bounded).

Every PATH, run and folder that could not be read gets its line; a file's failure is its run's ``unreadable``.

The subpackage, one job a module, imports pointing down: ``verdicts`` (the names), ``checkpoint_pickle`` (a torch
file read as data through the package's ``torch_file``; ``pickle_scan`` its bounds), ``find`` (the runs under a
PATH), ``read`` (one save's facts), ``stores`` (where a run's files are read), ``judge`` (the guard table's verdict
on one save), ``chain`` (step 0 from a bound record's chain), ``saves`` (every save in a folder counts),
``run_report`` (one run's verdict and report), ``summary`` (the counts at the end), ``jobs`` (runs judged in worker
processes), ``parts`` (a part's opening and closing lines, and the merge of parts), ``runs`` (the runs one audit
reports: each once, this shard's), ``writers`` (one per output kind), ``command`` (the command: reports written as
they come).
"""

from __future__ import annotations

from .command import audit, main
from .parts import summarize
from .runs import Options
from .verdicts import AFFECTED, NOT_AFFECTED, SKIPPED, UNKNOWN, UNREADABLE

__all__ = ["AFFECTED", "NOT_AFFECTED", "SKIPPED", "UNKNOWN", "UNREADABLE", "Options", "audit", "main",
           "summarize"]
