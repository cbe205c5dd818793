"""A server whose free port is taken before it binds starts again on another.

:func:`cli.stack.process.free_port` lets its socket go before the server
binds, so another process can take the port in between; the test servers
and the benchmarks' start through :func:`start_on_free_port`, which tries
again only when the server's log says the port was taken.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.stack.process import free_port, start_on_free_port
from cli.stack.redis import RedisServer, ping
from cli.stack.zookeeper import ZooKeeperServer, is_healthy
from scheduler.errors import StackError
from tests.fixtures.services import missing_service


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port held by a listening socket that answers nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def _ports(first: int) -> Iterator[int]:
    yield first
    while True:
        yield free_port()


def test_zookeeper_starts_again_on_another_port_when_its_port_was_taken(
    tmp_path: Path, taken_port: int
) -> None:
    if shutil.which("java") is None:
        missing_service("java (for ZooKeeper)")
    tried: list[int] = []
    ports = _ports(taken_port)

    def pick() -> int:
        tried.append(next(ports))
        return tried[-1]

    server = start_on_free_port(
        lambda port: ZooKeeperServer(data_dir=tmp_path / "zk", port=port), timeout=60, ports=pick
    )
    try:
        assert tried[0] == taken_port
        assert len(tried) == 2
        assert server.port == tried[1]
        assert is_healthy(server.host, server.port)
    finally:
        server.stop()


def test_redis_starts_again_and_gives_up_after_its_attempts(
    tmp_path: Path, taken_port: int
) -> None:
    if shutil.which("redis-server") is None:
        missing_service("redis-server")
    ports = _ports(taken_port)
    server = start_on_free_port(
        lambda port: RedisServer(data_dir=tmp_path / "redis", port=port),
        timeout=30,
        ports=lambda: next(ports),
    )
    try:
        assert server.port != taken_port
        assert ping(server.url)
    finally:
        server.stop()

    # the port taken every time: three tries, then the start-up error
    made: list[RedisServer] = []

    def make(port: int) -> RedisServer:
        made.append(RedisServer(data_dir=tmp_path / "redis-taken", port=port))
        return made[-1]

    with pytest.raises(StackError, match="exited during start-up"):
        start_on_free_port(make, timeout=30, attempts=3, ports=lambda: taken_port)
    assert len(made) == 3
    assert all(server.proc_pid is None for server in made)


def test_a_failure_that_is_not_the_port_is_not_tried_again(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        missing_service("redis-server")
    made: list[RedisServer] = []

    def make(port: int) -> RedisServer:
        # an option redis-server refuses: it exits at once, its port untouched
        made.append(RedisServer(data_dir=tmp_path / "redis-bad", port=port, host="not an address"))
        return made[-1]

    with pytest.raises(StackError):
        start_on_free_port(make, timeout=10)
    assert len(made) == 1
