"""Fixtures of the scheduler tests."""

from collections.abc import Iterator

import pytest

from scheduler.zk.client import ZooKeeperClient, connect
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.world import world  # noqa: F401


@pytest.fixture
def client(zookeeper: ZooKeeperTarget) -> Iterator[ZooKeeperClient]:
    """A client of the test's ZooKeeper chroot, closed after the test."""
    zk = connect(zookeeper.settings())
    yield zk
    zk.stop()
    zk.close()
