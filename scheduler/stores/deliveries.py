"""Webhook deliveries: stored once, tried again later, or set aside with their reason.

* **Stored once.** A delivery's event and a marker of its id are created in
  ONE transaction; a second delivery of the id finds the marker (today's,
  or yesterday's) and stores nothing. Markers are kept by UTC day and the
  sweep removes days older than yesterday (:func:`prune`), so a replay is
  caught for at least a day.
* **Deferred.** A delivery whose forge was unavailable while it was
  translated moves, in the connection hop's fenced transaction, to the
  connection's deferred queue (an :class:`~.event_queue.EventQueue` at
  :func:`~.paths.connection_deferred_queue`) with its attempt count and the
  time before which it is not tried again (:func:`deferred_payload`,
  :func:`retry_state`). The queue the forge writes to never waits for it.
* **Set aside.** A delivery that cannot be turned into events (its body,
  a forge's refusal, a bug met on the way, or a forge unavailable for too
  many attempts) becomes a record under :func:`~.paths.set_aside_delivery`
  (driver, event, delivery id, received, reason, attempts) with its payload
  in the child ``body`` (kept whole up to :data:`BODY_LIMIT` encoded bytes,
  else a preview, and then it cannot be retried). The record is added to
  the hop's transaction that acknowledges the event
  (:meth:`SetAsideStore.add_ops`); operators list, retry (back into the
  connection's queue, in one transaction with the record's removal) or
  discard records, and the sweep removes records older than
  :data:`RETENTION` (:meth:`SetAsideStore.prune`).

Every write is one transaction; a retry or discard deletes the record at
the version it read, so two operators retrying at once put it back once.
On SUSPENDED or LOST a call raises and may or may not have been applied;
each is safe to repeat (a second retry finds no record).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.errors import SluiceError
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import BAD_VERSION, EXISTS, NO_NODE, OpFailedError, Transaction
from scheduler.zk.errors import DecodeError
from scheduler.zk.event_queue import EventQueue, commit_creating_parents
from scheduler.zk.multiread import Data, read_many

# encoded bytes of a set-aside payload kept whole (zlib-compressed above 16 KiB)
BODY_LIMIT = 256 * 1024
# characters of a payload kept when it is over BODY_LIMIT, for a reader
PREVIEW = 4096
REASON_LIMIT = 1000
# records read in one request (each is under ~2 KB: its payload is a child)
READ_CHUNK = 200
# how long set-aside deliveries are kept (seconds)
RETENTION = 7 * 86400
# the key of a deferred payload that holds its retry state
RETRY = "retry"


class DeliveryError(SluiceError):
    """A set-aside delivery that does not exist or cannot be retried."""


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
    for connection in connections(client):
        root = paths.webhook_deliveries(connection)
        try:
            days = client.get_children(root)
        except NoNodeError:
            continue
        for day in days:
            if day not in keep:
                with contextlib.suppress(NoNodeError):
                    client.delete_tree(paths.join(root, day))
                removed.append(f"{connection}/{day}")
    return removed


def connections(client: ZooKeeperClient) -> list[str]:
    """Connections with delivery markers, set-aside deliveries or pollers."""
    try:
        return sorted(paths.unsegment(s) for s in client.get_children(paths.connections_root()))
    except NoNodeError:
        return []


# ---------------------------------------------------------------- deferred


@dataclass(frozen=True)
class RetryState:
    """Where a deferred delivery stands: attempts that found the forge unavailable."""

    attempts: int = 0
    not_before: float = 0.0
    error: str = ""


def retry_state(payload: Mapping[str, Any]) -> RetryState:
    """The retry state a payload carries (none: never deferred)."""
    found = payload.get(RETRY)
    if not isinstance(found, Mapping):
        return RetryState()
    try:
        return RetryState(
            int(found.get("attempts", 0)),
            float(found.get("not_before", 0.0)),
            str(found.get("error", "")),
        )
    except (TypeError, ValueError):
        return RetryState()


def deferred_payload(payload: Mapping[str, Any], state: RetryState) -> dict[str, Any]:
    """``payload`` with its retry state, for the deferred queue."""
    retry = {"attempts": state.attempts, "not_before": state.not_before, "error": state.error}
    return {**payload, RETRY: retry}


def fresh_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``payload`` without its retry state (a delivery an operator sends again)."""
    return {k: v for k, v in payload.items() if k != RETRY}


def deferred_due(client: ZooKeeperClient, connection: str, now: float | None = None) -> bool:
    """Whether the head of the connection's deferred queue may be tried now."""
    queue = EventQueue(client, paths.connection_deferred_queue(connection))
    if not queue.length():
        return False
    head = queue.read(limit=1)
    now = time.time() if now is None else now
    return bool(head) and retry_state(head[0].payload).not_before <= now


# ---------------------------------------------------------------- set aside


@dataclass(frozen=True)
class SetAside:
    """A delivery set aside: what it was, when it came, and why it was not used."""

    connection: str
    delivery: str
    driver: str
    event: str
    received: float
    set_aside: float
    reason: str
    attempts: int = 0
    kept: bool = True  # the whole payload is kept: it can be retried
    version: int = -1  # the record's node version as read (not stored)

    def to_dict(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "delivery": self.delivery,
            "driver": self.driver,
            "event": self.event,
            "received": self.received,
            "set_aside": self.set_aside,
            "reason": self.reason,
            "attempts": self.attempts,
            "kept": self.kept,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], version: int = -1) -> SetAside:
        return cls(
            connection=str(data.get("connection", "")),
            delivery=str(data.get("delivery", "")),
            driver=str(data.get("driver", "")),
            event=str(data.get("event", "")),
            received=float(data.get("received") or 0.0),
            set_aside=float(data.get("set_aside") or 0.0),
            reason=str(data.get("reason", "")),
            attempts=int(data.get("attempts") or 0),
            kept=bool(data.get("kept", True)),
            version=version,
        )


def _clean(text: str, limit: int) -> str:
    """Text that encodes as UTF-8 (no lone surrogates), at most ``limit`` characters."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def _body(payload: Mapping[str, Any]) -> tuple[bytes, bool]:
    """The ``body`` node's data and whether it holds the whole payload."""
    try:
        whole = stored.encode({"payload": dict(payload)})
        if len(whole) <= BODY_LIMIT:
            return whole, True
    except DecodeError:  # not JSON as it stands (a lone surrogate): a preview only
        pass
    preview = json.dumps(dict(payload), ensure_ascii=True, default=repr)[:PREVIEW]
    return stored.encode({"preview": preview}), False


class SetAsideStore:
    """The set-aside deliveries of one connection."""

    def __init__(self, client: ZooKeeperClient, connection: str) -> None:
        self.client = client
        self.connection = connection
        self.root = paths.set_aside_deliveries(connection)
        self._ensured = False
        self._added: set[str] = set()  # records added by this instance (one hop pass)

    def add_ops(
        self,
        txn: Transaction,
        payload: Mapping[str, Any],
        reason: str,
        *,
        delivery: str,
        event: str,
        received: float,
        attempts: int = 0,
    ) -> SetAside:
        """Add the record of ``payload`` (and its body) to ``txn``.

        A record of the same delivery id (a replay set aside again) is
        replaced in the same transaction; the same id twice in one hop pass
        (not yet committed) gets a second record, named ``<id> (<event>)``
        from ``event``.
        """
        if not self._ensured:
            self.client.ensure_path(self.root)
            self._ensured = True
        name = _clean(delivery, 1000) or "?"
        if name in self._added:
            name = f"{name} ({event})"
        self._added.add(name)
        body, kept = _body(payload)
        record = SetAside(
            connection=self.connection,
            delivery=name,
            driver=_clean(str(payload.get("driver", "")), 100),
            event=_clean(str(payload.get("event") or payload.get("type") or ""), 100),
            received=received,
            set_aside=time.time(),
            reason=_clean(reason, REASON_LIMIT),
            attempts=attempts,
            kept=kept,
        )
        node = paths.set_aside_delivery(self.connection, record.delivery)
        body_node = paths.join(node, "body")
        if self.client.exists(node):
            if self.client.exists(body_node):
                txn.delete(body_node)
            txn.delete(node)
        txn.create(node, stored.encode(record.to_dict()))
        txn.create(body_node, body)
        return record

    def records(self) -> list[SetAside]:
        """Every record, oldest set aside first (one listing, a read per 200 records)."""
        try:
            names = self.client.get_children(self.root)
        except NoNodeError:
            return []
        nodes = [paths.join(self.root, name) for name in names]
        answers: list[Any] = []
        for start in range(0, len(nodes), READ_CHUNK):  # each answer well under 1 MB
            answers += read_many(self.client, [Data(n) for n in nodes[start : start + READ_CHUNK]])
        found = []
        for node, answer in zip(nodes, answers, strict=True):
            if answer is None:
                continue
            raw, stat = answer
            try:
                found.append(SetAside.from_dict(stored.decode(raw, node), stat.version))
            except (DecodeError, TypeError, ValueError):
                continue
        return sorted(found, key=lambda r: (r.set_aside, r.delivery))

    def get(self, delivery: str) -> tuple[SetAside, dict[str, Any] | None]:
        """A record and its payload (None if not kept whole); DeliveryError if none."""
        node = paths.set_aside_delivery(self.connection, delivery)
        try:
            raw, stat = self.client.get(node)
            record = SetAside.from_dict(stored.decode(raw, node), stat.version)
        except NoNodeError:
            raise DeliveryError(
                f"no set-aside delivery {delivery!r} of connection {self.connection!r}"
            ) from None
        try:
            body = stored.decode(self.client.get(paths.join(node, "body"))[0], node)
        except NoNodeError:
            return record, None
        payload = body.get("payload")
        return record, (payload if isinstance(payload, dict) and record.kept else None)

    def _remove_ops(self, txn: Transaction, record: SetAside) -> None:
        node = paths.set_aside_delivery(self.connection, record.delivery)
        txn.delete(paths.join(node, "body"))
        txn.delete(node, record.version)

    def retry(self, delivery: str) -> SetAside:
        """Put the delivery back into the connection's queue and remove its record (one txn)."""
        record, payload = self.get(delivery)
        if payload is None:
            raise DeliveryError(
                f"delivery {delivery!r} was larger than {BODY_LIMIT} bytes: only a preview "
                "is kept, it cannot be retried (discard it; the forge can redeliver it)"
            )
        queue = EventQueue(self.client, paths.connection_event_queue(self.connection))
        txn = Transaction(self.client)
        self._remove_ops(txn, record)
        queue.put_ops(fresh_payload(payload), txn)
        self._commit(txn, delivery, [queue])
        return record

    def discard(self, delivery: str) -> SetAside:
        """Remove the record and its payload."""
        record, _ = self.get(delivery)
        txn = Transaction(self.client)
        self._remove_ops(txn, record)
        self._commit(txn, delivery, [])
        return record

    def _commit(self, txn: Transaction, delivery: str, queues: list[EventQueue]) -> None:
        try:
            commit_creating_parents(self.client, txn, queues)
        except OpFailedError as exc:
            if exc.reason not in (NO_NODE, BAD_VERSION):
                raise
            raise DeliveryError(
                f"set-aside delivery {delivery!r} was retried or discarded meanwhile"
            ) from None

    def prune(self, max_age: float = RETENTION, now: float | None = None) -> list[str]:
        """Remove records set aside more than ``max_age`` seconds ago; their delivery ids."""
        now = time.time() if now is None else now
        removed = []
        for record in self.records():
            if now - record.set_aside < max_age:
                continue
            txn = Transaction(self.client)
            node = paths.set_aside_delivery(self.connection, record.delivery)
            with contextlib.suppress(NoNodeError):
                if self.client.exists(paths.join(node, "body")):
                    txn.delete(paths.join(node, "body"))
                txn.delete(node, record.version)
                try:
                    txn.commit()
                except OpFailedError:
                    continue  # retried, discarded or replaced meanwhile
                removed.append(f"{self.connection}/{record.delivery}")
        return removed


def set_aside(client: ZooKeeperClient, connection: str | None = None) -> list[SetAside]:
    """The set-aside deliveries of ``connection``, or of every connection."""
    names = [connection] if connection else connections(client)
    return [r for name in names for r in SetAsideStore(client, name).records()]


def prune_set_aside(
    client: ZooKeeperClient, max_age: float = RETENTION, now: float | None = None
) -> list[str]:
    """The sweep's step: records older than ``max_age`` removed, of every connection."""
    return [r for c in connections(client) for r in SetAsideStore(client, c).prune(max_age, now)]
