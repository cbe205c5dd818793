"""Errors of the reporting package (SQL build history and reporters)."""

from __future__ import annotations

from scheduler.errors import SluiceError


class ReportingError(SluiceError):
    """Base of the errors raised by ``scheduler.reporting``."""


class UnsupportedDatabaseError(ReportingError):
    """The database URL names a backend Sluice does not support.

    Build history is kept in SQLite (the default) or PostgreSQL.
    """


class SchemaError(ReportingError):
    """The database schema could not be brought to the expected revision."""


class DatabaseUnavailableError(ReportingError):
    """The database cannot be reached or opened (the message names it, password hidden)."""
