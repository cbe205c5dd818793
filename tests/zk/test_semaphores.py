"""Semaphores: limits, compare-and-set under contention, leaked-holder cleanup."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from scheduler.stores.semaphores import SemaphoreNode
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import LockLostError


def test_acquire_release_and_max_from_the_caller(zk: ZooKeeperClient) -> None:
    sem = SemaphoreNode(zk, paths.semaphore("tenant/a", "deploy"))
    assert sem.acquire("bs1/job-a", max_holders=2)
    assert sem.acquire("bs1/job-a", max_holders=2)  # again: already held, harmless
    assert sem.acquire("bs2/job-a", max_holders=2)
    assert not sem.acquire("bs3/job-a", max_holders=2)
    assert sem.acquire("bs3/job-a", max_holders=3)  # the configured max changed
    assert sem.holders() == ["bs1/job-a", "bs2/job-a", "bs3/job-a"]
    assert sem.release("bs2/job-a")
    assert not sem.release("bs2/job-a")
    assert sem.holders() == ["bs1/job-a", "bs3/job-a"]


def test_concurrent_acquires_never_exceed_max(make_client: Callable[..., ZooKeeperClient]) -> None:
    path = paths.global_semaphore("db")
    winners: list[str] = []
    barrier = threading.Barrier(6)

    def contend(index: int) -> None:
        sem = SemaphoreNode(make_client(), path)
        barrier.wait()
        for n in range(5):
            holder = f"{index}-{n}"
            if sem.acquire(holder, max_holders=4):
                winners.append(holder)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    holders = SemaphoreNode(make_client(), path).holders()
    assert len(holders) == 4 and sorted(holders) == sorted(winners)


def test_cleanup_releases_leaked_holders(zk: ZooKeeperClient) -> None:
    sem = SemaphoreNode(zk, paths.semaphore("t", "s"))
    for holder in ("alive-1", "dead-1", "alive-2", "dead-2"):
        assert sem.acquire(holder, max_holders=10)
    released = sem.cleanup(lambda h: h.startswith("alive"))
    assert released == ["dead-1", "dead-2"]
    assert sem.holders() == ["alive-1", "alive-2"]
    assert sem.cleanup(lambda h: True) == []


def test_fenced_semaphore_update(zk: ZooKeeperClient) -> None:
    held = locks.try_exclusive(zk, paths.pipeline_lock("t", "gate"))
    assert held is not None
    sem = SemaphoreNode(zk, paths.semaphore("t", "s"))
    assert sem.acquire("bs1", max_holders=1, context=held.context)
    held.release()
    with pytest.raises(LockLostError, match="released"):
        sem.release("bs1", context=held.context)
    assert sem.holders() == ["bs1"]
