"""Alembic environment: migrate on the connection ``ensure_schema`` passes in.

Run by Alembic (``command.upgrade`` and friends), never imported directly.
With ``config.attributes["connection"]`` set, the migration runs inside the
caller's transaction (which holds the migration lock); otherwise an engine is
made from ``config.attributes["database_url"]`` (developer use).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from scheduler.reporting.database import create_database_engine
from scheduler.reporting.models import VERSION_TABLE, Base

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )


def run_offline() -> None:
    context.configure(
        url=config.attributes["database_url"],
        target_metadata=Base.metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_database_engine(config.attributes["database_url"])
    try:
        with engine.begin() as own_connection:
            _configure(own_connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
