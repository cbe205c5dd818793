"""The SQL reporter: build history written idempotently.

Each ``record_*`` function is one transaction of upserts (``INSERT ... ON
CONFLICT DO UPDATE``, in both SQLite and PostgreSQL), keyed by the buildset
uuid and the build's ``(uuid, attempt)``. A task redelivered after a crash
reports again and updates the same rows; a second *attempt* of a build is a
second row. Records may arrive out of order: a build's end before its start
(or without one) still makes a complete row, and a late start never erases
a result; any record creates its buildset's row if it is missing.

Errors are SQLAlchemy's own (the database is down, a constraint broke);
callers reach this module through :class:`SqlReporter`, whose failures the
reporter set logs without stopping the others.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Connection, Engine, String, Table, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningInsert
from sqlalchemy.sql.elements import ColumnElement

from scheduler.reporting.models import (
    ArtifactRow,
    Base,
    BuildEventRow,
    BuildRow,
    BuildsetRefRow,
    BuildsetRow,
    RefRow,
)
from scheduler.reporting.records import (
    BuildEnd,
    BuildEvent,
    BuildInfo,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
    ItemReport,
    RefInfo,
    require_aware,
    utcnow,
)

_TABLES = Base.metadata.tables
BUILDSETS: Table = _TABLES[BuildsetRow.__tablename__]
BUILDS: Table = _TABLES[BuildRow.__tablename__]
REFS: Table = _TABLES[RefRow.__tablename__]
BUILDSET_REFS: Table = _TABLES[BuildsetRefRow.__tablename__]
ARTIFACTS: Table = _TABLES[ArtifactRow.__tablename__]
BUILD_EVENTS: Table = _TABLES[BuildEventRow.__tablename__]

Insert = postgresql.Insert | sqlite.Insert
# How a column changes when its row exists already: "new" takes the new
# value; "keep" keeps a stored value (not NULL, not empty), else takes the
# new one; "new-if-set" takes the new value unless it is NULL or empty.
Update = Literal["new", "keep", "new-if-set"]


def _insert(connection: Connection, table: Table) -> Insert:
    return _dialect_insert(connection.dialect.name, table)


def _dialect_insert(dialect: str, table: Table) -> Insert:
    return postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)


@functools.lru_cache(maxsize=64)
def _upsert(
    dialect: str, table_name: str, conflict: tuple[str, ...], update: tuple[tuple[str, Update], ...]
) -> ReturningInsert[Any]:
    """The upsert of ``table_name`` returning the row's id, built once per shape.

    Its values are bound at execution (``connection.execute(stmt, row)``):
    building the statement (the ``excluded`` alias and its column proxies)
    and its cache key cost ~5 ms of CPU, more than running it on SQLite, and
    a build's start and end each upsert a buildset and a build.
    """
    table = _TABLES[table_name]
    stmt = _dialect_insert(dialect, table)
    changes = _changes(table, stmt, dict(update)) or {conflict[0]: stmt.excluded[conflict[0]]}
    stmt = stmt.on_conflict_do_update(index_elements=list(conflict), set_=changes)
    return stmt.returning(table.c.id)


def _upserted(
    connection: Connection,
    table: Table,
    conflict: tuple[str, ...],
    row: Mapping[str, Any],
    update: Mapping[str, Update],
) -> int:
    """Insert ``row`` or update the row it conflicts with as ``update`` says; its id."""
    stmt = _upsert(connection.dialect.name, table.name, conflict, tuple(update.items()))
    return int(connection.execute(stmt, dict(row)).scalar_one())


def _is_text(column: Any) -> bool:
    return isinstance(column.type, String)


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


# ------------------------------------------------------------------ buildsets


def _ref_values(ref: RefInfo) -> dict[str, str]:
    return {
        "project": ref.project,
        "branch": ref.branch,
        "ref": ref.ref,
        "change": ref.change,
        "patchset": ref.patchset,
        "oldrev": ref.oldrev,
        "newrev": ref.newrev,
        "ref_url": ref.ref_url,
    }


def _upsert_buildset(
    connection: Connection,
    info: BuildsetInfo,
    values: Mapping[str, Any],
    update: Mapping[str, Update],
) -> int:
    """Insert or update a buildset row; return its id.

    ``update`` names the columns to change when the row exists, and how.
    """
    now = utcnow()
    row = {
        "uuid": info.uuid,
        "tenant": info.tenant,
        "pipeline": info.pipeline,
        "event_id": info.event_id,
        **_ref_values(info.ref),
        "result": None,
        "message": "",
        "start_time": None,
        "end_time": None,
        "updated": now,
        **values,
    }
    return _upserted(connection, BUILDSETS, ("uuid",), row, update)


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


def _link_refs(connection: Connection, buildset_id: int, info: BuildsetInfo) -> None:
    for ref in info.all_refs:
        stmt = _insert(connection, REFS).values(_ref_values(ref))
        stmt = stmt.on_conflict_do_update(
            index_elements=["project", "branch", "ref", "change", "patchset", "oldrev", "newrev"],
            set_={"ref_url": _new_or_existing(REFS.c.ref_url, stmt.excluded.ref_url)},
        )
        ref_id = connection.execute(stmt.returning(REFS.c.id)).scalar_one()
        link = _insert(connection, BUILDSET_REFS).values(buildset_id=buildset_id, ref_id=ref_id)
        connection.execute(link.on_conflict_do_nothing())


def record_buildset_start(engine: Engine, record: BuildsetStart) -> None:
    """A buildset started (its item was enqueued and its jobs frozen)."""
    with engine.begin() as connection:
        _buildset_start(connection, record)


def _buildset_start(connection: Connection, record: BuildsetStart) -> int:
    buildset_id = _upsert_buildset(
        connection,
        record.buildset,
        {"start_time": record.start_time},
        {"start_time": "keep", "event_id": "keep", "updated": "new"},
    )
    _link_refs(connection, buildset_id, record.buildset)
    return buildset_id


def record_buildset_end(engine: Engine, record: BuildsetEnd) -> None:
    """A buildset ended with ``record.result`` (reported on its item)."""
    with engine.begin() as connection:
        _buildset_end(connection, record)


def _buildset_end(connection: Connection, record: BuildsetEnd) -> None:
    buildset_id = _upsert_buildset(
        connection,
        record.buildset,
        {"result": record.result, "message": record.message, "end_time": record.end_time},
        {"result": "new", "message": "new", "end_time": "new", "updated": "new"},
    )
    _link_refs(connection, buildset_id, record.buildset)


def record_item(engine: Engine, report: ItemReport) -> None:
    """A finished item's whole history in ONE transaction: the same rows as its
    buildset's start, each build's start and end, and its end, recorded in turn
    (the buildset is upserted at its start and end only, not for every build)."""
    with engine.begin() as connection:
        buildset_id = _buildset_start(connection, report.start)
        for start, end in report.builds:
            if start is not None:
                _build_start(connection, start, buildset_id)
            _build_end(connection, end, buildset_id)
        _buildset_end(connection, report.end)


# ------------------------------------------------------------------ builds


def _build_values(buildset_id: int, buildset: BuildsetInfo, build: BuildInfo) -> dict[str, Any]:
    ref = build.ref or buildset.ref
    return {
        "uuid": build.uuid,
        "attempt": build.attempt,
        "buildset_id": buildset_id,
        "tenant": buildset.tenant,
        "pipeline": buildset.pipeline,
        "job": build.job,
        "project": ref.project,
        "branch": ref.branch,
        "ref": ref.ref,
        "change": ref.change,
        "newrev": ref.newrev,
        "voting": build.voting,
        "nodeset": build.nodeset,
        "executor": "",
        "log_url": "",
        "result": None,
        "error_detail": "",
        "result_data": {},
        "start_time": None,
        "end_time": None,
        "updated": utcnow(),
    }


def _upsert_build(
    connection: Connection,
    buildset: BuildsetInfo,
    build: BuildInfo,
    values: Mapping[str, Any],
    update: Mapping[str, Update],
    *,
    buildset_id: int | None = None,
) -> int:
    if buildset_id is None:
        # Touch the buildset: its ``updated`` tells how recent its history is.
        buildset_id = _upsert_buildset(connection, buildset, {}, {"updated": "new"})
    row = {**_build_values(buildset_id, buildset, build), **values}
    return _upserted(connection, BUILDS, ("uuid", "attempt"), row, update)


def record_build_start(engine: Engine, record: BuildStart) -> None:
    """A build attempt started on an executor."""
    with engine.begin() as connection:
        _build_start(connection, record)


def _build_start(
    connection: Connection, record: BuildStart, buildset_id: int | None = None
) -> None:
    values = {
        "start_time": record.start_time,
        "executor": record.executor,
        "log_url": record.log_url,
    }
    update: dict[str, Update] = {
        "start_time": "keep",
        "executor": "keep",
        "log_url": "keep",
        "nodeset": "new-if-set",
        "updated": "new",
    }
    _upsert_build(
        connection, record.buildset, record.build, values, update, buildset_id=buildset_id
    )


def record_build_end(engine: Engine, record: BuildEnd) -> None:
    """A build attempt ended (or was decided without running: SKIPPED)."""
    with engine.begin() as connection:
        _build_end(connection, record)


def _build_end(connection: Connection, record: BuildEnd, buildset_id: int | None = None) -> None:
    values = {
        "result": record.result,
        "end_time": record.end_time,
        "start_time": record.start_time,
        "log_url": record.log_url,
        "error_detail": record.error_detail,
        "result_data": dict(record.result_data),
    }
    update: dict[str, Update] = {
        "result": "new",
        "end_time": "new",
        "error_detail": "new",
        "result_data": "new",
        "voting": "new",
        "start_time": "keep",
        "log_url": "new-if-set",
        "nodeset": "new-if-set",
        "updated": "new",
    }
    build_id = _upsert_build(
        connection, record.buildset, record.build, values, update, buildset_id=buildset_id
    )
    _replace_artifacts(connection, build_id, record)
    for build_event in record.events:
        _insert_event(connection, build_id, build_event)


def record_build_event(
    engine: Engine, buildset: BuildsetInfo, build: BuildInfo, build_event: BuildEvent
) -> None:
    """A notable moment of a running build (recorded once per type and time)."""
    with engine.begin() as connection:
        build_id = _upsert_build(connection, buildset, build, {}, {"updated": "new"})
        _insert_event(connection, build_id, build_event)


def _replace_artifacts(connection: Connection, build_id: int, record: BuildEnd) -> None:
    connection.execute(delete(ARTIFACTS).where(ARTIFACTS.c.build_id == build_id))
    rows = [
        {"build_id": build_id, "name": a.name, "url": a.url, "meta": dict(a.metadata)}
        for a in {artifact.name: artifact for artifact in record.artifacts}.values()
    ]
    if rows:
        connection.execute(ARTIFACTS.insert(), rows)


def _insert_event(connection: Connection, build_id: int, build_event: BuildEvent) -> None:
    stmt = _insert(connection, BUILD_EVENTS).values(
        build_id=build_id,
        event_type=build_event.event_type,
        event_time=build_event.event_time,
        description=build_event.description,
    )
    connection.execute(stmt.on_conflict_do_nothing())


def prune_history(engine: Engine, older_than: datetime) -> int:
    """Delete buildsets last updated before ``older_than``, with their builds.

    Builds, artifacts and events go with their buildset (``ON DELETE
    CASCADE``); refs no buildset tests any more go too. Returns the number
    of buildsets deleted.
    """
    require_aware("older_than", older_than)
    with engine.begin() as connection:
        deleted = connection.execute(delete(BUILDSETS).where(BUILDSETS.c.updated < older_than))
        linked = select(BUILDSET_REFS.c.ref_id)
        connection.execute(delete(REFS).where(REFS.c.id.not_in(linked)))
    return int(deleted.rowcount)


class SqlReporter:
    """The reporter that keeps build history in SQL (see :mod:`scheduler.reporting.sql`)."""

    def __init__(self, engine: Engine, name: str = "sql") -> None:
        self.engine = engine
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def record_buildset_start(self, record: BuildsetStart) -> None:
        record_buildset_start(self.engine, record)

    def record_build_start(self, record: BuildStart) -> None:
        record_build_start(self.engine, record)

    def record_build_end(self, record: BuildEnd) -> None:
        record_build_end(self.engine, record)

    def record_buildset_end(self, record: BuildsetEnd) -> None:
        record_buildset_end(self.engine, record)

    def record_item(self, report: ItemReport) -> None:
        record_item(self.engine, report)
