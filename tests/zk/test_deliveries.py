"""Webhook deliveries: stored once per id (markers pruned after a day), deferred, set aside."""

from __future__ import annotations

import os
import time

import pytest

from scheduler.stores import deliveries
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction
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


def set_aside_one(
    zk: ZooKeeperClient, delivery: str, payload: dict[str, object], reason: str = "bad"
) -> deliveries.SetAside:
    store = deliveries.SetAsideStore(zk, "github")
    txn = Transaction(zk)
    record = store.add_ops(txn, payload, reason, delivery=delivery, event="e", received=5.0)
    txn.commit()
    return record


def webhook(n: int, body: object = None) -> dict[str, object]:
    return {
        "type": "webhook",
        "driver": "github",
        "event": "push",
        "delivery": f"d{n}",
        "body": body,
    }


def test_set_aside_deliveries_are_listed_retried_and_discarded(zk: ZooKeeperClient) -> None:
    store = deliveries.SetAsideStore(zk, "github")
    set_aside_one(zk, "d1", webhook(1, {"n": 1}), "MalformedEventError: no ref")
    set_aside_one(zk, "org/app x\x01..", webhook(2), "InvalidURL: 'app x'")
    (first, second) = deliveries.set_aside(zk)
    assert (first.delivery, first.reason, first.received, first.kept) == (
        "d1",
        "MalformedEventError: no ref",
        5.0,
        True,
    )
    assert second.delivery == "org/app x\x01.."
    assert [r.delivery for r in deliveries.set_aside(zk, "gitlab")] == []

    store.retry("d1")  # back into the connection's queue, as it came
    queue = EventQueue(zk, paths.connection_event_queue("github"))
    (event,) = queue.read()
    assert event.payload == webhook(1, {"n": 1})
    with pytest.raises(deliveries.DeliveryError, match="no set-aside delivery"):
        store.retry("d1")  # once
    store.discard("org/app x\x01..")
    assert deliveries.set_aside(zk) == []


def test_a_replayed_delivery_replaces_its_record_and_big_ones_keep_a_preview(
    zk: ZooKeeperClient,
) -> None:
    set_aside_one(zk, "d1", webhook(1), "first")
    set_aside_one(zk, "d1", webhook(1), "second")
    (record,) = deliveries.set_aside(zk, "github")
    assert record.reason == "second"
    # over the limit even compressed: a preview, which cannot be retried
    noise = os.urandom(deliveries.BODY_LIMIT).hex()
    set_aside_one(zk, "big", webhook(2, noise), "huge")
    big = next(r for r in deliveries.set_aside(zk) if r.delivery == "big")
    assert not big.kept
    with pytest.raises(deliveries.DeliveryError, match="cannot be retried"):
        deliveries.SetAsideStore(zk, "github").retry("big")
    # a lone surrogate (JSON cannot carry it): kept as a preview too
    set_aside_one(zk, "odd\ud800", webhook(3, "\ud800"), "reason \udcff")
    odd = next(r for r in deliveries.set_aside(zk) if r.delivery.startswith("odd"))
    assert not odd.kept and odd.reason.startswith("reason ")


def test_the_sweep_prunes_set_aside_deliveries_after_their_retention(zk: ZooKeeperClient) -> None:
    set_aside_one(zk, "d1", webhook(1))
    assert deliveries.prune_set_aside(zk) == []
    later = time.time() + deliveries.RETENTION + 60
    assert deliveries.prune_set_aside(zk, now=later) == ["github/d1"]
    assert deliveries.set_aside(zk) == []


def test_a_deferred_queue_head_is_due_at_its_time(zk: ZooKeeperClient) -> None:
    deferred = EventQueue(zk, paths.connection_deferred_queue("github"))
    assert not deliveries.deferred_due(zk, "github")
    state = deliveries.RetryState(1, time.time() + 30, "502")
    deferred.put(deliveries.deferred_payload(webhook(1), state))
    assert not deliveries.deferred_due(zk, "github")
    assert deliveries.deferred_due(zk, "github", now=time.time() + 31)
    assert deliveries.retry_state(deferred.read()[0].payload) == state
    assert deliveries.fresh_payload(deferred.read()[0].payload) == webhook(1)
