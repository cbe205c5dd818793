"""Upserts by rule: one row to write, and how each column changes if the row exists.

An :class:`Upsert` is a row and, for the columns a conflict may change,
an update rule (``new``, ``keep``, ``new-if-set``); the other columns keep
what is stored. It is written as ``INSERT ... ON CONFLICT DO UPDATE ...
RETURNING`` (SQLite and PostgreSQL) with a statement built once per shape
(table, conflict key, rules) and the row bound at execution, so SQLAlchemy
takes the compiled statement from its cache.

Two upserts of one row, one after the other, merge into one
(:meth:`Upsert.then`) with exactly their effect whether the row exists or
not; :func:`write` sends consecutive upserts of one shape as one multi-row
statement. Nothing here opens a transaction: the caller's connection does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, String, Table, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import ColumnElement

Insert = postgresql.Insert | sqlite.Insert
# How a column changes when its row exists already: "new" takes the new
# value; "keep" keeps a stored value (not NULL, not empty), else takes the
# new one; "new-if-set" takes the new value unless it is NULL or empty.
Update = Literal["new", "keep", "new-if-set"]
# (table, conflict columns, (column, rule) in order): one statement each
Shape = tuple[Table, tuple[str, ...], tuple[tuple[str, Update], ...]]


def dialect_insert(dialect: str, table: Table) -> Insert:
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


@dataclass(frozen=True)
class Upsert:
    """Insert ``row`` into ``table``, or change the row it conflicts with on
    ``conflict`` as ``update`` says (columns it does not name are kept)."""

    table: Table
    conflict: tuple[str, ...]
    row: Mapping[str, Any]
    update: Mapping[str, Update]

    @property
    def key(self) -> tuple[Any, ...]:
        return tuple(self.row[name] for name in self.conflict)

    @property
    def shape(self) -> Shape:
        return self.table, self.conflict, tuple(self.update.items())

    def then(self, later: Upsert) -> Upsert:
        """One upsert with the effect of this one followed by ``later`` (same row).

        Its row is what a new row holds after both; its rules turn a stored
        row into what both would have made of it, column by column.
        """
        if (later.table, later.conflict, later.key) != (self.table, self.conflict, self.key):
            raise ValueError(f"{self.table.name}: cannot merge upserts of different rows")
        text = _text_columns(self.table)
        row = dict(self.row)  # a column neither changes keeps the first's value
        update: dict[str, Update] = {}
        for name in (*self.update, *(n for n in later.update if n not in self.update)):
            first, second = self.update.get(name), later.update.get(name)
            first_value, second_value = self.row[name], later.row[name]
            is_text = name in text
            if second is not None:
                row[name] = _applied(second, first_value, second_value, text=is_text)
            rule = _then(first, first_value, second, second_value, text=is_text)
            if rule is not None:
                update[name] = rule
        return Upsert(self.table, self.conflict, row, update)


def _is_set(value: Any, *, text: bool) -> bool:
    return value is not None and not (text and value == "")


def _applied(rule: Update, stored: Any, new: Any, *, text: bool) -> Any:
    """What ``rule`` makes of a stored value (the SQL of :func:`_changes`, in Python)."""
    if rule == "new":
        return new
    if rule == "keep":
        return stored if _is_set(stored, text=text) else new
    return new if _is_set(new, text=text) else stored


def _then(
    first: Update | None, first_value: Any, second: Update | None, second_value: Any, *, text: bool
) -> Update | None:
    """The one rule that, given the value :meth:`Upsert.then` inserts, changes a
    stored value as ``first`` (with ``first_value``) then ``second`` would
    (None: the stored value stays). ``tests/reporting/test_upserts.py`` checks
    every case against the two rules applied in turn."""
    if second is None:
        return first
    if first == "new" or second == "new":
        return "new"  # the merged value is the final one, whatever was stored
    if first is None:  # second is "keep" or "new-if-set"
        if second == "new-if-set":
            return second if _is_set(second_value, text=text) else None
        if _applied(second, first_value, second_value, text=text) == second_value:
            return second
        # a new row would hold the first's value, a stored one without a value the later's
        raise ValueError("a column only the later upsert keeps needs two upserts")
    if first == second:  # keep then keep, or new-if-set then new-if-set
        return first
    # keep then new-if-set, or new-if-set then keep: the value set decides
    decisive = second_value if first == "keep" else first_value
    return "new" if _is_set(decisive, text=text) else "keep"


def write(connection: Connection, upserts: Sequence[Upsert]) -> list[int]:
    """Write the upserts in order; the ids of their rows, in the same order.

    Consecutive upserts of one shape and distinct rows go as one statement
    (one ``INSERT`` of many rows; PostgreSQL refuses a row changed twice in
    one statement). New rows get their ids in order either way. A statement
    of many rows returns them in no set order: ids are matched by key.
    """
    dialect = connection.dialect.name
    ids: list[int] = []
    for batch in _batches(upserts):
        stmt = _statement(dialect, batch[0].shape)
        if len(batch) == 1:
            ids.append(int(connection.execute(stmt, dict(batch[0].row)).one()[0]))
            continue
        written = connection.execute(stmt, [dict(u.row) for u in batch])
        by_key = {tuple(row[1:]): int(row[0]) for row in written}
        ids.extend(by_key[u.key] for u in batch)
    return ids


def _batches(upserts: Sequence[Upsert]) -> Iterator[list[Upsert]]:
    batch: list[Upsert] = []
    keys: set[tuple[Any, ...]] = set()
    for upsert in upserts:
        if batch and (upsert.shape != batch[0].shape or upsert.key in keys):
            yield batch
            batch, keys = [], set()
        batch.append(upsert)
        keys.add(upsert.key)
    if batch:
        yield batch


@functools.lru_cache(maxsize=64)
def _statement(dialect: str, shape: Shape) -> ReturningInsert[Any]:
    """The upsert of a shape, returning the row's id and conflict key; built once.

    Building the statement (the ``excluded`` alias and its column proxies)
    and its cache key costs more CPU than running it on SQLite.
    """
    table, conflict, update = shape
    stmt = dialect_insert(dialect, table)
    changes = _changes(table, stmt, dict(update)) or {conflict[0]: stmt.excluded[conflict[0]]}
    stmt = stmt.on_conflict_do_update(index_elements=list(conflict), set_=changes)
    return stmt.returning(table.c.id, *(table.c[name] for name in conflict))


def _changes(table: Table, stmt: Insert, update: Mapping[str, Update]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for name, how in update.items():
        column, new = table.c[name], stmt.excluded[name]
        if how == "new":
            changes[name] = new
        elif how == "keep":
            changes[name] = _existing_or_new(column, new)
        else:
            changes[name] = _new_or_existing(column, new)
    return changes


def _is_text(column: Any) -> bool:
    return isinstance(column.type, String)


@functools.cache
def _text_columns(table: Table) -> frozenset[str]:
    """The columns of ``table`` where an empty string counts as no value."""
    return frozenset(column.name for column in table.columns if _is_text(column))


def _existing_or_new(column: Any, new: Any) -> ColumnElement[Any]:
    """Keep a value already stored (not NULL, not empty); else take the new one."""
    return (
        func.coalesce(func.nullif(column, ""), new)
        if _is_text(column)
        else func.coalesce(column, new)
    )


def _new_or_existing(column: Any, new: Any) -> ColumnElement[Any]:
    """Take the new value unless it is NULL or empty."""
    return (
        func.coalesce(func.nullif(new, ""), column)
        if _is_text(column)
        else func.coalesce(new, column)
    )
