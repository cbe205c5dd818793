"""Webhook delivery ids: an event stored once per delivery, whatever the forge resends.

A delivery's event and a marker of its id are created in ONE transaction;
a second delivery of the id finds the marker (today's, or yesterday's) and
stores nothing. Markers are kept by UTC day and the sweep removes days
older than yesterday (:func:`prune`), so a replay is caught for at least a
day.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import EXISTS, OpFailedError, Transaction
from scheduler.zk.event_queue import EventQueue, commit_creating_parents


def _day(moment: float) -> str:
    return time.strftime("%Y%m%d", time.gmtime(moment))


def store_once(
    client: ZooKeeperClient, connection: str, delivery: str, payload: Mapping[str, Any]
) -> bool:
    """Queue ``payload`` in the connection's queue unless ``delivery`` was stored before."""
    now = time.time()
    if client.exists(paths.webhook_delivery(connection, _day(now - 86400), delivery)):
        return False
    queue = EventQueue(client, paths.connection_event_queue(connection))
    marker = paths.webhook_delivery(connection, _day(now), delivery)
    client.ensure_path(paths.parent(marker))
    txn = Transaction(client)
    txn.create(marker, b"")
    queue.put_ops(payload, txn)
    try:
        commit_creating_parents(client, txn, [queue])
    except OpFailedError as exc:
        if exc.reason == EXISTS and exc.path == marker:
            return False
        raise
    return True


def prune(client: ZooKeeperClient, now: float | None = None) -> list[str]:
    """Forget delivery ids older than yesterday; the days removed (``connection/day``)."""
    now = time.time() if now is None else now
    keep = {_day(now), _day(now - 86400)}
    removed = []
    try:
        connections = client.get_children(paths.connections_root())
    except NoNodeError:
        return []
    for segment in connections:
        root = paths.webhook_deliveries(paths.unsegment(segment))
        try:
            days = client.get_children(root)
        except NoNodeError:
            continue
        for day in days:
            if day not in keep:
                with contextlib.suppress(NoNodeError):
                    client.delete_tree(paths.join(root, day))
                removed.append(f"{paths.unsegment(segment)}/{day}")
    return removed
