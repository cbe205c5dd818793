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
from alembic import command
from sqlalchemy import Engine, inspect, text
from sqlalchemy.pool import StaticPool

from scheduler.model.results import Result
from scheduler.reporting import (
    BuildEnd,
    BuildsetEnd,
    SqlReporter,
    create_database_engine,
    current_revision,
    ensure_schema,
    list_builds,
    list_buildsets,
    schema,
)
from tests.reporting.factories import at, build, buildset, url_of

SECOND_REVISION = """
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "9999"
down_revision = "{head}"
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
    head = schema.head_revision()
    (copy / "versions" / "v9999_note.py").write_text(SECOND_REVISION.replace("{head}", head))
    monkeypatch.setattr(schema, "SCRIPT_LOCATION", str(copy))
    return "9999"


def test_history_survives_an_upgrade(engine: Engine, later_migrations: str) -> None:
    SqlReporter(engine).record_build_end(
        BuildEnd(buildset(), build(), Result.SUCCESS, start_time=at(0), end_time=at(5))
    )
    assert current_revision(engine) == "0002"  # the shipped head
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


def test_a_database_of_revision_0001_keeps_its_buildsets_and_records_reasons(
    sqlite_url: str,
) -> None:
    """0002 adds the reason and reset columns; rows written before read them as null."""
    engine = create_database_engine(sqlite_url, poolclass=StaticPool)
    try:
        with engine.connect() as connection, connection.begin():
            command.upgrade(schema.alembic_config(connection), "0001")
            connection.execute(
                text(
                    "INSERT INTO sluice_buildsets (uuid, tenant, pipeline, project, branch, ref,"
                    " change, patchset, oldrev, newrev, ref_url, event_id, result, message,"
                    " updated) VALUES ('old', 't', 'gate', 'app', 'main', 'refs/heads/main', '',"
                    " '', '', 'c1', '', '', 'FAILURE', 'failed: unit', '2026-01-01 00:00:00')"
                )
            )
        assert current_revision(engine) == "0001"
        ensure_schema(sqlite_url, engine=engine)
        assert current_revision(engine) == schema.head_revision()
        (old,) = list_buildsets(engine)
        assert (old["uuid"], old["message"], old["reason"], old["resets"]) == (
            "old",
            "failed: unit",
            None,
            None,
        )
        reason = {"kind": "failed", "message": "failed: unit", "jobs": ["unit"], "verdict": None}
        cost = {"resets": 2, "builds": 2, "ci_seconds": 300.0}
        SqlReporter(engine).record_buildset_end(
            BuildsetEnd(
                buildset("new"), Result.FAILURE, "failed: unit", reason=reason, reset_cost=cost
            )
        )
        new = next(b for b in list_buildsets(engine) if b["uuid"] == "new")
        assert new["reason"] == reason and new["reset_cost"] == cost
    finally:
        engine.dispose()
