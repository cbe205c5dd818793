"""A tenant's event state (``manage-events``) and the discard of its trigger events, on a real
ZooKeeper."""

from __future__ import annotations

from scheduler.stores.event_state import (
    EventState,
    discard_trigger_events,
    event_state,
    set_event_state,
)
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue


def test_the_state_is_one_znode_absent_when_normal(zk: ZooKeeperClient) -> None:
    path = paths.tenant_event_state("demo")
    assert event_state(zk, "demo").normal and zk.exists(path) is None
    written = set_event_state(
        zk, "demo", EventState(trigger_queue_paused=True, reason="r" * 5000, by="alice")
    )
    assert written.changed > 0 and len(written.reason) == 1000
    found = event_state(zk, "demo")
    assert found.trigger_queue_paused and found.holds_triggers and not found.result_queue_paused
    assert (found.by, found.reason) == ("alice", "r" * 1000)
    assert event_state(zk, "other").normal, "per tenant"
    set_event_state(
        zk, "demo", EventState(trigger_queue_paused=True, trigger_queue_discarding=True)
    )
    assert not event_state(zk, "demo").holds_triggers, "discarding wins over paused"
    set_event_state(zk, "demo", EventState())
    assert zk.exists(path) is None
    zk.create(path, b"not json", makepath=True)
    assert event_state(zk, "demo").normal, "an unreadable state holds nothing back"


def test_discard_drops_the_queued_trigger_events_under_the_hops_lock(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.tenant_trigger_queue("demo"))
    queue.ensure()
    for n in range(250):
        queue.put({"n": n, "pad": "x" * (70_000 if n == 3 else 10)})  # one with its data apart
    other = EventQueue(zk, paths.tenant_trigger_queue("other"))
    other.ensure()
    other.put({"n": 0})
    held = locks.try_exclusive(zk, paths.trigger_queue_lock("demo"))
    assert held is not None
    with held:  # a hop is moving them: nothing is dropped behind its back
        assert discard_trigger_events(zk, "demo", wait=0.2) is None
    assert queue.length() == 250
    assert discard_trigger_events(zk, "demo") == 250
    assert queue.length() == 0 and zk.get_children(paths.event_queue_data(queue.root)) == []
    assert other.length() == 1, "another tenant's events stay"
    assert discard_trigger_events(zk, "demo") == 0
