"""Fixtures of the end-to-end tests."""

from tests.e2e.flower import flower  # noqa: F401
from tests.e2e.system import system  # noqa: F401
