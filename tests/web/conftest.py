"""Fixtures of the web tests: a test system and a ``sluice web`` over it."""

from tests.e2e.system import system  # noqa: F401
from tests.web.server import web  # noqa: F401
