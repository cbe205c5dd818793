"""Migrations to head on SQLite and PostgreSQL, from one process or several at once."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect, text

from scheduler.reporting import (
    DatabaseUnavailableError,
    UnsupportedDatabaseError,
    create_database_engine,
    dispose_engines,
    get_engine,
    list_builds,
    open_database,
)
from scheduler.reporting.models import VERSION_TABLE, Base
from scheduler.reporting.schema import (
    MIGRATION_LOCK_KEY,
    alembic_config,
    current_revision,
    ensure_schema,
    head_revision,
    known_revisions,
)
from tests.reporting.factories import url_of
from tests.reporting.migrate_worker import migrate

TABLES = {
    "sluice_alembic_version",
    "sluice_artifacts",
    "sluice_build_events",
    "sluice_builds",
    "sluice_buildset_refs",
    "sluice_buildsets",
    "sluice_refs",
}


def test_ensure_schema_migrates_an_empty_database_to_head(
    bare_engine: Engine, database_url: str
) -> None:
    assert current_revision(bare_engine) is None
    assert ensure_schema(database_url, engine=bare_engine) == head_revision()
    assert current_revision(bare_engine) == head_revision()
    assert set(inspect(bare_engine).get_table_names()) >= TABLES


def test_ensure_schema_twice_is_a_no_op(engine: Engine) -> None:
    calls: list[str] = []

    @contextmanager
    def lock() -> Iterator[None]:
        calls.append("locked")
        yield

    assert ensure_schema(url_of(engine), engine=engine, lock=lock) == head_revision()
    assert calls == []  # already current: the migration lock is not even taken


def test_the_migration_lock_is_held_around_the_migration(
    bare_engine: Engine, database_url: str
) -> None:
    seen: list[str | None] = []

    @contextmanager
    def lock() -> Iterator[None]:
        seen.append(current_revision(bare_engine))
        yield
        seen.append(current_revision(bare_engine))

    ensure_schema(database_url, engine=bare_engine, lock=lock)
    assert seen == [None, head_revision()]


def test_open_database_gives_this_process_one_migrated_engine(database_url: str) -> None:
    try:
        engine = open_database(database_url)
        assert engine is get_engine(database_url) is open_database(database_url)
        assert current_revision(engine) == head_revision()
        assert list_builds(engine) == []
    finally:
        dispose_engines()


def test_models_match_the_migrations(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE, "compare_type": True}
        )
        assert compare_metadata(context, Base.metadata) == []


def test_a_newer_unknown_revision_is_left_alone(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = 'from-the-future'"))
    assert "from-the-future" not in known_revisions()
    assert ensure_schema(url_of(engine), engine=engine) == "from-the-future"
    assert current_revision(engine) == "from-the-future"


def test_an_unsupported_backend_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedDatabaseError, match="mysql"):
        create_database_engine("mysql://user@localhost/sluice")
    with pytest.raises(UnsupportedDatabaseError, match="invalid database_url"):
        create_database_engine("not a url")


def test_a_migrator_waits_for_one_in_progress_then_finds_the_schema_current(
    database_url: str,
) -> None:
    """Deterministic: a migration is held open; a second ensure_schema must wait, then succeed."""
    holder, waiter = create_database_engine(database_url), create_database_engine(database_url)
    outcome: list[str] = []
    thread = threading.Thread(
        target=lambda: outcome.append(ensure_schema(database_url, engine=waiter))
    )
    try:
        with holder.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY}
                )
            command.upgrade(alembic_config(connection), "head")
            thread.start()
            thread.join(1.0)
            assert thread.is_alive(), "the second migrator did not wait for the first"
        thread.join(30)
        assert outcome == [head_revision()]
    finally:
        thread.join(30)
        holder.dispose()
        waiter.dispose()


def test_an_unreachable_database_is_a_clear_error(tmp_path: Path) -> None:
    url = "postgresql+psycopg://sluice:secret@127.0.0.1:1/sluice"
    engine = create_database_engine(url, connect_args={"connect_timeout": 2})
    try:
        with pytest.raises(DatabaseUnavailableError, match=r"sluice:\*\*\*@127.0.0.1:1/sluice"):
            ensure_schema(url, engine=engine)
    finally:
        engine.dispose()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(DatabaseUnavailableError, match="file"):
        create_database_engine(f"sqlite:///{blocker}/sub/sluice.db")


def test_concurrent_ensure_schema_from_several_processes(database_url: str) -> None:
    """Processes released together race for real (often enough to fail without the locks)."""
    processes = 3
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    children = [
        context.Process(target=migrate, args=(database_url, start, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    start.set()
    outcomes = sorted(results.get(timeout=45) for _ in children)
    for child in children:
        child.join(10)
    assert outcomes == [f"ok {head_revision()}"] * processes, outcomes
    assert all(child.exitcode == 0 for child in children)
    engine = create_database_engine(database_url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as connection:
            rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
        assert len(rows) == 1
    finally:
        engine.dispose()
