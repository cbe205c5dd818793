"""The SQL schema of build history (SQLAlchemy 2, typed declarative).

Tables carry a ``sluice_`` prefix so a database shared with other tools
stays readable. The schema itself is created and changed only by the
Alembic revisions in ``scheduler/reporting/migrations/versions``; these models
must match them (a test compares the two).

One row of ``sluice_builds`` per build *attempt*: ``(uuid, attempt)`` is
unique, so a redelivered report updates its row instead of adding one.
Names of jobs, projects and refs are denormalised onto the build and
buildset rows: the queries the CLI and status page run need no joins.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Dialect,
    Enum,
    ForeignKey,
    Index,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from scheduler.model.results import Result

TABLE_PREFIX = "sluice_"
VERSION_TABLE = "sluice_alembic_version"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

NAME = 255  # width of names: tenants, pipelines, projects, jobs, refs
# Longest result value, with room to grow; the width of the result columns.
RESULT_LENGTH = 32


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware datetime stored as naive UTC.

    SQLite has no time zones and PostgreSQL would answer in the session's;
    storing UTC without a zone and attaching UTC on the way out gives the
    same aware value back from both.
    """

    impl = DateTime(timezone=False)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError(f"naive datetime {value.isoformat()}: times must be aware")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


def result_type() -> Enum:
    # A plain VARCHAR without CHECK: new results need no migration.
    return Enum(
        Result,
        native_enum=False,
        create_constraint=False,
        length=RESULT_LENGTH,
        values_callable=lambda enum: [member.value for member in enum],
    )


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class RefRow(Base):
    """A ref (branch, commit or change) some buildset tested."""

    __tablename__ = "sluice_refs"
    __table_args__ = (
        UniqueConstraint("project", "branch", "ref", "change", "patchset", "oldrev", "newrev"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project: Mapped[str] = mapped_column(String(NAME))
    branch: Mapped[str] = mapped_column(String(NAME))
    ref: Mapped[str] = mapped_column(String(NAME))
    change: Mapped[str] = mapped_column(String(NAME))
    patchset: Mapped[str] = mapped_column(String(NAME))
    oldrev: Mapped[str] = mapped_column(String(64))
    newrev: Mapped[str] = mapped_column(String(64))
    ref_url: Mapped[str] = mapped_column(Text)


class BuildsetRefRow(Base):
    """Which refs a buildset tested (its own and any tested with it)."""

    __tablename__ = "sluice_buildset_refs"

    buildset_id: Mapped[int] = mapped_column(
        ForeignKey("sluice_buildsets.id", ondelete="CASCADE"), primary_key=True
    )
    ref_id: Mapped[int] = mapped_column(
        ForeignKey("sluice_refs.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class BuildsetRow(Base):
    __tablename__ = "sluice_buildsets"
    __table_args__ = (
        Index(None, "tenant", "project"),
        Index(None, "tenant", "pipeline"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(NAME))
    pipeline: Mapped[str] = mapped_column(String(NAME))
    project: Mapped[str] = mapped_column(String(NAME))
    branch: Mapped[str] = mapped_column(String(NAME))
    ref: Mapped[str] = mapped_column(String(NAME))
    change: Mapped[str] = mapped_column(String(NAME))
    patchset: Mapped[str] = mapped_column(String(NAME))
    oldrev: Mapped[str] = mapped_column(String(64))
    newrev: Mapped[str] = mapped_column(String(64))
    ref_url: Mapped[str] = mapped_column(Text)
    event_id: Mapped[str] = mapped_column(String(NAME))
    result: Mapped[Result | None] = mapped_column(result_type())
    message: Mapped[str] = mapped_column(Text)
    start_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    end_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated: Mapped[datetime] = mapped_column(UTCDateTime())
    # why the item failed or left, the resets it went through and what its failure
    # cost others (scheduler/model/reasons.py); NULL in rows written before 0002
    reason: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    resets: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    reset_cost: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    builds: Mapped[list[BuildRow]] = relationship(back_populates="buildset")


class BuildRow(Base):
    """One build attempt."""

    __tablename__ = "sluice_builds"
    __table_args__ = (
        UniqueConstraint("uuid", "attempt"),
        Index(None, "tenant", "job", "project", "branch"),
        Index(None, "tenant", "project"),
        Index(None, "tenant", "pipeline"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    uuid: Mapped[str] = mapped_column(String(64))
    attempt: Mapped[int] = mapped_column()
    buildset_id: Mapped[int] = mapped_column(
        ForeignKey("sluice_buildsets.id", ondelete="CASCADE"), index=True
    )
    tenant: Mapped[str] = mapped_column(String(NAME))
    pipeline: Mapped[str] = mapped_column(String(NAME))
    job: Mapped[str] = mapped_column(String(NAME))
    project: Mapped[str] = mapped_column(String(NAME))
    branch: Mapped[str] = mapped_column(String(NAME))
    ref: Mapped[str] = mapped_column(String(NAME))
    change: Mapped[str] = mapped_column(String(NAME))
    newrev: Mapped[str] = mapped_column(String(64))
    voting: Mapped[bool] = mapped_column()
    nodeset: Mapped[str] = mapped_column(String(NAME))
    executor: Mapped[str] = mapped_column(String(NAME))
    log_url: Mapped[str] = mapped_column(Text)
    result: Mapped[Result | None] = mapped_column(result_type())
    error_detail: Mapped[str] = mapped_column(Text)
    result_data: Mapped[dict[str, Any]] = mapped_column(JSON)
    start_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    end_time: Mapped[datetime | None] = mapped_column(UTCDateTime())
    updated: Mapped[datetime] = mapped_column(UTCDateTime())

    buildset: Mapped[BuildsetRow] = relationship(back_populates="builds")


class ArtifactRow(Base):
    __tablename__ = "sluice_artifacts"
    __table_args__ = (UniqueConstraint("build_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("sluice_builds.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(NAME))
    url: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)


class BuildEventRow(Base):
    __tablename__ = "sluice_build_events"
    __table_args__ = (UniqueConstraint("build_id", "event_type", "event_time"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    build_id: Mapped[int] = mapped_column(ForeignKey("sluice_builds.id", ondelete="CASCADE"))
    event_type: Mapped[str] = mapped_column(String(64))
    event_time: Mapped[datetime] = mapped_column(UTCDateTime())
    description: Mapped[str] = mapped_column(Text)
