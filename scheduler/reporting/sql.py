"""The SQL reporter: build history written idempotently.

Each ``record_*`` function is one transaction of upserts (``INSERT ... ON
CONFLICT DO UPDATE``, in both SQLite and PostgreSQL: :mod:`.upserts`), keyed by the buildset
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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, delete, select

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
from scheduler.reporting.upserts import Insert, Update, Upsert, dialect_insert, write

_TABLES = Base.metadata.tables
BUILDSETS: Table = _TABLES[BuildsetRow.__tablename__]
BUILDS: Table = _TABLES[BuildRow.__tablename__]
REFS: Table = _TABLES[RefRow.__tablename__]
BUILDSET_REFS: Table = _TABLES[BuildsetRefRow.__tablename__]
ARTIFACTS: Table = _TABLES[ArtifactRow.__tablename__]
BUILD_EVENTS: Table = _TABLES[BuildEventRow.__tablename__]

BUILD_KEY = ("uuid", "attempt")
REF_KEY = ("project", "branch", "ref", "change", "patchset", "oldrev", "newrev")
_DELETE_ARTIFACTS = delete(ARTIFACTS).where(
    ARTIFACTS.c.build_id.in_(bindparam("build_ids", expanding=True))
)


@functools.lru_cache(maxsize=8)
def _insert_or_ignore(dialect: str, table: Table) -> Insert:
    """``INSERT ... ON CONFLICT DO NOTHING`` of ``table``, rows bound at execution."""
    return dialect_insert(dialect, table).on_conflict_do_nothing()


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


def _buildset_upsert(
    info: BuildsetInfo, values: Mapping[str, Any], update: Mapping[str, Update]
) -> Upsert:
    """A buildset row; ``update`` names the columns to change when it exists, and how."""
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
        "reason": None,
        "resets": None,
        "reset_cost": None,
        "updated": utcnow(),
        **values,
    }
    return Upsert(BUILDSETS, ("uuid",), row, update)


def _buildset_start(record: BuildsetStart) -> Upsert:
    return _buildset_upsert(
        record.buildset,
        {"start_time": record.start_time},
        {"start_time": "keep", "event_id": "keep", "updated": "new"},
    )


def _json(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def _buildset_end(record: BuildsetEnd) -> Upsert:
    return _buildset_upsert(
        record.buildset,
        {
            "result": record.result,
            "message": record.message,
            "end_time": record.end_time,
            "reason": _json(record.reason),
            "resets": _json(record.resets),
            "reset_cost": _json(record.reset_cost),
        },
        {
            "result": "new",
            "message": "new",
            "end_time": "new",
            "reason": "new",
            "resets": "new",
            "reset_cost": "new",
            "updated": "new",
        },
    )


def _link_refs(connection: Connection, buildset_id: int, refs: Sequence[RefInfo]) -> None:
    ref_ids = write(
        connection,
        [Upsert(REFS, REF_KEY, _ref_values(ref), {"ref_url": "new-if-set"}) for ref in refs],
    )
    if ref_ids:
        connection.execute(
            _insert_or_ignore(connection.dialect.name, BUILDSET_REFS),
            [{"buildset_id": buildset_id, "ref_id": ref_id} for ref_id in ref_ids],
        )


def record_buildset_start(engine: Engine, record: BuildsetStart) -> None:
    """A buildset started (its item was enqueued and its jobs frozen)."""
    with engine.begin() as connection:
        [buildset_id] = write(connection, [_buildset_start(record)])
        _link_refs(connection, buildset_id, record.buildset.all_refs)


def record_buildset_end(engine: Engine, record: BuildsetEnd) -> None:
    """A buildset ended with ``record.result`` (reported on its item)."""
    with engine.begin() as connection:
        [buildset_id] = write(connection, [_buildset_end(record)])
        _link_refs(connection, buildset_id, record.buildset.all_refs)


# ------------------------------------------------------------------ builds


def _build_upsert(
    buildset_id: int,
    buildset: BuildsetInfo,
    build: BuildInfo,
    values: Mapping[str, Any],
    update: Mapping[str, Update],
) -> Upsert:
    ref = build.ref or buildset.ref
    row = {
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
        **values,
    }
    return Upsert(BUILDS, BUILD_KEY, row, update)


def _touched_buildset(connection: Connection, buildset: BuildsetInfo) -> int:
    """The buildset's id, its row made if missing; its ``updated`` tells how
    recent its history is."""
    [buildset_id] = write(connection, [_buildset_upsert(buildset, {}, {"updated": "new"})])
    return buildset_id


def record_build_start(engine: Engine, record: BuildStart) -> None:
    """A build attempt started on an executor."""
    with engine.begin() as connection:
        buildset_id = _touched_buildset(connection, record.buildset)
        write(connection, [_build_start(record, buildset_id)])


def _build_start(record: BuildStart, buildset_id: int) -> Upsert:
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
    return _build_upsert(buildset_id, record.buildset, record.build, values, update)


def record_build_end(engine: Engine, record: BuildEnd) -> None:
    """A build attempt ended (or was decided without running: SKIPPED)."""
    with engine.begin() as connection:
        buildset_id = _touched_buildset(connection, record.buildset)
        [build_id] = write(connection, [_build_end(record, buildset_id)])
        _record_outputs(connection, [(build_id, record)])


def _build_end(record: BuildEnd, buildset_id: int) -> Upsert:
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
    return _build_upsert(buildset_id, record.buildset, record.build, values, update)


def record_build_event(
    engine: Engine, buildset: BuildsetInfo, build: BuildInfo, build_event: BuildEvent
) -> None:
    """A notable moment of a running build (recorded once per type and time)."""
    with engine.begin() as connection:
        buildset_id = _touched_buildset(connection, buildset)
        [build_id] = write(
            connection, [_build_upsert(buildset_id, buildset, build, {}, {"updated": "new"})]
        )
        _insert_events(connection, [(build_id, build_event)])


def _record_outputs(connection: Connection, ends: Sequence[tuple[int, BuildEnd]]) -> None:
    """What build ends leave besides their rows: each build's artifacts, replaced
    by those of its (last) end, and their events, kept once per type and time."""
    last = dict(ends)
    if last:
        connection.execute(_DELETE_ARTIFACTS, {"build_ids": list(last)})
    artifacts = [
        {"build_id": build_id, "name": a.name, "url": a.url, "meta": dict(a.metadata)}
        for build_id, record in last.items()
        for a in {artifact.name: artifact for artifact in record.artifacts}.values()
    ]
    if artifacts:
        connection.execute(ARTIFACTS.insert(), artifacts)
    _insert_events(connection, [(build_id, e) for build_id, record in ends for e in record.events])


def _insert_events(connection: Connection, events: Sequence[tuple[int, BuildEvent]]) -> None:
    if events:
        connection.execute(
            _insert_or_ignore(connection.dialect.name, BUILD_EVENTS),
            [
                {
                    "build_id": build_id,
                    "event_type": e.event_type,
                    "event_time": e.event_time,
                    "description": e.description,
                }
                for build_id, e in events
            ],
        )


# ------------------------------------------------------------------ items


def record_item(engine: Engine, report: ItemReport) -> None:
    """A finished item's whole history in ONE transaction, with the rows its
    buildset's start, each build's start and end, and its end make in turn.

    Each row is written once: the buildset's start and end as one upsert, a
    build's start and end as one (:meth:`Upsert.then`), the builds in one
    statement (:func:`write`); its refs are linked once.
    """
    start, end = report.start, report.end
    with engine.begin() as connection:
        [buildset_id] = write(connection, [_buildset_start(start).then(_buildset_end(end))])
        # each ref once: upserting it again with the same values changes nothing
        refs = dict.fromkeys((*start.buildset.all_refs, *end.buildset.all_refs))
        _link_refs(connection, buildset_id, tuple(refs))
        builds = [_build_history(s, e, buildset_id) for s, e in report.builds]
        ends = [e for _, e in report.builds]
        _record_outputs(connection, list(zip(write(connection, builds), ends, strict=True)))


def _build_history(start: BuildStart | None, end: BuildEnd, buildset_id: int) -> Upsert:
    """The upsert of a build attempt's start (if it ran) then its end."""
    ended = _build_end(end, buildset_id)
    return ended if start is None else _build_start(start, buildset_id).then(ended)


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
