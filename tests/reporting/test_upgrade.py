"""Upgrading a database with history to a later revision keeps the history.

A later revision is simulated: the shipped migrations are copied with one
more revision that alters ``sluice_buildsets`` the way SQLite must (Alembic's
batch mode recreates the table). With foreign keys on during the migration,
dropping the old table would cascade-delete every build.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect
from sqlalchemy.pool import StaticPool

from scheduler.model.results import Result
from scheduler.reporting import (
    BuildEnd,
    SqlReporter,
    create_database_engine,
    current_revision,
    ensure_schema,
    list_builds,
    schema,
)
from tests.reporting.factories import at, build, buildset, url_of

SECOND_REVISION = """
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _recreate() -> str:
    return "always" if op.get_context().dialect.name == "sqlite" else "auto"


def upgrade() -> None:
    with op.batch_alter_table("sluice_buildsets", recreate=_recreate()) as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sluice_buildsets", recreate=_recreate()) as batch:
        batch.drop_column("note")
"""


@pytest.fixture
def later_migrations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    shipped = Path(schema.__file__).parent / "migrations"
    copy = tmp_path / "migrations"
    shutil.copytree(shipped, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "versions" / "v0002_note.py").write_text(SECOND_REVISION)
    monkeypatch.setattr(schema, "SCRIPT_LOCATION", str(copy))
    return "0002"


def test_history_survives_an_upgrade(engine: Engine, later_migrations: str) -> None:
    SqlReporter(engine).record_build_end(
        BuildEnd(buildset(), build(), Result.SUCCESS, start_time=at(0), end_time=at(5))
    )
    assert current_revision(engine) == "0001"
    assert ensure_schema(url_of(engine), engine=engine) == later_migrations
    assert current_revision(engine) == later_migrations
    columns = {c["name"] for c in inspect(engine).get_columns("sluice_buildsets")}
    assert "note" in columns
    assert [b["uuid"] for b in list_builds(engine)] == ["b-1"]


def test_foreign_keys_are_on_again_after_migrating(sqlite_url: str) -> None:
    # One pooled connection: the one that migrated is the one used next.
    engine = create_database_engine(sqlite_url, poolclass=StaticPool)
    try:
        ensure_schema(sqlite_url, engine=engine)
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()
