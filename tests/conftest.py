"""Fixtures for every test level; each lives in a small module of tests/fixtures."""

from cli.stack import process
from tests.fixtures.services import (  # noqa: F401
    redis_server,
    redis_url,
    redis_with_password,
    state_dir,
    zookeeper,
    zookeeper_server,
)
from tests.fixtures.sshd import ssh_host  # noqa: F401
from tests.fixtures.workers import celery_workers, test_environment  # noqa: F401

# A test run killed from outside must leave no server or worker running.
process.children_die_with_parent()
