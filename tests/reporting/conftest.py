"""Databases for the reporting tests: a SQLite file, and a PostgreSQL database of its own.

PostgreSQL comes from ``SLUICE_TEST_POSTGRES_URL`` (an administrative URL;
by default the local server with trust auth). Each test gets a fresh database
with a unique name, dropped afterwards. Without a reachable server the
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


def _create_database(admin: Engine, template: str | None = None) -> str:
    name = f"sluice_test_{uuid.uuid4().hex[:12]}"
    clause = f' TEMPLATE "{template}"' if template else ""
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"{clause}'))
    return name


def _drop_database(admin: Engine, name: str) -> None:
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _url(admin: Engine, name: str) -> str:
    return admin.url.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_template(postgres_admin: Engine) -> Iterator[str]:
    """A database migrated to head once per session, cloned for each test that needs one."""
    name = _create_database(postgres_admin)
    engine = create_database_engine(_url(postgres_admin, name))
    try:
        ensure_schema(_url(postgres_admin, name), engine=engine)
    finally:
        engine.dispose()  # CREATE DATABASE ... TEMPLATE needs it unused
    yield name
    _drop_database(postgres_admin, name)


@pytest.fixture
def postgres_url(postgres_admin: Engine) -> Iterator[str]:
    """A new, empty PostgreSQL database for this test."""
    name = _create_database(postgres_admin)
    yield _url(postgres_admin, name)
    _drop_database(postgres_admin, name)


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


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a new database at head, once per backend."""
    if request.param == "postgresql":
        admin: Engine = request.getfixturevalue("postgres_admin")
        name = _create_database(admin, template=request.getfixturevalue("postgres_template"))
        engine = create_database_engine(_url(admin, name))
    else:
        url = f"sqlite:///{tmp_path / 'migrated' / 'sluice.db'}"
        engine = create_database_engine(url)
        ensure_schema(url, engine=engine)
    yield engine
    engine.dispose()
    if request.param == "postgresql":
        _drop_database(admin, name)
