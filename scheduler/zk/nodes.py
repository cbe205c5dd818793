"""Node requests and nodes in ZooKeeper, as seed 000 maps Nodepool's ``/nodepool``.

The tree (under the Sluice root)::

    /nodepool/requests/<priority>-<seq>          requestor, labels, state, nodes, state_time, reason
    /nodepool/requests-lock/<priority>-<seq>     the request's lock (kazoo lock contenders)
    /nodepool/nodes/<id>                         provider, label, state, host, connection, image,
                                                 allocated_to, launcher, state_time
    /nodepool/nodes/<id>/lock                    held by whoever uses the node
    /nodepool/launchers/provider/<p>/lock        held while a launcher allocates on a provider

Guarantees:

* A request is a sequence node whose name starts with its priority
  (three digits, lower first), so listing the parent sorted gives the
  order launchers serve them in. Only a launcher holding the request's
  lock (:meth:`NodeStore.lock_request`) changes it, and every such write
  is a compare-and-set fenced by that lock: a launcher whose session
  expired can never mark a request fulfilled after another took it over.
  The lock lives apart from the request so a requestor may delete its
  request whatever the lock (Nodepool's ``requests-lock``).
* A launcher creates a request's nodes (``building``) and marks the
  request ``pending`` in one fenced transaction, under the provider's
  allocation lock too (:meth:`NodeStore.lock_provider`, same session, so
  the request lock's fence proves it held), so quotas counted from the
  nodes present cannot be overrun by two launchers at once. It then sets
  the nodes ``ready`` and the request ``fulfilled`` in one fenced
  transaction (:meth:`NodeStore.fulfil`).
* The requestor takes the nodes with :meth:`NodeStore.accept` (each node's
  lock, then ``in-use`` fenced by it, then the request is deleted) and gives
  them back with :meth:`NodeStore.return_nodes` (``used``, fenced, then
  unlocked). Launchers delete ``used`` nodes of their providers.
* A pipeline pass submits its requests with :meth:`NodeStore.submit_ops`,
  inside its own commit, naming itself in ``notify``
  (:class:`PipelineRequestor`). Then :meth:`NodeStore.fulfil` and
  :meth:`NodeStore.fail` put a :class:`NodeRequestMessage` into that
  pipeline's result queue in the same fenced transaction as the request's
  new state: the pipeline learns of the outcome exactly when it happens.
* :meth:`NodeStore.recover` is the sweep's repair: a ``pending`` request
  nobody holds goes back to ``requested``; a ``building`` node whose
  request nobody holds, a ``ready`` node whose request is gone and an
  ``in-use`` node nobody holds become ``used``. Every change is a
  compare-and-set, so it may run anywhere, any number of times.

Node ids are ten digits as ZooKeeper numbers sequence nodes (the parent's
child version, retried when taken; a transaction cannot make a sequence
node directly under a parent). On SUSPENDED or LOST calls raise the layer's
errors (:mod:`scheduler.zk.errors`); a refused fenced write changes nothing
and every step can be repeated.
"""

from __future__ import annotations

import contextlib
import enum
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from scheduler.zk import locks, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import EXISTS, OpFailedError, Transaction
from scheduler.zk.errors import ConflictError, ZooKeeperError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.locks import HeldLock
from scheduler.zk.retry import CONFLICT

DEFAULT_PRIORITY = 100


class NodeRequestState(enum.StrEnum):
    REQUESTED = "requested"
    PENDING = "pending"
    FULFILLED = "fulfilled"
    FAILED = "failed"


class NodeState(enum.StrEnum):
    BUILDING = "building"
    READY = "ready"
    IN_USE = "in-use"
    USED = "used"
    DELETING = "deleting"


# Nodes that count against quotas and host capacity: every node not yet removed.
FINAL_REQUEST_STATES = (NodeRequestState.FULFILLED, NodeRequestState.FAILED)


class NodeStoreError(ZooKeeperError):
    """A node or node request that does not exist, or cannot change as asked."""


# The event type a fulfilled or failed request puts into its pipeline's result queue.
NODE_REQUEST_EVENT = "node-request"


@dataclass(frozen=True)
class PipelineRequestor:
    """The pipeline job a request is for: told of its outcome through the result queue."""

    tenant: str
    pipeline: str
    buildset: str
    job: str

    def to_dict(self) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "pipeline": self.pipeline,
            "buildset": self.buildset,
            "job": self.job,
        }

    @classmethod
    def from_dict(cls, data: object) -> PipelineRequestor | None:
        if not isinstance(data, Mapping):
            return None
        fields = [data.get(k) for k in ("tenant", "pipeline", "buildset", "job")]
        if not all(isinstance(f, str) and f for f in fields):
            return None
        return cls(*(str(f) for f in fields))


@dataclass(frozen=True)
class NodeRequestMessage:
    """A request's outcome as its pipeline reads it (``type: node-request``).

    ``state`` is ``fulfilled`` or ``failed``; ``reason`` says why it failed
    (``NODE_FAILURE: ...``). The nodes themselves are read from the request.
    """

    request: str
    state: str
    buildset: str
    job: str
    reason: str = ""
    nodes: tuple[str, ...] = ()
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": NODE_REQUEST_EVENT,
            "request": self.request,
            "state": self.state,
            "buildset": self.buildset,
            "job": self.job,
            "reason": self.reason,
            "nodes": list(self.nodes),
            "time": self.time,
        }


@dataclass(frozen=True)
class NodeRequest:
    """One node request (``/nodepool/requests/<priority>-<seq>``)."""

    id: str
    requestor: str
    labels: tuple[str, ...]
    state: str = NodeRequestState.REQUESTED
    state_time: float = 0.0
    nodes: tuple[str, ...] = ()
    reason: str = ""
    launcher: str = ""
    # the pipeline job told of the outcome (None: the requestor waits itself)
    notify: PipelineRequestor | None = None
    version: int = field(default=-1, compare=False)

    @property
    def path(self) -> str:
        return paths.node_request(self.id)

    @property
    def priority(self) -> int:
        return int(self.id.split("-", 1)[0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "requestor": self.requestor,
            "labels": list(self.labels),
            "state": self.state,
            "state_time": self.state_time,
            "nodes": list(self.nodes),
            "reason": self.reason,
            "launcher": self.launcher,
            **({"notify": self.notify.to_dict()} if self.notify else {}),
        }

    @classmethod
    def from_dict(cls, request_id: str, data: Mapping[str, Any], version: int = -1) -> NodeRequest:
        return cls(
            id=request_id,
            requestor=str(data.get("requestor", "")),
            labels=tuple(str(label) for label in data.get("labels", ())),
            state=str(data.get("state", NodeRequestState.REQUESTED)),
            state_time=float(data.get("state_time", 0.0)),
            nodes=tuple(str(n) for n in data.get("nodes", ())),
            reason=str(data.get("reason", "")),
            launcher=str(data.get("launcher", "")),
            notify=PipelineRequestor.from_dict(data.get("notify")),
            version=version,
        )

    def message(self) -> NodeRequestMessage | None:
        """The event its pipeline gets for its present (final) state; None if nobody waits."""
        if self.notify is None or self.state not in FINAL_REQUEST_STATES:
            return None
        return NodeRequestMessage(
            self.id,
            self.state,
            self.notify.buildset,
            self.notify.job,
            self.reason,
            self.nodes,
            self.state_time,
        )


@dataclass(frozen=True)
class Node:
    """One node (``/nodepool/nodes/<id>``): where a build runs, and how to reach it."""

    id: str
    provider: str
    label: str
    state: str = NodeState.BUILDING
    state_time: float = 0.0
    # the host the node is on (static: the host; local: the launcher's host)
    host: str = ""
    # how to reach it: {"host", "port", "username"} (SSH); local nodes add
    # "root", "source", "netns" (workers/launcher/boot.py)
    connection: Mapping[str, Any] = field(default_factory=dict)
    # the image upload a local node was made from ("<image>/<build>/<upload>")
    image_upload: str = ""
    allocated_to: str = ""
    launcher: str = ""
    version: int = field(default=-1, compare=False)

    @property
    def path(self) -> str:
        return paths.nodepool_node(self.id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "label": self.label,
            "state": self.state,
            "state_time": self.state_time,
            "host": self.host,
            "connection": dict(self.connection),
            "image_upload": self.image_upload,
            "allocated_to": self.allocated_to,
            "launcher": self.launcher,
        }

    @classmethod
    def from_dict(cls, node_id: str, data: Mapping[str, Any], version: int = -1) -> Node:
        return cls(
            id=node_id,
            provider=str(data.get("provider", "")),
            label=str(data.get("label", "")),
            state=str(data.get("state", NodeState.BUILDING)),
            state_time=float(data.get("state_time", 0.0)),
            host=str(data.get("host", "")),
            connection=dict(data.get("connection", {})),
            image_upload=str(data.get("image_upload", "")),
            allocated_to=str(data.get("allocated_to", "")),
            launcher=str(data.get("launcher", "")),
            version=version,
        )


@dataclass(frozen=True)
class HeldNode:
    """A node its user holds the lock of (from :meth:`NodeStore.accept`)."""

    node: Node
    lock: HeldLock


@dataclass
class Recovery:
    """What :meth:`NodeStore.recover` changed."""

    requests_requeued: list[str] = field(default_factory=list)
    nodes_used: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requests_requeued or self.nodes_used)


class NodeStore:
    """Reads and writes of ``/nodepool/requests`` and ``/nodepool/nodes``; see the module."""

    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    # ------------------------------------------------------------ requests

    def submit(
        self, labels: Sequence[str], requestor: str, priority: int = DEFAULT_PRIORITY
    ) -> str:
        """A new ``requested`` request for one node per label; returns its id."""
        draft = _draft(labels, requestor, priority, None)
        created = self.client.create(
            paths.node_request_prefix(priority),
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
        root = paths.node_requests_root()
        stat = self.client.exists(root)
        if stat is None:
            self.client.ensure_path(root)
            stat = self.client.exists(root)
        seq = int(stat.cversion)
        while txn.creates(paths.node_request(f"{priority:03d}-{seq:010d}")):
            seq += 1
        request_id = f"{priority:03d}-{seq:010d}"
        txn.create(paths.node_request(request_id), stored.encode(draft.to_dict()))
        return request_id

    def request(self, request_id: str) -> NodeRequest | None:
        path = paths.node_request(request_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return NodeRequest.from_dict(request_id, stored.decode(raw, path), int(stat.version))

    def request_ids(self) -> list[str]:
        """Every request's id, in the order launchers serve them (priority, then age)."""
        try:
            return sorted(self.client.get_children(paths.node_requests_root()))
        except NoNodeError:
            return []

    def requests(self) -> list[NodeRequest]:
        ids = self.request_ids()
        pending = [(i, self.client.kazoo.get_async(paths.node_request(i))) for i in ids]
        found = []
        for request_id, result in pending:
            try:
                raw, stat = self.client.wait(result)
            except NoNodeError:
                continue
            data = stored.decode(raw, paths.node_request(request_id))
            found.append(NodeRequest.from_dict(request_id, data, int(stat.version)))
        return found

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
            self.client.delete(paths.node_request(request_id))
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.client.delete(paths.node_request_lock(request_id))

    def lock_request(self, request_id: str, launcher: str) -> HeldLock | None:
        """The request's lock without waiting (None when another launcher holds it)."""
        return locks.acquire(
            self.client, paths.node_request_lock(request_id), identifier=launcher, blocking=False
        )

    def request_lock_holders(self, request_id: str) -> list[str]:
        return locks.contenders(self.client, paths.node_request_lock(request_id))

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

    # ------------------------------------------------------------ nodes

    def node(self, node_id: str) -> Node | None:
        path = paths.nodepool_node(node_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return Node.from_dict(node_id, stored.decode(raw, path), int(stat.version))

    def nodes(self, ids: Iterable[str] | None = None) -> list[Node]:
        """The nodes named (every node when None), by id."""
        if ids is None:
            try:
                names = self.client.get_children(paths.nodepool_nodes_root())
            except NoNodeError:
                return []
            ids = sorted(n for n in names if n.isdigit())
        pending = [(i, self.client.kazoo.get_async(paths.nodepool_node(i))) for i in ids]
        found = []
        for node_id, result in pending:
            try:
                raw, stat = self.client.wait(result)
            except NoNodeError:
                continue
            data = stored.decode(raw, paths.nodepool_node(node_id))
            found.append(Node.from_dict(node_id, data, int(stat.version)))
        return found

    def lock_provider(self, provider: str, launcher: str, timeout: float = 10.0) -> HeldLock | None:
        """The provider's allocation lock (quotas are counted and spent under it)."""
        return locks.acquire(
            self.client,
            paths.launcher_provider_lock(provider),
            identifier=launcher,
            timeout=timeout,
        )

    def allocate(
        self, held: HeldLock, request: NodeRequest, drafts: Sequence[Node], launcher: str
    ) -> tuple[NodeRequest, list[Node]]:
        """Create ``building`` nodes for the request and mark it ``pending``: one fenced write."""
        now = time.time()
        for _ in CONFLICT.tries():
            first = int(self._next_node_id())
            nodes = [
                replace(
                    draft,
                    id=f"{first + n:010d}",
                    state=NodeState.BUILDING,
                    state_time=now,
                    allocated_to=request.id,
                    launcher=launcher,
                    version=0,
                )
                for n, draft in enumerate(drafts)
            ]
            updated = replace(
                request,
                state=NodeRequestState.PENDING,
                state_time=now,
                launcher=launcher,
                nodes=tuple(n.id for n in nodes),
            )
            txn = held.context.transaction()
            txn.set(request.path, stored.encode(updated.to_dict()), request.version)
            for node in nodes:
                txn.create(node.path, stored.encode(node.to_dict()))
            try:
                results = txn.commit()
            except OpFailedError as exc:
                if exc.reason == EXISTS and exc.path.startswith(paths.nodepool_nodes_root()):
                    continue  # another launcher took the id: again
                raise NodeStoreError(f"node request {request.id} changed: {exc.reason}") from None
            return replace(updated, version=int(results[1].version)), nodes
        raise ConflictError(f"node request {request.id}: could not create its nodes")

    def _next_node_id(self) -> str:
        root = paths.nodepool_nodes_root()
        stat = self.client.exists(root)
        if stat is None:
            self.client.ensure_path(root)
            stat = self.client.exists(root)
        return f"{int(stat.cversion):010d}"

    def fulfil(self, held: HeldLock, request: NodeRequest, nodes: Sequence[Node]) -> NodeRequest:
        """Nodes ``ready`` (as the provider filled them in), the request ``fulfilled``."""
        now = time.time()
        updated = replace(request, state=NodeRequestState.FULFILLED, state_time=now, reason="")
        txn = held.context.transaction()
        txn.set(request.path, stored.encode(updated.to_dict()), request.version)
        for node in nodes:
            ready = replace(node, state=NodeState.READY, state_time=now)
            txn.set(node.path, stored.encode(ready.to_dict()), node.version)
        self._notify_ops(updated, txn)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            raise NodeStoreError(f"node request {request.id} changed: {exc.reason}") from None
        return replace(updated, version=int(results[1].version))

    def set_node_state(self, node: Node, state: str) -> Node | None:
        """Compare-and-set a node's state (None when it changed or went meanwhile)."""
        updated = replace(node, state=state, state_time=time.time())
        try:
            stat = self.client.set(
                node.path, stored.encode(updated.to_dict()), version=node.version
            )
        except (BadVersionError, NoNodeError):
            return None
        return replace(updated, version=int(stat.version))

    def remove_node(self, node: Node) -> None:
        """Delete the node's znode (after its provider removed what it was)."""
        with contextlib.suppress(NoNodeError):
            self.client.delete_tree(node.path)

    def node_lock_holders(self, node_id: str) -> list[str]:
        return locks.contenders(self.client, paths.nodepool_node_lock(node_id))

    # ------------------------------------------------------------ the requestor's side

    def accept(self, request_id: str, user: str, timeout: float = 10.0) -> list[HeldNode]:
        """Lock a fulfilled request's nodes, mark them ``in-use``, then delete the request."""
        request = self.request(request_id)
        if request is None or request.state != NodeRequestState.FULFILLED:
            state = "gone" if request is None else request.state
            raise NodeStoreError(f"node request {request_id} is {state}, not fulfilled")
        taken: list[HeldNode] = []
        try:
            for node in self.nodes(request.nodes):
                taken.append(self._take(node, user, timeout))
            if len(taken) != len(request.nodes):
                raise NodeStoreError(f"node request {request_id}: some of its nodes are gone")
        except BaseException:
            for held in taken:
                held.lock.release()
            raise
        self.delete_request(request_id)
        return taken

    def _take(self, node: Node, user: str, timeout: float) -> HeldNode:
        lock = locks.acquire(
            self.client, paths.nodepool_node_lock(node.id), identifier=user, timeout=timeout
        )
        if lock is None:
            raise NodeStoreError(f"node {node.id} is locked by {self.node_lock_holders(node.id)}")
        try:
            current = self.node(node.id)
            if current is None or current.state != NodeState.READY:
                raise NodeStoreError(f"node {node.id} is not ready")
            in_use = self._write_node(lock, current, NodeState.IN_USE)
        except BaseException:
            lock.release()
            raise
        return HeldNode(in_use, lock)

    def _write_node(self, lock: HeldLock, node: Node, state: str) -> Node:
        updated = replace(node, state=state, state_time=time.time())
        txn = lock.context.transaction()
        txn.set(node.path, stored.encode(updated.to_dict()), node.version)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            raise NodeStoreError(f"node {node.id} changed: {exc.reason}") from None
        return replace(updated, version=int(results[-1].version))

    def return_nodes(self, held_nodes: Iterable[HeldNode]) -> None:
        """Give nodes back: ``used`` (fenced by each node's lock), then unlock."""
        for held in held_nodes:
            try:
                self._write_node(held.lock, held.node, NodeState.USED)
            finally:
                held.lock.release()

    # ------------------------------------------------------------ the sweep

    def recover(self) -> Recovery:
        """Repair what dead launchers and users left; see the module docstring."""
        done = Recovery()
        requests = {r.id: r for r in self.requests()}
        unheld: dict[str, bool] = {}

        def nobody_holds(request_id: str) -> bool:
            if request_id not in unheld:
                unheld[request_id] = not self.request_lock_holders(request_id)
            return unheld[request_id]

        for request in requests.values():
            pending = request.state == NodeRequestState.PENDING
            if pending and nobody_holds(request.id) and self._requeue(request):
                done.requests_requeued.append(request.id)
        for node in self.nodes():
            abandoned = self._abandoned(node, requests, nobody_holds)
            if abandoned and self.set_node_state(node, NodeState.USED) is not None:
                done.nodes_used.append(node.id)
        return done

    def _requeue(self, request: NodeRequest) -> bool:
        back = replace(
            request, state=NodeRequestState.REQUESTED, state_time=time.time(), launcher="", nodes=()
        )
        try:
            self.client.set(request.path, stored.encode(back.to_dict()), version=request.version)
        except (BadVersionError, NoNodeError):
            return False
        return True

    def _abandoned(
        self, node: Node, requests: Mapping[str, NodeRequest], nobody_holds: Any
    ) -> bool:
        if node.state == NodeState.BUILDING:
            return bool(nobody_holds(node.allocated_to))
        if node.state == NodeState.READY:
            request = requests.get(node.allocated_to)
            gone = request is None or node.id not in request.nodes
            return gone and not self.node_lock_holders(node.id)
        if node.state == NodeState.IN_USE:
            return not self.node_lock_holders(node.id)
        return False


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
