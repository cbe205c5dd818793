"""A guard for the Redis broker's channels once their connection is gone.

On a broker connection loss Celery 5.7 closes the broken connection and
reconnects. A channel of the old connection can still be asked to talk to
Redis afterwards: to restore its unacknowledged messages while it closes,
or to acknowledge a message whose ``acks_late`` task (a merge, a pipeline
pass) finished after the reconnect. kombu then builds a Redis client from
a connection that no longer exists and raises ``AttributeError``
(``conninfo`` is None), which neither Celery nor kombu expects: the worker
stops with "Unrecoverable error" and never comes back (seen in
``tests/chaos/test_faults.py``, broker emptied and restarted, about one
run in four).

The guard makes that case what it is, a connection error
(``redis.exceptions.ConnectionError``), which Celery already handles: the
close ignores it, a failed acknowledgement is logged. Nothing is lost: the
message belonged to a connection that is gone, its request is in
ZooKeeper, and the sweep re-sends the nudges of whatever is still pending
(docs/architecture.md invariant 2). Installed when the ``tasks`` package is imported,
that is in every worker process.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_connparams = getattr(kombu_redis.Channel, "_connparams")  # noqa: B009 (untyped in the stubs)


def _guarded_connparams(self: Any, asynchronous: bool = False) -> Any:
    transport = getattr(self, "connection", None)
    if transport is None or getattr(transport, "client", None) is None:
        raise redis.exceptions.ConnectionError("this channel's broker connection is closed")
    return _connparams(self, asynchronous=asynchronous)


def install() -> None:
    """Guard kombu's Redis channels (idempotent)."""
    setattr(kombu_redis.Channel, "_connparams", _guarded_connparams)  # noqa: B010
