"""Webhook deliveries: stored once per id, markers pruned after a day."""

from __future__ import annotations

import time

from scheduler.zk import deliveries, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue


def test_a_delivery_is_stored_once_and_markers_age_out(zk: ZooKeeperClient) -> None:
    queue = EventQueue(zk, paths.connection_event_queue("github"))
    assert deliveries.store_once(zk, "github", "d1", {"type": "webhook", "n": 1})
    assert not deliveries.store_once(zk, "github", "d1", {"type": "webhook", "n": 2})
    assert deliveries.store_once(zk, "github", "d2", {"type": "webhook", "n": 3})
    assert [e.payload["n"] for e in queue.read()] == [1, 3]
    assert deliveries.prune(zk) == []  # today's markers stay
    removed = deliveries.prune(zk, now=time.time() + 3 * 86400)
    assert len(removed) == 1 and removed[0].startswith("github/")
    assert deliveries.store_once(zk, "github", "d1", {"type": "webhook", "n": 4})
