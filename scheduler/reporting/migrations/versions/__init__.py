"""Alembic revisions, oldest first; each file one revision, never edited once released."""

from __future__ import annotations
