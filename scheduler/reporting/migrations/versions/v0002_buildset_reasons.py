"""Why a buildset's item left, and what resets cost: three nullable JSON columns.

``reason`` ({kind, message, jobs, verdict}), ``resets`` (the resets the item
went through: {count, builds, ci_seconds, cause}) and ``reset_cost`` (what
its failure or dequeue cost the items behind it: {resets, builds,
ci_seconds}). Rows written before this revision keep NULL there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("reason", "resets", "reset_cost")


def upgrade() -> None:
    # adding a nullable column needs no table rebuild, on SQLite either
    for column in COLUMNS:
        op.add_column("sluice_buildsets", sa.Column(column, sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sluice_buildsets") as batch:
        for column in COLUMNS:
            batch.drop_column(column)
