"""The build history schema: Alembic migrations run from code.

:func:`ensure_schema` brings a database to the newest revision shipped in
``scheduler/reporting/migrations`` (no ``alembic.ini`` is read). Any number of
processes may call it at once:

* SQLite: the migration runs in one ``BEGIN IMMEDIATE`` transaction; a second
  migrator waits for the file's write lock, then finds the schema current.
* PostgreSQL: the migration runs in one transaction (DDL is transactional
  there) holding ``pg_advisory_xact_lock(MIGRATION_LOCK_KEY)``; a second
  migrator waits on the lock, then finds the schema current.
* ``lock`` is a seam for a cluster-wide lock (the ZooKeeper lock at
  ``/locks/connection/database/migration``): when given, it is held around
  the migration, outside the database's own lock.

A database already at a revision this code does not know is taken to be
newer (a rolling upgrade, a newer worker migrated first): it is left alone
with a warning, since migrations only ever add to the schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

from alembic import command
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError, OperationalError

from scheduler.reporting.database import get_engine, read_only_options
from scheduler.reporting.errors import DatabaseUnavailableError, SchemaError
from scheduler.reporting.models import VERSION_TABLE

log = logging.getLogger("sluice.reporting.schema")

SCRIPT_LOCATION = "scheduler.reporting:migrations"
# An arbitrary, fixed 64-bit key: "sluice-db" in ASCII.
MIGRATION_LOCK_KEY = 0x736C_7569_6365_6462 & 0x7FFF_FFFF_FFFF_FFFF

MigrationLock = Callable[[], AbstractContextManager[object]]


def alembic_config(connection: Connection | None = None, database_url: str = "") -> Config:
    """An Alembic config for the shipped migrations, built in code.

    With ``connection``, env.py migrates on it (inside its transaction);
    otherwise it opens its own from ``database_url`` (Alembic's CLI-style
    use, e.g. ``command.revision(..., autogenerate=True)`` by a developer).
    """
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    config.attributes["database_url"] = database_url
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise SchemaError("no Alembic revision shipped with scheduler.reporting")
    return head


def known_revisions() -> set[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return {revision.revision for revision in script.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for an empty database."""
    with engine.connect().execution_options(**read_only_options()) as connection:
        return _current_revision(connection)


def ensure_schema(
    database_url: str,
    *,
    lock: MigrationLock | None = None,
    engine: Engine | None = None,
) -> str:
    """Upgrade the database to the newest revision; return the revision it is at.

    That is this code's head, or a newer revision left alone (see above).
    """
    engine = engine if engine is not None else get_engine(database_url)
    head = head_revision()
    try:
        current = current_revision(engine)
    except OperationalError as exc:
        where = engine.url.render_as_string(hide_password=True)
        raise DatabaseUnavailableError(f"database {where}: {exc.orig}") from exc
    if _is_current(current, head):
        return current or head
    with (lock or nullcontext)():
        try:
            _upgrade(engine, head)
        except DBAPIError as exc:
            # Only a migrator outside our locks (another tool) races us here:
            # if it got the schema to head, all is well; otherwise try once more.
            log.warning("schema migration failed (%s); checking again", exc.__class__.__name__)
            if not _is_current(current_revision(engine), head):
                _upgrade(engine, head)
    return head


def open_database(database_url: str, *, lock: MigrationLock | None = None) -> Engine:
    """This process's engine for ``database_url``, its schema brought to head.

    The one call the scheduler and the CLI need before reporting or reading
    history; cheap once the schema is current.
    """
    engine = get_engine(database_url)
    ensure_schema(database_url, lock=lock, engine=engine)
    return engine


def _is_current(revision: str | None, head: str) -> bool:
    if revision == head:
        return True
    if revision is not None and revision not in known_revisions():
        log.warning(
            "database schema at revision %s, unknown to this version (head %s); "
            "assuming a newer Sluice migrated it",
            revision,
            head,
        )
        return True
    return False


def _upgrade(engine: Engine, head: str) -> None:
    try:
        with (
            engine.connect() as connection,
            _foreign_keys_off(connection),
            connection.begin(),
        ):
            _migrate(connection, head)
    except DBAPIError:
        raise
    except Exception as exc:
        raise SchemaError(f"database migration to {head} failed: {exc}") from exc


def _migrate(connection: Connection, head: str) -> None:
    """Migrate inside the caller's transaction, holding the database's lock."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    before = _current_revision(connection)
    if _is_current(before, head):
        return  # another process migrated while we waited
    log.info("migrating database schema from %s to %s", before or "empty", head)
    command.upgrade(alembic_config(connection), "head")
    if connection.dialect.name == "sqlite":
        broken = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
        if broken:
            raise SchemaError(f"migration to {head} broke foreign keys: {broken[:5]}")


@contextmanager
def _foreign_keys_off(connection: Connection) -> Iterator[None]:
    """SQLite: foreign keys off while migrating, on again after.

    Alembic's batch mode recreates a table to alter it; with foreign keys on,
    dropping the old copy would cascade-delete the rows that reference it.
    The pragma is a no-op inside a transaction, so it is set before BEGIN,
    on the driver's connection.
    """
    if connection.dialect.name != "sqlite":
        yield
        return
    driver = connection.connection.driver_connection
    assert driver is not None
    driver.execute("PRAGMA foreign_keys = OFF")
    try:
        yield
    finally:
        driver.execute("PRAGMA foreign_keys = ON")


def _current_revision(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()
