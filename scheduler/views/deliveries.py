"""Deliveries that did not become events: what ``sluice deliveries`` and the API show.

One row per delivery, set aside (with its reason, until an operator
retries or discards it, or the sweep prunes it) or deferred (its forge was
unavailable: the attempts so far, when it is tried again, and why). Rows
come oldest first; deferred ones after the set-aside ones.
"""

from __future__ import annotations

from typing import Any

from scheduler.stores import deliveries, inventory
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue

SET_ASIDE = "set-aside"
DEFERRED = "deferred"


def delivery_rows(client: ZooKeeperClient, connection: str | None = None) -> list[dict[str, Any]]:
    """Every set-aside and deferred delivery (of ``connection``, or of all)."""
    rows = [{**r.to_dict(), "state": SET_ASIDE} for r in deliveries.set_aside(client, connection)]
    names = [connection] if connection else inventory.connections(client)
    for name in names:
        for event in EventQueue(client, paths.connection_deferred_queue(name)).read():
            rows.append(_deferred_row(name, event.payload, event.created))
    return rows


def _deferred_row(connection: str, payload: dict[str, Any], created: float) -> dict[str, Any]:
    state = deliveries.retry_state(payload)
    received = payload.get("received")
    return {
        "connection": connection,
        "delivery": str(payload.get("delivery", "")),
        "driver": str(payload.get("driver", "")),
        "event": str(payload.get("event", "")),
        "received": float(received) if isinstance(received, int | float) else created,
        "reason": f"forge unavailable: {state.error}",
        "attempts": state.attempts,
        "not_before": state.not_before,
        "state": DEFERRED,
    }
