"""The node request queue: ``/nodepool/requests``, as seed 000 maps Nodepool's.

The tree (under the Sluice root)::

    /nodepool/requests/<priority>-<seq>          requestor, labels, state, nodes, state_time, reason
    /nodepool/requests-lock/<priority>-<seq>     the request's lock (kazoo lock contenders)

:class:`NodeRequestQueue` is a base of :class:`~scheduler.stores.nodes.NodeStore`;
it holds a request's life on its own: submit, read, wait, lock, change,
delete. The nodes a request is served with, and the sweep's repair, are
the store's (:mod:`scheduler.stores.nodes`); the records are
:mod:`scheduler.stores.node_records`.

Guarantees:

* A request is a sequence node whose name starts with its priority
  (three digits, lower first), so listing the parent sorted gives the
  order launchers serve them in. Only a launcher holding the request's
  lock (:meth:`NodeRequestQueue.lock_request`) changes it, and every such
  write is a compare-and-set fenced by that lock: a launcher whose session
  expired can never mark a request fulfilled after another took it over.
  The lock lives apart from the request so a requestor may delete its
  request whatever the lock (Nodepool's ``requests-lock``).
* A pipeline pass submits its requests with :meth:`NodeRequestQueue.submit_ops`,
  inside its own commit, naming itself in ``notify``
  (:class:`~scheduler.stores.node_records.PipelineRequestor`). Then the store's
  ``fulfil`` and :meth:`NodeRequestQueue.fail` put a
  :class:`~scheduler.wire.events.NodeRequestMessage` into that
  pipeline's result queue in the same fenced transaction as the request's
  new state: the pipeline learns of the outcome exactly when it happens.

On SUSPENDED or LOST calls raise the layer's errors
(:mod:`scheduler.zk.errors`); a refused fenced write changes nothing and
every step can be repeated.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kazoo.exceptions import NoNodeError, NotEmptyError

from scheduler.stores.node_records import (
    DEFAULT_PRIORITY,
    FINAL_REQUEST_STATES,
    NodeRequest,
    NodeRequestState,
    NodeStoreError,
    PipelineRequestor,
)
from scheduler.zk import locks, paths, paths_nodepool, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import OpFailedError, Transaction
from scheduler.zk.errors import ConflictError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.locks import HeldLock
from scheduler.zk.retry import CONFLICT


class UnknownRequestError(NodeStoreError):
    """No node request has the id asked for."""


class NodeRequestQueue:
    """Reads and writes of ``/nodepool/requests``; see the module."""

    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    def submit(
        self,
        labels: Sequence[str],
        requestor: str,
        priority: int = DEFAULT_PRIORITY,
        notify: PipelineRequestor | None = None,
    ) -> str:
        """A new ``requested`` request for one node per label; returns its id."""
        draft = _draft(labels, requestor, priority, notify)
        created = self.client.create(
            paths_nodepool.node_request_prefix(priority),
            stored.encode(draft.to_dict()),
            sequence=True,
            makepath=True,
        )
        return paths.basename(created)

    def submit_ops(
        self,
        txn: Transaction,
        labels: Sequence[str],
        requestor: str,
        priority: int = DEFAULT_PRIORITY,
        notify: PipelineRequestor | None = None,
    ) -> str:
        """Add the create of a new request to ``txn``; returns the id it will have.

        The id is made as ZooKeeper makes a sequence number (the parent's
        child version), past any request ``txn`` already creates, so the
        request exists exactly when the caller's transaction commits (a
        pipeline pass: its state records the id in the same commit). A
        concurrent submit that takes the id first makes the commit fail
        (node exists), and the caller decides again.
        """
        draft = _draft(labels, requestor, priority, notify)
        root = paths_nodepool.node_requests_root()
        stat = self.client.exists(root)
        if stat is None:
            self.client.ensure_path(root)
            stat = self.client.exists(root)
        seq = int(stat.cversion)
        while txn.creates(paths_nodepool.node_request(f"{priority:03d}-{seq:010d}")):
            seq += 1
        request_id = f"{priority:03d}-{seq:010d}"
        txn.create(paths_nodepool.node_request(request_id), stored.encode(draft.to_dict()))
        return request_id

    def request(self, request_id: str) -> NodeRequest | None:
        path = paths_nodepool.node_request(request_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return NodeRequest.from_dict(request_id, stored.decode(raw, path), int(stat.version))

    def request_ids(self) -> list[str]:
        """Every request's id, in the order launchers serve them (priority, then age)."""
        try:
            return sorted(self.client.get_children(paths_nodepool.node_requests_root()))
        except NoNodeError:
            return []

    def requests(self) -> list[NodeRequest]:
        wanted = {i: paths_nodepool.node_request(i) for i in self.request_ids()}
        return [
            NodeRequest.from_dict(request_id, data, version)
            for request_id, data, version in stored.decode_each(self.client, wanted)
        ]

    def wait(self, request_id: str, timeout: float) -> NodeRequest:
        """The request once ``fulfilled`` or ``failed`` (NodeStoreError if gone or too slow)."""
        deadline = time.monotonic() + timeout
        while True:
            request = self.request(request_id)
            if request is None:
                raise NodeStoreError(f"node request {request_id} is gone")
            if request.state in FINAL_REQUEST_STATES:
                return request
            left = deadline - time.monotonic()
            if left <= 0:
                raise NodeStoreError(f"node request {request_id} still {request.state}")
            changed = _Event()
            if self.client.exists(request.path, watch=changed.set) is not None:
                changed.wait(min(left, 1.0))

    def delete_request(self, request_id: str) -> None:
        """The requestor's delete: whatever the lock (the lock lives apart)."""
        with contextlib.suppress(NoNodeError):
            self.client.delete(paths_nodepool.node_request(request_id))
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.client.delete(paths_nodepool.node_request_lock(request_id))

    def delete_by_operator(self, request_id: str) -> NodeRequest:
        """Zuul's ``nodeset-request-delete``: the request goes, whatever its lock.

        A request its pipeline still waits for is failed for it in the same
        transaction (the job ends ``NODE_FAILURE`` as when no provider could
        serve it); nodes made for it are then abandoned and the sweep gives
        them back (``used``). UnknownRequestError when there is none.
        """
        for _ in CONFLICT.tries():
            request = self.request(request_id)
            if request is None:
                raise UnknownRequestError(f"no node request {request_id!r}")
            txn = Transaction(self.client)
            txn.delete(request.path, request.version)
            if request.state not in FINAL_REQUEST_STATES:  # else its pipeline was told
                failed = replace(
                    request,
                    state=NodeRequestState.FAILED,
                    state_time=time.time(),
                    reason="deleted by an operator",
                )
                self._notify_ops(failed, txn)
            try:
                txn.commit()
            except OpFailedError:
                continue  # it changed (a launcher took it) or went: look again
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self.client.delete(paths_nodepool.node_request_lock(request_id))
            return request
        raise ConflictError(f"node request {request_id} kept changing")

    def lock_request(self, request_id: str, launcher: str) -> HeldLock | None:
        """The request's lock without waiting (None when another launcher holds it)."""
        return locks.acquire(
            self.client,
            paths_nodepool.node_request_lock(request_id),
            identifier=launcher,
            blocking=False,
        )

    def request_lock_holders(self, request_id: str) -> list[str]:
        return locks.contenders(self.client, paths_nodepool.node_request_lock(request_id))

    def update_request(self, held: HeldLock, request: NodeRequest, **changes: Any) -> NodeRequest:
        """Change the request (compare-and-set), fenced by its lock."""
        updated = replace(request, state_time=time.time(), **changes)
        txn = held.context.transaction()
        txn.set(request.path, stored.encode(updated.to_dict()), request.version)
        self._notify_ops(updated, txn)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            raise NodeStoreError(f"node request {request.id} changed: {exc.reason}") from None
        return replace(updated, version=int(results[1].version))

    def _notify_ops(self, request: NodeRequest, txn: Transaction) -> None:
        """The request's pipeline gets its final state in ``txn`` (if it named one)."""
        message = request.message()
        if message is None or request.notify is None:
            return
        queue = EventQueue(
            self.client,
            paths.pipeline_result_queue(request.notify.tenant, request.notify.pipeline),
        )
        queue.ensure()
        queue.put_ops(message.to_dict(), txn)

    def fail(self, held: HeldLock, request: NodeRequest, reason: str) -> NodeRequest:
        return self.update_request(held, request, state=NodeRequestState.FAILED, reason=reason)


def _draft(
    labels: Sequence[str], requestor: str, priority: int, notify: PipelineRequestor | None
) -> NodeRequest:
    if not labels or any(not isinstance(label, str) or not label for label in labels):
        raise NodeStoreError(f"a node request needs labels, got {list(labels)!r}")
    if not 0 <= priority <= 999:
        raise NodeStoreError(f"priority must be within 0..999, got {priority}")
    return NodeRequest("", requestor, tuple(labels), state_time=time.time(), notify=notify)


class _Event:
    """A watch callback that can be waited on."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self, _watched: object = None) -> None:
        self._event.set()

    def wait(self, seconds: float) -> None:
        self._event.wait(seconds)
