"""Serving one node request, and the launcher's periodic check.

:func:`serve_request` is what the ``sluice.launcher.serve`` task runs, in
named steps:

1. **Take the request's lock** without waiting; held by another launcher:
   ``busy`` (the nudge was a duplicate). A request already ``fulfilled``
   or ``failed`` is ``done``; one gone is ``gone``.
2. **Take over** a ``pending`` request (its launcher died: we hold the
   lock it held): its ``building`` nodes become ``used``.
3. **Choose a provider** that serves every label. None at all: the
   request ``failed`` with a ``NODE_FAILURE`` reason naming the labels. A
   provider is tried under its allocation lock; it plans from the nodes
   that exist (quota, host capacity, image), and the nodes are created
   ``building`` with the request ``pending`` in one fenced write. No
   provider with room now: ``waiting`` (the request stays ``requested``,
   the check nudges it again).
4. **Prepare** the nodes (a local node is copied and booted), then **fulfil**: nodes
   ``ready`` and the request ``fulfilled`` in one fenced write. A launch
   error fails the request with its reason; a request deleted meanwhile
   leaves its nodes ``used``.

:meth:`Launcher.check` is the tick: :meth:`NodeStore.recover`, deletion
of ``used`` nodes of this launcher's providers, and a nudge for every
request that waits. Every step can be repeated by any launcher.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.settings.sections import Settings
from scheduler.stores.node_records import (
    FINAL_REQUEST_STATES,
    Node,
    NodeRequest,
    NodeRequestState,
    NodeState,
    NodeStoreError,
)
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ZooKeeperError
from scheduler.zk.locks import HeldLock
from workers.launcher.errors import LaunchError
from workers.launcher.providers import NodeProvider, make_providers
from workers.nodekey import node_key_path

log = logging.getLogger(__name__)

NODE_FAILURE = "NODE_FAILURE"


@dataclass(frozen=True)
class LaunchOutcome:
    """What serving a request did.

    ``fulfilled``, ``failed``, ``waiting`` (no room now), ``busy`` (another
    launcher holds it), ``done`` (served before), ``gone`` (deleted).
    """

    request: str
    result: str
    reason: str = ""
    nodes: tuple[str, ...] = ()
    # (tenant, pipeline) told of the outcome through its result queue: nudge it
    pipeline: tuple[str, str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "result": self.result,
            "reason": self.reason,
            "nodes": list(self.nodes),
        }


def launcher_id() -> str:
    """This process as a lock holder: ``<host>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


class Launcher:
    """A launcher process's providers and its view of the node store."""

    def __init__(
        self, settings: Settings, client: ZooKeeperClient, identifier: str | None = None
    ) -> None:
        self.settings = settings
        self.store = NodeStore(client)
        self.id = identifier or launcher_id()
        node_dir = settings.nodes.node_dir or Path(settings.state_dir) / "nodes"
        self.providers = make_providers(settings.nodes, client, node_dir, node_key_path(settings))

    def provider(self, name: str) -> NodeProvider | None:
        return next((p for p in self.providers if p.name == name), None)

    # ------------------------------------------------------------ serving a request

    def serve(self, request_id: str) -> LaunchOutcome:
        held = self.store.lock_request(request_id, self.id)
        if held is None:
            return LaunchOutcome(request_id, "busy")
        with held:
            request = self.store.request(request_id)
            if request is None:
                return LaunchOutcome(request_id, "gone")
            if request.state in FINAL_REQUEST_STATES:
                return LaunchOutcome(request_id, "done", request.reason, request.nodes)
            if request.state == NodeRequestState.PENDING:
                self._take_over(request)
            return self._serve_locked(held, request)

    def _take_over(self, request: NodeRequest) -> None:
        """A dead launcher's request: its nodes still ``building`` are abandoned."""
        for node in self.store.nodes(request.nodes):
            if node.state == NodeState.BUILDING:
                self.store.set_node_state(node, NodeState.USED)
        log.info("node request %s: taken over from %s", request.id, request.launcher)

    def _serve_locked(self, held: HeldLock, request: NodeRequest) -> LaunchOutcome:
        candidates = [p for p in self.providers if all(p.serves(x) for x in request.labels)]
        if not candidates:
            return self._fail(held, request, self._unservable(request.labels))
        reasons = []
        for provider in candidates:
            allocated = self._allocate(held, request, provider)
            if isinstance(allocated, str):
                reasons.append(allocated)
                continue
            return self._launch(held, provider, *allocated)
        return LaunchOutcome(request.id, "waiting", "; ".join(reasons))

    def _fail(self, held: HeldLock, request: NodeRequest, reason: str) -> LaunchOutcome:
        try:
            self.store.fail(held, request, reason)
        except NodeStoreError:
            if self.store.request(request.id) is None:
                return LaunchOutcome(request.id, "gone")  # the requestor gave up meanwhile
            raise
        log.info("node request %s: failed: %s", request.id, reason)
        return LaunchOutcome(request.id, NodeRequestState.FAILED, reason, pipeline=_told(request))

    def _unservable(self, labels: Sequence[str]) -> str:
        missing = sorted({x for x in labels if not any(p.serves(x) for p in self.providers)})
        if missing:
            return f"{NODE_FAILURE}: no provider serves label(s) {', '.join(missing)}"
        return f"{NODE_FAILURE}: no one provider serves all of {', '.join(labels)}"

    def _allocate(
        self, held: HeldLock, request: NodeRequest, provider: NodeProvider
    ) -> tuple[NodeRequest, list[Node]] | str:
        lock = self.store.lock_provider(provider.name, self.id)
        if lock is None:
            return f"provider {provider.name}: its allocation lock is busy"
        with lock:
            plan = provider.plan(request.labels, self.store.nodes())
            if isinstance(plan, str):
                return plan
            return self.store.allocate(held, request, plan, self.id)

    def _launch(
        self, held: HeldLock, provider: NodeProvider, request: NodeRequest, nodes: list[Node]
    ) -> LaunchOutcome:
        try:
            ready = [provider.prepare(node) for node in nodes]
        except LaunchError as exc:
            self._discard(nodes)
            return self._fail(held, request, f"{NODE_FAILURE}: {exc}")
        try:
            self.store.fulfil(held, request, ready)
        except NodeStoreError:
            self._discard(ready)  # the requestor deleted its request meanwhile
            if self.store.request(request.id) is None:
                return LaunchOutcome(request.id, "gone")
            raise
        ids = tuple(n.id for n in ready)
        log.info("node request %s: fulfilled by %s with %s", request.id, provider.name, ids)
        return LaunchOutcome(
            request.id, NodeRequestState.FULFILLED, nodes=ids, pipeline=_told(request)
        )

    def _discard(self, nodes: Sequence[Node]) -> None:
        for node in nodes:
            current = self.store.node(node.id)
            if current is not None:
                self.store.set_node_state(current, NodeState.USED)

    # ------------------------------------------------------------ the check

    def check(self, nudge: Callable[[str], None], memory: RequestNudges) -> dict[str, Any]:
        """Repair, delete used nodes, nudge waiting requests; returns what was done."""
        report: dict[str, Any] = {}
        recovered = self.store.recover()
        if recovered:
            report["recovered"] = {
                "requests": recovered.requests_requeued,
                "nodes": recovered.nodes_used,
            }
        deleted = self.delete_used()
        if deleted:
            report["deleted"] = deleted
        nudged = []
        requests = self.store.requests()
        for request in requests:
            if request.state == NodeRequestState.REQUESTED and memory.due(request.id):
                nudge(request.id)
                nudged.append(request.id)
        memory.forget_except({r.id for r in requests})
        if nudged:
            report["nudged"] = nudged
        return report

    def delete_used(self) -> list[str]:
        """Remove ``used`` (and abandoned ``deleting``) nodes of this launcher's providers."""
        deleted = []
        for found in self.store.nodes():
            provider = self.provider(found.provider)
            if provider is None or found.state not in (NodeState.USED, NodeState.DELETING):
                continue
            node: Node | None = found
            if found.state == NodeState.USED:
                node = self.store.set_node_state(found, NodeState.DELETING)
            if node is None:
                continue
            try:
                if provider.cleanup(node):
                    self.store.remove_node(node)
                    deleted.append(node.id)
            except (OSError, ZooKeeperError, LaunchError) as exc:
                log.warning("node %s: not deleted yet: %s", node.id, exc)
        return deleted


@dataclass
class RequestNudges:
    """When each request was last nudged: one nudge per ``every`` seconds at most."""

    every: float
    sent: dict[str, float] = field(default_factory=dict)

    def due(self, request_id: str) -> bool:
        now = time.monotonic()
        if now - self.sent.get(request_id, -self.every) < self.every:
            return False
        self.sent[request_id] = now
        return True

    def forget_except(self, live: set[str]) -> None:
        for request_id in [r for r in self.sent if r not in live]:
            del self.sent[request_id]


def _told(request: NodeRequest) -> tuple[str, str] | None:
    """The pipeline whose result queue got the request's outcome (None: none)."""
    notify = request.notify
    return (notify.tenant, notify.pipeline) if notify is not None else None


def serve_request(launcher: Launcher, request_id: str) -> LaunchOutcome:
    """Serve ``request_id`` now if nobody else does (the task's body)."""
    return launcher.serve(request_id)
