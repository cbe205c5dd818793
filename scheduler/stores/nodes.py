"""The node store: nodes and their requests, as seed 000 maps Nodepool's ``/nodepool``.

The tree (under the Sluice root)::

    /nodepool/requests/...                       the requests (``stores/node_requests``)
    /nodepool/nodes/<id>                         provider, label, state, host, connection, image,
                                                 allocated_to, launcher, state_time
    /nodepool/nodes/<id>/lock                    held by whoever uses the node
    /nodepool/launchers/provider/<p>/lock        held while a launcher allocates on a provider

:class:`NodeStore` is the one API of both: the request queue it is built on
(:class:`~scheduler.stores.node_requests.NodeRequestQueue`: submit, wait, lock,
the fenced request writes and the pipeline's notification), plus the nodes,
the requestor's side and the sweep here. The records are
:mod:`scheduler.stores.node_records`.

Guarantees:

* A launcher creates a request's nodes (``building``) and marks the
  request ``pending`` in one fenced transaction, under the provider's
  allocation lock too (:meth:`NodeStore.lock_provider`, same session, so
  the request lock's fence proves it held), so quotas counted from the
  nodes present cannot be overrun by two launchers at once. It then sets
  the nodes ``ready`` and the request ``fulfilled`` in one fenced
  transaction (:meth:`NodeStore.fulfil`), which also tells the request's
  pipeline, if it named one.
* The requestor takes the nodes with :meth:`NodeStore.accept` (each node's
  lock, then ``in-use`` fenced by it, then the request is deleted) and gives
  them back with :meth:`NodeStore.return_nodes` (``used``, fenced, then
  unlocked). Launchers delete ``used`` nodes of their providers.
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
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError

from scheduler.stores.node_records import (
    Node,
    NodeRequest,
    NodeRequestState,
    NodeState,
    NodeStoreError,
)
from scheduler.stores.node_requests import NodeRequestQueue
from scheduler.zk import locks, paths_nodepool, stored
from scheduler.zk.context import EXISTS, OpFailedError
from scheduler.zk.errors import ConflictError
from scheduler.zk.locks import HeldLock
from scheduler.zk.retry import CONFLICT

# what an operator may set a node to, from which states
OPERATOR_STATES: dict[str, tuple[str, ...]] = {
    NodeState.HOLD: (NodeState.IN_USE, NodeState.USED),
    NodeState.USED: (NodeState.HOLD,),
}


class UnknownNodeError(NodeStoreError):
    """No node has the id asked for."""


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


class NodeStore(NodeRequestQueue):
    """Reads and writes of ``/nodepool/requests`` and ``/nodepool/nodes``; see the module."""

    # ------------------------------------------------------------ nodes

    def node(self, node_id: str) -> Node | None:
        path = paths_nodepool.nodepool_node(node_id)
        try:
            raw, stat = self.client.get(path)
        except NoNodeError:
            return None
        return Node.from_dict(node_id, stored.decode(raw, path), int(stat.version))

    def nodes(self, ids: Iterable[str] | None = None) -> list[Node]:
        """The nodes named (every node when None), by id."""
        if ids is None:
            try:
                names = self.client.get_children(paths_nodepool.nodepool_nodes_root())
            except NoNodeError:
                return []
            ids = sorted(n for n in names if n.isdigit())
        wanted = {i: paths_nodepool.nodepool_node(i) for i in ids}
        return [
            Node.from_dict(node_id, data, version)
            for node_id, data, version in stored.decode_each(self.client, wanted)
        ]

    def lock_provider(self, provider: str, launcher: str, timeout: float = 10.0) -> HeldLock | None:
        """The provider's allocation lock (quotas are counted and spent under it)."""
        return locks.acquire(
            self.client,
            paths_nodepool.launcher_provider_lock(provider),
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
                    tenant=request.tenant,
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
                if exc.reason == EXISTS and exc.path.startswith(
                    paths_nodepool.nodepool_nodes_root()
                ):
                    continue  # another launcher took the id: again
                raise NodeStoreError(f"node request {request.id} changed: {exc.reason}") from None
            return replace(updated, version=int(results[1].version)), nodes
        raise ConflictError(f"node request {request.id}: could not create its nodes")

    def _next_node_id(self) -> str:
        root = paths_nodepool.nodepool_nodes_root()
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
        return locks.contenders(self.client, paths_nodepool.nodepool_node_lock(node_id))

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
            self.client,
            paths_nodepool.nodepool_node_lock(node.id),
            identifier=user,
            timeout=timeout,
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
        """Give nodes back: ``used`` (fenced by each node's lock), then unlock.

        A node an operator set ``hold`` while it was in use stays held.
        """
        for held in held_nodes:
            try:
                self._write_node(held.lock, held.node, NodeState.USED)
            except NodeStoreError:
                current = self.node(held.node.id)
                if current is None or current.state != NodeState.HOLD:
                    raise
            finally:
                held.lock.release()

    # ------------------------------------------------------------ the operator's side

    def set_state_by_operator(self, node_id: str, state: str) -> Node:
        """``hold`` (an in-use or used node: kept, never deleted) or ``used`` (a held node:
        given back, its launcher deletes it), Zuul's ``node-set-state``; compare-and-set.

        NodeStoreError (UnknownNodeError when there is no such node) when the
        node cannot change so.
        """
        allowed = OPERATOR_STATES.get(state)
        if allowed is None:
            raise NodeStoreError(
                f"a node can be set {' or '.join(OPERATOR_STATES)}, not {str(state)!r}"
            )
        for _ in CONFLICT.tries():
            node = self.node(node_id)
            if node is None:
                raise UnknownNodeError(f"no node {node_id!r}")
            if node.state == state:
                return node
            if node.state not in allowed:
                raise NodeStoreError(
                    f"node {node_id} is {node.state}: only a node {' or '.join(allowed)} "
                    f"can be set {state}"
                )
            changed = self.set_node_state(node, state)
            if changed is not None:
                return changed
        raise ConflictError(f"node {node_id} kept changing")

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
