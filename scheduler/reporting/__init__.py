"""Reporters and build history (the SQL reporter, the log reporter, queries).

The scheduler builds a :class:`ReporterSet` of reporters and reports four
moments of each buildset (start, build start, build end, end) with the
frozen records of :mod:`.records`; every reporter is idempotent, and a
failing one is logged, never fatal. The SQL reporter keeps one row per
buildset and per build attempt; :func:`ensure_schema` migrates the database
(safe to call from many processes at once). The CLI reads history back with
:func:`list_builds` and :func:`list_buildsets`, whose dictionaries are the
stable ``--json`` output. See docs/reporting.md.
"""

from __future__ import annotations

from scheduler.reporting.database import create_database_engine, dispose_engines, get_engine
from scheduler.reporting.errors import (
    DatabaseUnavailableError,
    ReportingError,
    SchemaError,
    UnsupportedDatabaseError,
)
from scheduler.reporting.log_reporter import LogReporter
from scheduler.reporting.queries import (
    BuildDict,
    BuildsetDict,
    estimate_duration,
    estimate_durations,
    job_durations,
    list_builds,
    list_buildsets,
)
from scheduler.reporting.records import (
    Artifact,
    BuildEnd,
    BuildEvent,
    BuildInfo,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
    ItemReport,
    RefInfo,
)
from scheduler.reporting.reporter import Reporter, ReporterSet
from scheduler.reporting.schema import (
    MigrationLock,
    current_revision,
    ensure_schema,
    head_revision,
    open_database,
)
from scheduler.reporting.sql import (
    SqlReporter,
    prune_history,
    record_build_end,
    record_build_event,
    record_build_start,
    record_buildset_end,
    record_buildset_start,
)

__all__ = [
    "Artifact",
    "BuildDict",
    "BuildEnd",
    "BuildEvent",
    "BuildInfo",
    "BuildStart",
    "BuildsetDict",
    "BuildsetEnd",
    "BuildsetInfo",
    "BuildsetStart",
    "DatabaseUnavailableError",
    "ItemReport",
    "LogReporter",
    "MigrationLock",
    "RefInfo",
    "Reporter",
    "ReporterSet",
    "ReportingError",
    "SchemaError",
    "SqlReporter",
    "UnsupportedDatabaseError",
    "create_database_engine",
    "current_revision",
    "dispose_engines",
    "ensure_schema",
    "estimate_duration",
    "estimate_durations",
    "get_engine",
    "head_revision",
    "job_durations",
    "list_builds",
    "list_buildsets",
    "open_database",
    "prune_history",
    "record_build_end",
    "record_build_event",
    "record_build_start",
    "record_buildset_end",
    "record_buildset_start",
]
