"""The record's schema (record_schema.FIELDS) is the one list of its fields: the writer, the reader and the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from accelerate_warmup_patch import record_data, record_schema

MARK = Path(__file__).resolve().parents[2] / "docs" / "mark.md"


def _documented_fields() -> list[str]:
    """The keys docs/mark.md's field table names, in its order (a row may name two: `package`, `version`)."""
    text = MARK.read_text(encoding="utf-8")
    start = text.index("\n## The fields (record 2)\n")
    section = text[start:text.index("\n## ", start + 1)]
    table = section[section.index("\n| field |"):]
    table = table[:table.index("\n\n")]  # the first table only: the scheduler's words follow in their own
    keys: list[str] = []
    for line in table.splitlines():
        if line.startswith("| `"):
            keys += re.findall(r"`([^`]+)`", line.split(" | ")[0])
    return keys


def test_the_docs_field_table_lists_each_field_of_the_schema_in_its_order() -> None:
    assert _documented_fields() == list(record_schema.KEYS)


def test_each_optional_field_says_in_the_docs_where_it_is_absent() -> None:
    text = MARK.read_text(encoding="utf-8")
    for field in record_schema.FIELDS:
        if field.optional:
            row = next(line for line in text.splitlines() if line.startswith(f"| `{field.key}` |"))
            assert "Absent" in row, row


def test_the_writer_refuses_a_field_the_schema_does_not_list() -> None:
    values = {field.key: None for field in record_schema.FIELDS}
    with pytest.raises(KeyError, match="not a field of the record"):
        record_schema.written({**values, "new_field": 1})
    with pytest.raises(KeyError, match="lacks step0"):
        record_schema.written({key: value for key, value in values.items() if key != "step0"})


def test_a_record_is_written_in_the_schemas_order_with_its_optional_fields_only_where_given() -> None:
    values = {field.key: field.key for field in reversed(record_schema.FIELDS)}
    assert list(record_schema.written(values)) == list(record_schema.KEYS)
    assert "ranks" not in record_schema.written({k: v for k, v in values.items() if k != "ranks"})


def test_the_record_this_release_writes_is_the_newest_number_the_schema_holds() -> None:
    assert max(field.since for field in record_schema.FIELDS) == record_data.RECORD
    assert record_schema.RECORD_1_KEYS == ("record", "package", "version", "mode", "deepspeed", "reference",
                                           "global_steps", "scheduler")


def test_an_older_reader_ignores_a_field_it_does_not_know() -> None:
    # the version rule that lets a field be added without a new record number: the reader keeps what it knows
    raw = {"record": 1, "package": record_data.PACKAGE, "version": "0.5.0", "mode": "reset", "deepspeed": "0.15.2",
           "reference": "0.19.8", "global_steps": 3, "scheduler": None, "a_later_field": {"x": 1}}
    assert "a_later_field" not in record_data.valid_record(raw)
