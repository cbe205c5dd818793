"""Build history: buildsets, builds (one row per attempt), refs, artifacts, events.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NAME = 255
RESULT = 32


def _name(column: str) -> sa.Column[str]:
    return sa.Column(column, sa.String(NAME), nullable=False)


def _rev(column: str) -> sa.Column[str]:
    return sa.Column(column, sa.String(64), nullable=False)


def _time(column: str, nullable: bool = True) -> sa.Column[datetime]:
    return sa.Column(column, sa.DateTime(timezone=False), nullable=nullable)


def _ref_columns() -> list[sa.Column[str]]:
    return [
        _name("project"),
        _name("branch"),
        _name("ref"),
        _name("change"),
        _name("patchset"),
        _rev("oldrev"),
        _rev("newrev"),
        sa.Column("ref_url", sa.Text(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "sluice_refs",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_ref_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_sluice_refs"),
        sa.UniqueConstraint(
            "project",
            "branch",
            "ref",
            "change",
            "patchset",
            "oldrev",
            "newrev",
            name="uq_sluice_refs_project_branch_ref_change_patchset_oldrev_newrev",
        ),
    )
    _create_buildsets()
    op.create_table(
        "sluice_buildset_refs",
        sa.Column("buildset_id", sa.Integer(), nullable=False),
        sa.Column("ref_id", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("buildset_id", "ref_id", name="pk_sluice_buildset_refs"),
        sa.ForeignKeyConstraint(
            ["buildset_id"],
            ["sluice_buildsets.id"],
            name="fk_sluice_buildset_refs_buildset_id_sluice_buildsets",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["ref_id"],
            ["sluice_refs.id"],
            name="fk_sluice_buildset_refs_ref_id_sluice_refs",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_sluice_buildset_refs_ref_id", "sluice_buildset_refs", ["ref_id"])
    _create_builds()
    _create_build_children()


def _create_buildsets() -> None:
    op.create_table(
        "sluice_buildsets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("uuid", sa.String(64), nullable=False),
        _name("tenant"),
        _name("pipeline"),
        *_ref_columns(),
        _name("event_id"),
        sa.Column("result", sa.String(RESULT), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        _time("start_time"),
        _time("end_time"),
        _time("updated", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sluice_buildsets"),
        sa.UniqueConstraint("uuid", name="uq_sluice_buildsets_uuid"),
    )
    op.create_index("ix_sluice_buildsets_tenant_project", "sluice_buildsets", ["tenant", "project"])
    op.create_index(
        "ix_sluice_buildsets_tenant_pipeline", "sluice_buildsets", ["tenant", "pipeline"]
    )


def _create_builds() -> None:
    op.create_table(
        "sluice_builds",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("uuid", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("buildset_id", sa.Integer(), nullable=False),
        _name("tenant"),
        _name("pipeline"),
        _name("job"),
        _name("project"),
        _name("branch"),
        _name("ref"),
        _name("change"),
        _rev("newrev"),
        sa.Column("voting", sa.Boolean(), nullable=False),
        _name("nodeset"),
        _name("executor"),
        sa.Column("log_url", sa.Text(), nullable=False),
        sa.Column("result", sa.String(RESULT), nullable=True),
        sa.Column("error_detail", sa.Text(), nullable=False),
        sa.Column("result_data", sa.JSON(), nullable=False),
        _time("start_time"),
        _time("end_time"),
        _time("updated", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sluice_builds"),
        sa.UniqueConstraint("uuid", "attempt", name="uq_sluice_builds_uuid_attempt"),
        sa.ForeignKeyConstraint(
            ["buildset_id"],
            ["sluice_buildsets.id"],
            name="fk_sluice_builds_buildset_id_sluice_buildsets",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_sluice_builds_buildset_id", "sluice_builds", ["buildset_id"])
    op.create_index(
        "ix_sluice_builds_tenant_job_project_branch",
        "sluice_builds",
        ["tenant", "job", "project", "branch"],
    )
    op.create_index("ix_sluice_builds_tenant_project", "sluice_builds", ["tenant", "project"])
    op.create_index("ix_sluice_builds_tenant_pipeline", "sluice_builds", ["tenant", "pipeline"])


def _create_build_children() -> None:
    op.create_table(
        "sluice_artifacts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("build_id", sa.Integer(), nullable=False),
        _name("name"),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sluice_artifacts"),
        sa.UniqueConstraint("build_id", "name", name="uq_sluice_artifacts_build_id_name"),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["sluice_builds.id"],
            name="fk_sluice_artifacts_build_id_sluice_builds",
            ondelete="CASCADE",
        ),
    )
    op.create_table(
        "sluice_build_events",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("build_id", sa.Integer(), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        _time("event_time", nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sluice_build_events"),
        sa.UniqueConstraint(
            "build_id",
            "event_type",
            "event_time",
            name="uq_sluice_build_events_build_id_event_type_event_time",
        ),
        sa.ForeignKeyConstraint(
            ["build_id"],
            ["sluice_builds.id"],
            name="fk_sluice_build_events_build_id_sluice_builds",
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    for table in (
        "sluice_build_events",
        "sluice_artifacts",
        "sluice_builds",
        "sluice_buildset_refs",
        "sluice_buildsets",
        "sluice_refs",
    ):
        op.drop_table(table)
