"""Databases for the reporting tests: a SQLite file, and a PostgreSQL schema of its own.

PostgreSQL comes from ``SLUICE_TEST_POSTGRES_URL`` (an administrative URL;
by default the local server with trust auth). The session creates a database
with a unique name; each test gets a fresh schema in it with a unique name
(on the URL's search path), dropped afterwards. Without a reachable server the
PostgreSQL cases fail under ``CI=true`` and are skipped elsewhere.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from scheduler.reporting.database import create_database_engine
from scheduler.reporting.schema import ensure_schema
from tests.fixtures.services import missing_service

POSTGRES_ENV = "SLUICE_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(scope="session")
def postgres_admin() -> Iterator[Engine]:
    """An autocommit engine on the administrative database, for CREATE/DROP DATABASE."""
    url = os.environ.get(POSTGRES_ENV, DEFAULT_POSTGRES_URL)
    engine = create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except OperationalError as exc:
        engine.dispose()
        missing_service(f"PostgreSQL at {make_url(url).render_as_string()} ({exc.orig})")
    yield engine
    engine.dispose()


def _url(admin: Engine, database: str, schema: str | None = None) -> str:
    url = admin.url.set(database=database)
    if schema is not None:
        url = url.update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_database(postgres_admin: Engine) -> Iterator[str]:
    """A database of this session; each test works in a schema of its own in it."""
    name = f"sluice_test_{uuid.uuid4().hex[:12]}"
    with postgres_admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    yield name
    with postgres_admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def postgres_url(postgres_admin: Engine, postgres_database: str) -> Iterator[str]:
    """A new, empty schema (the only one on the URL's search path) for this test.

    A schema, not a database: creating a database takes PostgreSQL about
    200 times longer, and the tests need nothing a schema does not isolate.
    """
    schema = f"t_{uuid.uuid4().hex[:12]}"
    database = create_engine(_url(postgres_admin, postgres_database), poolclass=NullPool)
    with database.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    yield _url(postgres_admin, postgres_database, schema)
    with database.begin() as connection:
        connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    database.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'db' / 'sluice.db'}"


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest) -> str:
    """The URL of an empty database, once per backend."""
    fixture = "postgres_url" if request.param == "postgresql" else "sqlite_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def bare_engine(database_url: str) -> Iterator[Engine]:
    """An engine on the empty database (no schema yet)."""
    engine = create_database_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def engine(bare_engine: Engine) -> Engine:
    """An engine on a new database at head, once per backend."""
    ensure_schema(bare_engine.url.render_as_string(hide_password=False), engine=bare_engine)
    return bare_engine
