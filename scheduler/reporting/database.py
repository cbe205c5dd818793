"""Engines for build history: SQLite (the default) or PostgreSQL.

:func:`create_database_engine` makes an engine from ``database_url``;
:func:`get_engine` keeps one per URL and process, so a Celery prefork child
never shares its parent's pooled connections (a connection used on both
sides of a ``fork`` corrupts its protocol stream).

SQLite is set up for several processes on one file: WAL journal (readers
never block the writer), a busy timeout instead of an immediate "database
is locked", foreign keys on, and write transactions opened with ``BEGIN
IMMEDIATE`` so two writers queue on the lock instead of failing when one
upgrades a read lock. A connection opened with ``read_only_options()``
starts a plain deferred transaction and never takes the write lock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

from scheduler.processlocal import ProcessLocal
from scheduler.reporting.errors import DatabaseUnavailableError, UnsupportedDatabaseError

SUPPORTED_BACKENDS = ("sqlite", "postgresql")
# Seconds a SQLite writer waits for another's lock before giving up.
SQLITE_BUSY_TIMEOUT = 30.0
READ_ONLY_OPTION = "sluice_read_only"

# One engine per process and database URL, never inherited across a fork.
_engines: ProcessLocal[str, Engine] = ProcessLocal("SQL engine", lambda e: e.dispose())


def backend_name(database_url: str) -> str:
    try:
        backend = make_url(database_url).get_backend_name()
    except ArgumentError as exc:
        raise UnsupportedDatabaseError(f"invalid database_url {database_url!r}: {exc}") from None
    if backend not in SUPPORTED_BACKENDS:
        raise UnsupportedDatabaseError(
            f"database_url {database_url!r}: backend {backend!r} is not supported "
            f"(use one of {', '.join(SUPPORTED_BACKENDS)})"
        )
    return backend


def read_only_options() -> dict[str, Any]:
    """Execution options for a connection that only reads."""
    return {READ_ONLY_OPTION: True}


def create_database_engine(database_url: str, **kwargs: Any) -> Engine:
    """A new engine for ``database_url``; prefer :func:`get_engine`."""
    if backend_name(database_url) == "sqlite":
        return _sqlite_engine(database_url, **kwargs)
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(database_url, **kwargs)


def get_engine(database_url: str) -> Engine:
    """The engine of this process for ``database_url``, made on first use."""
    return _engines.get(database_url, lambda: create_database_engine(database_url))


def dispose_engines() -> None:
    """Close the pooled connections of this process's engines (at shutdown)."""
    _engines.close_all()


def _sqlite_engine(database_url: str, **kwargs: Any) -> Engine:
    url = make_url(database_url)
    memory = url.database in (None, "", ":memory:")
    connect_args = kwargs.setdefault("connect_args", {})
    connect_args.setdefault("timeout", SQLITE_BUSY_TIMEOUT)
    if memory:
        # One shared connection, or every checkout would see a new database.
        connect_args.setdefault("check_same_thread", False)
        kwargs.setdefault("poolclass", StaticPool)
    else:
        folder = Path(str(url.database)).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseUnavailableError(f"database {database_url}: {exc}") from None
    engine = create_engine(url, **kwargs)
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, connection_record: Any) -> None:
    # Take transaction control from the sqlite3 module: it would open a
    # deferred transaction only before DML, and not at all before DDL.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT * 1000)}")
        cursor.execute("PRAGMA journal_mode")
        if cursor.fetchone()[0].lower() not in ("wal", "memory"):
            cursor.execute("PRAGMA journal_mode = WAL")
    finally:
        cursor.close()


def _sqlite_on_begin(connection: Connection) -> None:
    if connection.get_execution_options().get(READ_ONLY_OPTION):
        connection.exec_driver_sql("BEGIN")
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
