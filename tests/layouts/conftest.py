"""Fixtures of the layout tests: ZooKeeper clients and real git repositories."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduler.zk.client import ZooKeeperClient, connect
from tests.fixtures.services import ZooKeeperTarget
from tests.layouts.gitrepos import GitRepos


@pytest.fixture
def make_client(zookeeper: ZooKeeperTarget) -> Iterator[Callable[..., ZooKeeperClient]]:
    """Connect clients to the test's chroot; all are closed at the end."""
    clients: list[ZooKeeperClient] = []

    def make(session_timeout: float = 10.0) -> ZooKeeperClient:
        client = connect(zookeeper.settings(session_timeout=session_timeout))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def client(make_client: Callable[..., ZooKeeperClient]) -> ZooKeeperClient:
    return make_client()


@pytest.fixture
def repos(tmp_path: Path) -> GitRepos:
    return GitRepos(tmp_path / "git")
