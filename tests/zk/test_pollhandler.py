"""The ZooKeeper client's waits: one ``poll`` answering as kazoo's own ``select`` does."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest
from kazoo.handlers.utils import selector_select

from scheduler.zk.client import connect
from scheduler.zk.pollhandler import PollHandler, poll_select
from tests.fixtures.services import ZooKeeperTarget


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    one, two = socket.socketpair()
    yield one, two
    one.close()
    two.close()


def test_nothing_to_read_waits_out_the_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    one, _ = pair
    began = time.monotonic()
    assert poll_select([one], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - began >= 0.045


def test_answers_as_kazoos_select(pair: tuple[socket.socket, socket.socket]) -> None:
    one, two = pair
    read_end, write_end = os.pipe()
    try:
        cases = [
            ([one, two], [], 0.0),  # nothing to read yet
            ([two, read_end], [one], 0.0),  # writable (kazoo never asks both of one socket)
        ]
        for rlist, wlist, timeout in cases:
            assert poll_select(rlist, wlist, [], timeout) == selector_select(
                rlist, wlist, [], timeout
            )
        two.send(b"x")
        os.write(write_end, b"y")
        for rlist, wlist in [([one, two], []), ([one, read_end], [two]), ([read_end], [])]:
            assert poll_select(rlist, wlist, [], 1.0) == selector_select(rlist, wlist, [], 1.0)
        assert poll_select([one, read_end], [], [], 1.0) == ([one, read_end], [], [])
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_closed_peer_is_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    """The caller's recv then sees the end (kazoo: connection dropped)."""
    one, two = pair
    two.close()
    readable, _, _ = poll_select([one], [], [], 1.0)
    assert readable == [one] and one.recv(1) == b""


def test_a_closed_descriptor_and_a_bad_timeout_raise_as_kazoos() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    os.close(write_end)
    with pytest.raises(ValueError, match="Invalid event mask or fd"):
        poll_select([read_end], [], [], 0.1)
    with pytest.raises(ValueError, match="non-negative"):
        poll_select([], [], [], -1)
    with pytest.raises(TypeError, match="must be a number"):
        poll_select([], [], [], "1")  # type: ignore[arg-type]


def test_the_client_waits_with_poll(zookeeper: ZooKeeperTarget) -> None:
    client = connect(zookeeper.settings())
    try:
        assert isinstance(client.kazoo.handler, PollHandler)
        client.kazoo.ensure_path("/a/b")
        client.kazoo.set("/a/b", b"x" * 300_000)  # a value larger than a socket's buffer
        assert client.kazoo.get("/a/b")[0] == b"x" * 300_000
    finally:
        client.stop()
        client.close()
