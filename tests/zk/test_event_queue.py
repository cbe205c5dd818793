"""Event queues: order, large payloads, acks, bad events, orphans, competing consumers."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import LockLostError
from scheduler.zk.event_queue import EventQueue
from tests.zk.conftest import Script


def test_thousand_events_keep_their_order(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.tenant_trigger_queue("tenant/a"))
    for n in range(1000):
        queue.put({"n": n})
    assert queue.length() == 1000
    events = queue.read()
    assert [e.payload["n"] for e in events] == list(range(1000))
    assert [e.sequence for e in events] == sorted(e.sequence for e in events)
    assert [e.payload["n"] for e in queue.read(limit=5)] == [0, 1, 2, 3, 4]
    for event in events[:500]:
        assert queue.ack(event)
    assert [e.payload["n"] for e in queue.read(limit=3)] == [500, 501, 502]


def test_put_read_ack_and_double_ack(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.pipeline_result_queue("t", "gate"))
    path = queue.put({"type": "build-completed", "build": "b1"})
    assert path.startswith(queue.queue_path + "/event-")
    (event,) = queue.read()
    assert event.payload == {"type": "build-completed", "build": "b1"}
    assert event.data_path is None
    assert queue.ack(event)
    assert not queue.ack(event)  # harmless
    assert queue.read() == []


def test_large_payload_goes_to_a_sharded_data_node(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.connection_event_queue("github"))
    big = {"body": os.urandom(1_200_000).hex()}
    queue.put(big)
    queue.put({"small": True})
    assert len(zk.get_children(queue.data_path)) == 1
    first, second = queue.read()
    assert first.payload == big and first.data_path is not None
    assert second.payload == {"small": True}
    assert queue.ack(first)
    assert zk.get_children(queue.data_path) == []


def test_undecodable_event_is_logged_and_acked(
    zk: ZooKeeperClient, caplog: pytest.LogCaptureFixture
) -> None:
    queue = EventQueue(zk, paths.tenant_management_queue("t"))
    queue.put({"n": 1})
    queue.ensure()
    bad = zk.create(paths.join(queue.queue_path, "event-"), b"\xffnot json", sequence=True)
    missing = zk.create(
        paths.join(queue.queue_path, "event-"), b'{"schema":1,"data":"nope"}', sequence=True
    )
    queue.put({"n": 2})
    with caplog.at_level(logging.ERROR):
        events = queue.read()
    assert [e.payload["n"] for e in events] == [1, 2]
    assert bad in caplog.text and missing in caplog.text
    assert zk.exists(bad) is None and zk.exists(missing) is None


def test_orphaned_data_nodes_are_cleaned_after_an_age(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.pipeline_trigger_queue("t", "check"))
    queue.put({"body": os.urandom(100_000).hex()})  # referenced: kept
    zk.create(paths.join(queue.data_path, "orphan"), b'{"schema":1,"payload":{}}')
    assert queue.cleanup(max_age=60) == 0  # too young
    time.sleep(0.05)
    assert queue.cleanup(max_age=0.01) == 1
    assert zk.get_children(queue.data_path) != []
    (event,) = queue.read()
    assert "body" in event.payload


def test_the_sweep_cleans_orphans_in_every_event_queue(zk: ZooKeeperClient) -> None:
    """Connection, deferred, tenant and pipeline queues alike (the sweep's ``event-data``)."""
    from scheduler.sweep import orphaned_event_data

    roots = [
        paths.connection_event_queue("github"),
        paths.connection_deferred_queue("github"),
        paths.tenant_trigger_queue("t"),
        paths.pipeline_result_queue("t", "gate"),
    ]
    for root in roots:
        queue = EventQueue(zk, root)
        queue.put({"body": os.urandom(100_000).hex()})  # referenced: kept
        zk.create(paths.join(queue.data_path, "orphan"), b'{"schema":1,"payload":{}}')
    time.sleep(0.05)
    cleaned = orphaned_event_data(zk, max_age=0.01)
    assert sorted(cleaned) == sorted(f"{root}: 1" for root in roots)
    for root in roots:
        (event,) = EventQueue(zk, root).read()
        assert "body" in event.payload
    assert orphaned_event_data(zk, max_age=0.01) == []


def test_three_consumer_processes_never_repeat_or_skip(
    zk: ZooKeeperClient, script: Callable[..., Script], tmp_path: Path
) -> None:
    root = paths.tenant_trigger_queue("busy")
    lock_path = paths.trigger_queue_lock("busy")
    queue = EventQueue(zk, root)
    queue.ensure()
    outputs = [tmp_path / f"consumer-{i}.txt" for i in range(3)]
    consumers = [script("consumer", root, lock_path, str(out)) for out in outputs]
    for consumer in consumers:
        consumer.expect("ready")
    total = 300
    for n in range(total):
        queue.put({"n": n})
    zk.create("/producer-done")
    for consumer in consumers:
        consumer.expect("done", timeout=60)
        assert consumer.finish() == 0
    seen = [int(line) for out in outputs for line in out.read_text().split()]
    assert len(seen) == total, "an event was processed twice or skipped"
    assert sorted(seen) == list(range(total))
    # The applies happened in queue order: creation zxids follow the event numbers.
    names = zk.get_children("/processed")
    stats = [(zk.exists(f"/processed/{n}").czxid, int(n)) for n in names]
    assert [n for _, n in sorted(stats)] == list(range(total))
    assert queue.length() == 0
    # More than one consumer took part (they really competed).
    assert sum(1 for out in outputs if out.read_text()) >= 2
    assert locks.contenders(zk, lock_path) == []


def test_event_of_a_newer_schema_is_left_in_place_and_keeps_order(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.tenant_trigger_queue("upgrade"))
    queue.put({"n": 1})
    newer = zk.create(
        paths.join(queue.queue_path, "event-"), b'{"schema":99,"payload":{}}', sequence=True
    )
    queue.put({"n": 2})
    assert [e.payload["n"] for e in queue.read()] == [1]
    assert zk.exists(newer) is not None


def test_a_refused_ack_keeps_the_events_data(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.tenant_trigger_queue("fenced"))
    queue.put({"body": os.urandom(100_000).hex()})
    (event,) = queue.read()
    held = locks.try_exclusive(zk, paths.trigger_queue_lock("fenced"))
    assert held is not None
    held.release()
    with pytest.raises(LockLostError):
        queue.ack(event, held.context)
    (again,) = queue.read()
    assert again.payload == event.payload  # neither the event nor its data was lost
