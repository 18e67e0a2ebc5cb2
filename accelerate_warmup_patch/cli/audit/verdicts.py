"""The verdicts the audit gives, and the names of what it reads beside a checkpoint."""

from __future__ import annotations

from ...record_data import RECORD_FILE as RECORD_FILE  # the record a patched run writes in each tag folder (judge's)

AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE = "affected", "not affected", "unknown", "unreadable"
SKIPPED = "skipped"  # a symlinked folder inside a PATH: not followed, named (its own PATH audits it)
# every verdict, in the order the README, audit --help, docs/audit.md and the summary list them (a unit test checks)
VERDICTS = (AFFECTED, NOT_AFFECTED, UNKNOWN, UNREADABLE, SKIPPED)
