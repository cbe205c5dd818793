"""Several reads in one request (``scheduler.zk.multiread``) on a real ZooKeeper."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl

from scheduler.zk import multiread
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.multiread import Children, Data, read_many


@pytest.fixture
def tree(zk: ZooKeeperClient) -> ZooKeeperClient:
    zk.create("/q/a/event-1", b"one", makepath=True)
    zk.create("/q/a/event-2", b"two")
    zk.create("/q/b", b"")
    zk.create("/doc", b"x" * 70_000)
    return zk


def test_the_results_are_those_of_the_single_reads_in_order(tree: ZooKeeperClient) -> None:
    reads = [Children("/q/a"), Children("/q/b"), Data("/doc"), Data("/q/a/event-2")]
    with tree.counting_requests() as count:
        results = read_many(tree, reads)
    assert count.total == 1, count.calls  # one request, whatever the number of reads
    assert sorted(results[0]) == ["event-1", "event-2"]
    assert results[1] == []
    data, stat = results[2]
    assert data == tree.get("/doc")[0] and stat == tree.exists("/doc")
    assert results[3][0] == b"two"


def test_a_missing_node_answers_none_and_the_others_still_answer(tree: ZooKeeperClient) -> None:
    results = read_many(tree, [Data("/gone"), Children("/q/a/event-1"), Children("/nowhere")])
    assert results == [None, [], None]


def test_an_empty_data_node_reads_as_empty_bytes(tree: ZooKeeperClient) -> None:
    ((data, stat),) = read_many(tree, [Data("/q/b")])
    assert data == b"" and stat.version == 0


def test_no_read_sends_nothing(tree: ZooKeeperClient) -> None:
    with tree.counting_requests() as count:
        assert read_many(tree, []) == []
    assert count.total == 0


def test_a_refused_read_raises(tree: ZooKeeperClient) -> None:
    acl = make_digest_acl("someone", "else", all=True)
    tree.kazoo.create("/private", b"secret", acl=[acl])
    with pytest.raises(NoAuthError):
        read_many(tree, [Data("/q/b"), Data("/private")])


@pytest.fixture
def old_server(tree: ZooKeeperClient) -> Iterator[ZooKeeperClient]:
    """The client as it behaves after a server without multiRead answered UNIMPLEMENTED."""
    multiread._unsupported.add(id(tree))
    yield tree
    multiread._unsupported.discard(id(tree))


def test_without_multiread_the_reads_go_one_by_one_with_the_same_results(
    old_server: ZooKeeperClient,
) -> None:
    reads = [Children("/q/a"), Data("/gone"), Data("/q/a/event-1")]
    with old_server.counting_requests() as count:
        results = read_many(old_server, reads)
    assert count.total == 3
    assert sorted(results[0]) == ["event-1", "event-2"]
    assert results[1] is None and results[2][0] == b"one"
