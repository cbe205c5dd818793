"""Event queues: FIFO sequence nodes with inline or separately stored payloads.

A queue lives under one root (any path from :mod:`scheduler.zk.paths`:
connection, tenant trigger/management, pipeline trigger/management/result
queues) with two children, as in the seed:

* ``queue/event-<sequence>``: one node per event, in put order. Its data is
  a stored object (:mod:`scheduler.zk.stored`) holding either the payload
  itself (``{"payload": ...}``) or, when the encoded payload is over
  :data:`INLINE_LIMIT`, the name of its data node (``{"data": "<uuid>"}``).
* ``data/<uuid>``: a sharded payload (:mod:`scheduler.zk.sharding`), written
  before the event node that names it, so a reader never finds an event
  whose payload is half written.

Guarantees: events are read in the order they were put (ZooKeeper sequence
numbers); an event is acknowledged by deleting its node with its version,
which fails harmlessly if someone already did (double ack is a no-op that
returns False); acknowledging can ride in the caller's fenced transaction
(:meth:`EventQueue.ack_ops`) so consuming and applying an event commit
together (docs/architecture.md invariant 4). An event that cannot be decoded is logged
with its path and acknowledged, so it never wedges the queue. A data node
whose event is gone (a producer died between its two writes, or a consumer
between ack and data delete) is removed by :meth:`EventQueue.cleanup` once
older than a given age.

Putting needs no lock; consumers that must not process an event twice
consume under a lock (e.g. :func:`scheduler.zk.paths.trigger_queue_lock`)
and ack in a transaction fenced by it.

On SUSPENDED or LOST a put may or may not have happened (the call raises);
a consumer whose lock context became invalid cannot ack, and the events
stay queued for the next holder.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import NO_NODE, LockContext, OpFailedError, Transaction
from scheduler.zk.errors import DecodeError, NewerSchemaError, NoDataError
from scheduler.zk.multiread import Data, read_many

log = logging.getLogger(__name__)

INLINE_LIMIT = 64 * 1024
EVENT_PREFIX = "event-"


@dataclass(frozen=True)
class Event:
    """One queued event as read: its payload and where it lives."""

    path: str
    version: int
    payload: dict[str, Any]
    data_path: str | None = None
    # when the event was queued (the node's ctime, seconds); 0 when unknown
    created: float = 0.0

    @property
    def id(self) -> str:
        """The queue node name (``event-<sequence>``): unique within its queue."""
        return paths.basename(self.path)

    @property
    def sequence(self) -> int:
        return int(self.id[len(EVENT_PREFIX) :])


class EventQueue:
    """One event queue under ``root`` (put without a lock; consume under one)."""

    def __init__(self, client: ZooKeeperClient, root: str) -> None:
        self.client = client
        self.root = root
        self.queue_path = paths.event_queue_items(root)
        self.data_path = paths.event_queue_data(root)
        self._ensured = False

    def ensure(self) -> None:
        """Create the queue's nodes (idempotent; done once per instance)."""
        if not self._ensured:
            self.client.ensure_path(self.queue_path)
            self.client.ensure_path(self.data_path)
            self._ensured = True

    # ------------------------------------------------------------ put

    def prepare(self, payload: Mapping[str, Any]) -> bytes:
        """The event node's data; writes the payload's data node first if large."""
        inline = stored.encode({"payload": dict(payload)})
        if len(inline) <= INLINE_LIMIT:
            return inline
        self.ensure()
        name = uuid.uuid4().hex
        data_path = paths.join(self.data_path, name)
        sharding.check_size(inline, data_path)
        sharding.write(self.client, data_path, inline, Transaction(self.client))
        return stored.encode({"data": name})

    def put_ops(self, payload: Mapping[str, Any], txn: Transaction) -> None:
        """Add the put of an event to the caller's transaction."""
        txn.create(paths.join(self.queue_path, EVENT_PREFIX), self.prepare(payload), sequence=True)

    def put(self, payload: Mapping[str, Any], context: LockContext | None = None) -> str:
        """Queue an event; returns its path. Fenced when ``context`` holds a lock."""
        txn = context.transaction() if context else Transaction(self.client)
        self.put_ops(payload, txn)
        return str(commit_creating_parents(self.client, txn, [self])[-1])

    # ------------------------------------------------------------ read

    def length(self) -> int:
        """How many events are queued (one stat, no listing)."""
        stat = self.client.exists(self.queue_path)
        return 0 if stat is None else int(stat.numChildren)

    def listing(self) -> list[str]:
        """The queue's children as they are now (none when the queue does not exist)."""
        try:
            return self.client.get_children(self.queue_path)
        except NoNodeError:
            return []

    def read(self, limit: int | None = None, *, names: list[str] | None = None) -> list[Event]:
        """Events in put order (at most ``limit``); undecodable ones are acked and skipped.

        ``names`` is the queue's listing when the caller has just read it
        (a pipeline pass lists its queues in one request, :mod:`.multiread`);
        ``None`` lists it here. The events are read 100 to a request.
        """
        if names is None:
            try:
                names = self.client.get_children(self.queue_path)
            except NoNodeError:
                return []
        names = sorted(n for n in names if n.startswith(EVENT_PREFIX))
        events: list[Event] = []
        blocked = False
        while names and not blocked and (limit is None or len(events) < limit):
            batch = names[: 100 if limit is None else min(100, limit - len(events))]
            names = names[len(batch) :]
            batch_paths = [paths.join(self.queue_path, n) for n in batch]
            found = read_many(self.client, [Data(p) for p in batch_paths])
            for path, answer in zip(batch_paths, found, strict=True):
                if answer is None:  # acked meanwhile
                    continue
                raw, stat = answer
                try:
                    event = self._decode(path, raw, stat.version, stat.ctime / 1000.0)
                except NewerSchemaError as exc:
                    # Written by a newer Sluice (rolling upgrade): leave it for a newer
                    # reader and stop here, so the events behind it keep their order.
                    log.warning("event %s left for a newer reader: %s", path, exc)
                    blocked = True
                    break
                if event is not None:
                    events.append(event)
        return events

    def _decode(self, path: str, raw: bytes, version: int, created: float) -> Event | None:
        data_path: str | None = None
        try:
            document = stored.decode(raw, path)
            if "data" in document:
                data_path = paths.join(self.data_path, paths.segment(str(document["data"])))
                document = stored.decode(sharding.read(self.client, data_path).data, data_path)
            payload = document["payload"]
            if not isinstance(payload, dict):
                raise DecodeError(f"{path}: payload is not a mapping")
        except NewerSchemaError:
            raise
        except (DecodeError, NoDataError, KeyError) as exc:
            log.error("undecodable event %s acknowledged and dropped: %s", path, exc)
            self.ack(Event(path, version, {}, data_path))
            return None
        return Event(path, version, payload, data_path, created)

    # ------------------------------------------------------------ ack

    def ack_ops(self, event: Event, txn: Transaction) -> None:
        """Add the ack of ``event`` to the caller's transaction; then call :meth:`discard_data`."""
        txn.delete(event.path, event.version)

    def discard_data(self, event: Event) -> None:
        """Delete an acked event's data node (best effort; :meth:`cleanup` catches the rest)."""
        if event.data_path is not None:
            try:
                txn = Transaction(self.client)
                sharding.delete_ops(self.client, event.data_path, txn)
                txn.commit()
            except (NoNodeError, OpFailedError) as exc:
                log.info("data of %s already gone: %s", event.path, exc)

    def ack(self, event: Event, context: LockContext | None = None) -> bool:
        """Delete the event (fenced by ``context``); False if it was already acked."""
        txn = context.transaction() if context else Transaction(self.client)
        self.ack_ops(event, txn)
        try:
            txn.commit()
        except OpFailedError as exc:
            if exc.reason != NO_NODE:
                raise
            self.discard_data(event)  # acked before; finish its cleanup
            return False
        # Only once the event node is gone: its data must outlive it, never the reverse.
        self.discard_data(event)
        return True

    # ------------------------------------------------------------ maintenance

    def cleanup(self, max_age: float) -> int:
        """Delete data nodes older than ``max_age`` seconds that no event names."""
        try:
            names = self.client.get_children(self.data_path)
        except NoNodeError:
            return 0
        if not names:
            return 0
        referenced: set[str] = set()
        for name in self.client.get_children(self.queue_path):
            try:
                raw, _ = self.client.get(paths.join(self.queue_path, name))
                referenced.add(str(stored.decode(raw).get("data", "")))
            except (NoNodeError, DecodeError):
                continue
        removed = 0
        now = time.time()
        for name in names:
            if name in referenced:
                continue
            path = paths.join(self.data_path, name)
            stat = self.client.exists(path)
            if stat is None or now - stat.ctime / 1000.0 < max_age:
                continue
            self.client.delete_tree(path)
            removed += 1
        return removed


def commit_creating_parents(
    client: ZooKeeperClient, txn: Transaction, queues: list[EventQueue]
) -> list[Any]:
    """Commit ``txn``; if an event queue's nodes were missing, create them and retry once."""
    try:
        return txn.commit()
    except OpFailedError as exc:
        if exc.reason != NO_NODE or not any(exc.path.startswith(q.root + "/") for q in queues):
            raise
    for queue in queues:
        queue._ensured = False
        queue.ensure()
    retry = Transaction(client, context=txn.context)
    retry.extend(txn)
    retry.fence = txn.fence
    return retry.commit()
