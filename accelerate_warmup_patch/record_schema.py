"""The record's fields, as data: each top-level key, its type, its bound, its meaning, and since when it is written.

The writer (``record_writer.record``) builds a record in this order and refuses a key not listed here; the one check of
a record read back (``record_data.valid_record``, by the job at a load and by the audit) takes its fields from here;
docs/mark.md's field table is checked against it by a unit test. Adding a field is one row here, its reader in
``record_data``, and its line in docs/mark.md.

The version rules (docs/mark.md, "Record versions"):

- A reader takes the keys it knows and ignores the others, so an older audit reads a newer record 2 as the record 2 it
  knows: a field added later is neither required nor refused by it.
- A new field keeps the record's number where a reader that ignores it is never more reassuring than one that reads it:
  it only informs, or only adds doubt that the writer already acts on (``ranks``: the writer binds the record only
  where every rank told it, so an older audit reading the binding alone is right).
- A new field needs a new record number where ignoring it could clear a run it should not, or where a field changes
  its meaning or type: older audits then read the record as not theirs ("not a record this release reads"), which is
  doubt, never a false "not affected". A new number is read by the audit and the job alike, and older numbers stay
  read (record 1 as a claim, bound to no file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TEXT = 200  # a name, a release, a tag: the characters of a text field a reader keeps
WHY = 1000  # a sentence


@dataclass(frozen=True)
class Field:
    """One top-level key of the record."""

    key: str
    kind: str  # its JSON type, in words
    bound: str  # what a reader accepts of it
    meaning: str
    since: int  # the record number that first holds it
    since_release: str  # the package release that first wrote it
    optional: bool = False  # absent where it does not apply (the writer leaves it out)


FIELDS = (
    Field("record", "integer", "1 or 2", "the record's number", 1, "0.5.0"),
    Field("package", "string", "accelerate-warmup-patch", "the writer's package", 1, "0.5.0"),
    Field("version", "string", f"{TEXT} characters", "the package's __version__", 1, "0.5.0"),
    Field("mode", "string", f"{TEXT} characters", "the mode armed at the save (reset, step or warn)", 1, "0.5.0"),
    Field("deepspeed", "string", f"{TEXT} characters", "the running DeepSpeed release", 1, "0.5.0"),
    Field("reference", "string", f"{TEXT} characters", "the release whose behaviour the patch backports", 1, "0.5.0"),
    Field("global_steps", "integer", "0 to 2**63 - 1", "engine.global_steps at the save", 1, "0.5.0"),
    Field("bound_to", "object", "file and size, members and digest (binding.py), or file null and why",
          "the save's files the record is bound to", 2, "0.6.0"),
    Field("scheduler", "object or null", "class, step0 (one of SCHEDULER_STEP0S), lrs_before, lrs_after, why",
          "what this process's patch did about the engine's scheduler", 1, "0.5.0"),
    Field("first_step", "object or null", "observed, and lrs and global_steps, or why",
          "this process's first optimizer step", 2, "0.6.0"),
    Field("step0", "object", "how (one of HOWS) and STEP0_KEYS", "the run's step 0, across processes", 2, "0.6.0"),
    Field("loads", "list", "at most MAX_LOADS objects of HOP_KEYS", "the loads behind this save, newest first",
          2, "0.6.0"),
    Field("ranks", "integer", "2 or more", "the job's world size: the record is bound only where every rank told its "
          "writer its word", 2, "0.8.0", optional=True),
)
KEYS = tuple(field.key for field in FIELDS)
RECORD_1_KEYS = tuple(field.key for field in FIELDS if field.since == 1)
TEXTS = tuple(field.key for field in FIELDS if field.kind == "string" and field.key != "package")


def written(values: dict[str, Any]) -> dict[str, Any]:
    """A record in the schema's order, from the writer's ``values``: every field that is not optional, an optional
    one where given; raises KeyError naming a key the schema does not list, or a field that is missing."""
    unknown = sorted(set(values) - set(KEYS))
    if unknown:
        raise KeyError(f"not a field of the record (record_schema.FIELDS): {', '.join(unknown)}")
    missing = [field.key for field in FIELDS if not field.optional and field.key not in values]
    if missing:
        raise KeyError(f"the record lacks {', '.join(missing)}")
    return {key: values[key] for key in KEYS if key in values}
