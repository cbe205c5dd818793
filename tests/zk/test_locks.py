"""Locks, side-channel claims and fenced writes against a real ZooKeeper."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from scheduler.zk import locks, stored
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.context import Transaction
from scheduler.zk.errors import FencedWriteError, LockLostError
from scheduler.zk.locks import LockKind
from tests.fixtures.services import ZooKeeperTarget, session_watches
from tests.fixtures.waiting import wait_until
from tests.zk.conftest import Script, process_state


def test_exclusive_lock_excludes_and_releases(zk: ZooKeeperClient) -> None:
    first = locks.acquire(zk, "/locks/pipeline/t/p", identifier="one")
    assert first is not None and first.valid
    assert locks.acquire(zk, "/locks/pipeline/t/p", blocking=False) is None
    assert locks.contenders(zk, "/locks/pipeline/t/p") == ["one"]
    first.release()
    assert not first.valid
    second = locks.acquire(zk, "/locks/pipeline/t/p", timeout=5)
    assert second is not None
    second.release()
    first.release()  # double release is harmless


def test_read_locks_share_and_write_lock_excludes(zk: ZooKeeperClient) -> None:
    path = "/locks/tenant/t"
    r1 = locks.acquire(zk, path, kind=LockKind.READ)
    r2 = locks.acquire(zk, path, kind=LockKind.READ)
    assert r1 is not None and r2 is not None
    assert locks.acquire(zk, path, kind=LockKind.WRITE, blocking=False) is None
    r1.release()
    r2.release()
    writer = locks.acquire(zk, path, kind=LockKind.WRITE, timeout=5)
    assert writer is not None
    assert locks.acquire(zk, path, kind=LockKind.READ, blocking=False) is None
    writer.release()


def test_claim_is_one_create_and_outlives_the_guarded_node(zk: ZooKeeperClient) -> None:
    zk.create("/requests/r1", b"x", makepath=True)
    held = locks.claim(zk, "/locks/r1", "worker-1")
    assert held is not None
    assert locks.claim(zk, "/locks/r1", "worker-2") is None
    assert locks.holder(zk, "/locks/r1") == "worker-1"
    zk.delete("/requests/r1")  # side channel: the lock survives its request
    assert held.valid and locks.holder(zk, "/locks/r1") == "worker-1"
    held.release()
    assert locks.holder(zk, "/locks/r1") is None


def test_killed_holder_loses_lock_within_session_timeout(
    zk: ZooKeeperClient, script: Callable[..., Script]
) -> None:
    session_timeout = 1.0
    holder = script("lock_holder", "/locks/pipeline/t/p", session_timeout=session_timeout)
    holder.expect("locked")
    assert locks.acquire(zk, "/locks/pipeline/t/p", blocking=False) is None
    holder.kill9()
    assert process_state(holder.pid) is None
    started = time.monotonic()
    taken = locks.acquire(zk, "/locks/pipeline/t/p", timeout=session_timeout + 5)
    elapsed = time.monotonic() - started
    assert taken is not None
    assert elapsed <= session_timeout + 1.0, f"took over after {elapsed:.2f}s"
    taken.release()


def test_fenced_write_after_real_expiry_of_a_paused_holder(
    make_client: Callable[..., ZooKeeperClient], script: Callable[..., Script]
) -> None:
    """A (a process) holds the lock and is SIGSTOPped; its session expires on the
    server; B takes the lock and writes; A resumes and tries to write as holder:
    both its context and the raw fenced transaction are refused, B's state stays."""
    b_client = make_client()
    holder = script("fenced_holder", "/locks/x", "/state", session_timeout=1.0)
    holder.expect("locked")
    holder.signal(signal.SIGSTOP)
    wait_until(lambda: process_state(holder.pid) == "T", timeout=5, what="holder stopped")
    b = locks.acquire(b_client, "/locks/x", identifier="B", timeout=15)
    assert b is not None, "B never got the lock: A's session did not expire"
    stored.save(b.context, "/state", {"owner": "B"})
    holder.signal(signal.SIGCONT)
    holder.send("go")
    assert holder.expect("context").startswith("context refused")
    assert holder.expect("raw") == "raw fenced"
    assert stored.load(b.context, "/state").data["owner"] == "B"
    b.release()


def test_fenced_write_after_session_closed_from_a_second_client(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    a_client = make_client(session_timeout=1.0)
    b_client = make_client()
    a = locks.acquire(a_client, "/locks/y")
    assert a is not None
    stored.save(a.context, "/state", {"owner": "A"})
    generation = a_client.session_generation
    session_id, password = a_client.kazoo.client_id
    twin = attach(a_client.settings, session_id, password)
    twin.stop()
    twin.close()  # closing the twin ends the session on the server
    b = locks.acquire(b_client, "/locks/y", timeout=10)
    assert b is not None
    stored.save(b.context, "/state", {"owner": "B"})
    wait_until(lambda: a_client.session_generation > generation, timeout=10, what="A sees LOST")
    wait_until(lambda: a_client.state.value == "CONNECTED", timeout=10, what="A reconnected")
    assert not a.valid  # (kazoo's Lock.is_acquired would still say True here)
    with pytest.raises(LockLostError):
        stored.save(a.context, "/state", {"owner": "A-stale"})
    raw = Transaction(a_client, fence=a.node)
    raw.set("/state", stored.encode({"owner": "A-raw"}))
    with pytest.raises(FencedWriteError):
        raw.commit()
    assert stored.load(b.context, "/state").data["owner"] == "B"
    b.release()


class _StaleListing:
    """A client whose first listing of a lock still shows a contender that has left."""

    def __init__(self, client: ZooKeeperClient, gone: str) -> None:
        self._client = client
        self._gone: str | None = gone

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        children = self._client.get_children(path, watch=watch)
        gone, self._gone = self._gone, None
        return children if gone is None else [gone, *children]


def test_a_waiter_leaves_no_watch_on_a_contender_gone_before_its_look(
    zookeeper: ZooKeeperTarget, zk: ZooKeeperClient
) -> None:
    """The blocker left between the listing and the watch: no watch stays on its node.

    A contender's node name is never used again, so a watch on it would
    stay registered for the rest of the session.
    """
    path = "/locks/stale-listing"
    first = zk.create(path + "/a__lock__", b"", ephemeral=True, sequence=True, makepath=True)
    node = zk.create(path + "/b__lock__", b"", ephemeral=True, sequence=True)
    zk.delete(first)  # gone after the waiter's listing, before its look
    gone = first.rsplit("/", 1)[1]
    turn = locks._wait_turn(
        cast(ZooKeeperClient, _StaleListing(zk, gone)),
        path,
        node,
        kind=LockKind.EXCLUSIVE,
        deadline=time.monotonic() + 5,
        blocking=True,
        generation=zk.session_generation,
    )
    assert turn
    assert session_watches(zookeeper, zk) == []


def test_lock_timeout_removes_our_contender(zk: ZooKeeperClient) -> None:
    held = locks.acquire(zk, "/locks/busy", identifier="first")
    assert held is not None
    assert locks.acquire(zk, "/locks/busy", identifier="second", timeout=0.3) is None
    assert locks.contenders(zk, "/locks/busy") == ["first"]
    held.release()


def test_watchdog_removes_leftover_contenders(make_client: Callable[..., ZooKeeperClient]) -> None:
    client = make_client(session_timeout=3.0)
    client.create("/locks/z/abc__lock__0000000007", b"", ephemeral=True, makepath=True)
    client.create("/locks/z/other__lock__0000000008", b"", ephemeral=True)
    client.discard_later("/locks/z", "abc")
    wait_until(lambda: client.get_children("/locks/z") == ["other__lock__0000000008"], timeout=5)


def test_a_try_lock_is_one_create_and_excludes(make_client: Callable[..., ZooKeeperClient]) -> None:
    zk, other = make_client(), make_client()
    with zk.counting_requests() as count:
        held = locks.try_exclusive(zk, "/locks/pipeline/t/q", "worker-1")
    assert held is not None and count.total == 1, count.calls
    assert locks.try_exclusive(other, "/locks/pipeline/t/q", "worker-2") is None
    assert locks.contenders(other, "/locks/pipeline/t/q") == ["worker-1"]
    txn = held.context.transaction()
    txn.create("/fenced", b"")
    txn.commit()  # the holder writes, fenced by its node
    held.release()
    again = locks.try_exclusive(other, "/locks/pipeline/t/q", "worker-2")
    assert again is not None
    late = held.context  # released: the old holder may not write
    with pytest.raises(LockLostError):
        late.transaction()
    zk.stop()
    zk.close()  # a holder's session ends: its node goes with it
    assert locks.contenders(other, "/locks/pipeline/t/q") == ["worker-2"]
    again.release()
    assert locks.contenders(other, "/locks/pipeline/t/q") == []


def test_a_lost_answer_is_undone_only_while_the_node_is_ours(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    zk, other = make_client(), make_client()
    node = "/locks/pipeline/t/r/holder"
    zk.create(node, b"token-1 worker-1", ephemeral=True, makepath=True)
    zk.discard_later_if(node, b"token-1 worker-1")  # as after a create without answer
    wait_until(lambda: zk.exists(node) is None, timeout=10, what="our node undone")
    held = locks.try_exclusive(other, "/locks/pipeline/t/r", "worker-2")
    assert held is not None
    zk.discard_later_if(node, b"token-1 worker-1")  # too late: another holds the path
    zk._discard_leftovers()
    assert locks.contenders(zk, "/locks/pipeline/t/r") == ["worker-2"]
    held.release()
