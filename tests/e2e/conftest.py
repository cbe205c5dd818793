"""Fixtures of the end-to-end tests."""

from tests.e2e.system import system  # noqa: F401
