"""Fixtures for every test level; each lives in a small module of tests/fixtures."""

import os

from cli.stack import process
from scheduler.processing.quiet import VERIFY_QUIET
from tests.fixtures.published import published  # noqa: F401
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

# A pass that a quiet mark would skip runs in full and must decide nothing
# (scheduler.processing.quiet): every test, and every worker it starts, checks
# the skip instead of trusting it. tests/scheduler/test_quiet_pass.py unsets it.
os.environ.setdefault(VERIFY_QUIET, "1")
