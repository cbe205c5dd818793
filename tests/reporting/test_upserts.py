"""Upserts merged: one upsert does what two in turn do, to a new row and to any stored one."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table

from scheduler.reporting.upserts import Update, Upsert

METADATA = MetaData()
TEXT = Table(
    "text",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("k", String),
    Column("c", String),
)
NUMBER = Table(
    "number",
    METADATA,
    Column("id", Integer, primary_key=True),
    Column("k", String),
    Column("c", Integer),
)
RULES: tuple[Update | None, ...] = (None, "new", "keep", "new-if-set")
# NULL, empty (text: no value; a number: a value), and values
VALUES = {TEXT: (None, "", "a", "b"), NUMBER: (None, 0, 1, 2)}
STORED = {TEXT: ("absent", None, "", "a", "b", "c"), NUMBER: ("absent", None, 0, 1, 2, 3)}


def has_value(table: Table, value: Any) -> bool:
    return value is not None and not (table is TEXT and value == "")


def written(upsert: Upsert, stored: Any) -> Any:
    """The column ``c`` after ``upsert``, by the rules as docs/reporting.md states them."""
    new = upsert.row["c"]
    if stored == "absent":
        return new
    rule = upsert.update.get("c")
    if rule == "new":
        return new
    if rule == "keep":
        return stored if has_value(upsert.table, stored) else new
    if rule == "new-if-set":
        return new if has_value(upsert.table, new) else stored
    return stored


def upsert(table: Table, value: Any, rule: Update | None) -> Upsert:
    update: Mapping[str, Update] = {"c": rule} if rule else {}
    return Upsert(table, ("k",), {"k": "row", "c": value}, update)


@pytest.mark.parametrize("table", [TEXT, NUMBER], ids=["text", "number"])
def test_two_upserts_merge_into_one_with_their_effect(table: Table) -> None:
    unmergeable = set()
    for first_rule, second_rule in itertools.product(RULES, RULES):
        for first_value, second_value in itertools.product(VALUES[table], VALUES[table]):
            first, second = (
                upsert(table, first_value, first_rule),
                upsert(table, second_value, second_rule),
            )
            try:
                merged = first.then(second)
            except ValueError:
                unmergeable.add((first_rule, second_rule))
                continue
            for stored in STORED[table]:
                case = (first_rule, first_value, second_rule, second_value, stored)
                assert written(merged, stored) == written(second, written(first, stored)), case
    # Only a column the later upsert keeps and the first leaves alone, when
    # the first's value is not the later's (none the SQL reporter merges).
    assert unmergeable == {(None, "keep")}


def test_upserts_of_different_rows_do_not_merge() -> None:
    other = Upsert(TEXT, ("k",), {"k": "other", "c": "a"}, {})
    with pytest.raises(ValueError, match="different rows"):
        upsert(TEXT, "a", "new").then(other)
