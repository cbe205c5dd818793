"""Fixtures of the scheduler tests."""

from tests.scheduler.world import world  # noqa: F401
