"""Alembic migrations of the build history schema (run by ``schema.ensure_schema``)."""

from __future__ import annotations
