"""The records of node requests and nodes: their states, the request, the node.

Plain frozen data shared by the request queue (:mod:`scheduler.stores.node_requests`),
the store (:mod:`scheduler.stores.nodes`), and the launchers and executors that
serve and use nodes; no ZooKeeper calls here (``path`` only names a record's
znode). ``version`` is the znode's version as read, never stored.

The event a finished request puts for the pipeline job that waits
(``type: node-request``) is a queued event,
:class:`scheduler.wire.events.NodeRequestMessage`, made by
:meth:`NodeRequest.message`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.wire.events import NodeRequestMessage
from scheduler.zk import paths_nodepool
from scheduler.zk.errors import ZooKeeperError

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
    # kept for an operator (``zuul-client node-set-state <id> hold``): never deleted
    # nor reused until set ``used``
    HOLD = "hold"


# The states a request ends in (a node-request event reports one of them:
# scheduler.wire.events.NODE_REQUEST_OUTCOMES holds their values).
FINAL_REQUEST_STATES = (NodeRequestState.FULFILLED, NodeRequestState.FAILED)


class NodeStoreError(ZooKeeperError):
    """A node or node request that does not exist, or cannot change as asked."""


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
        return paths_nodepool.node_request(self.id)

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

    @property
    def tenant(self) -> str:
        """The tenant whose pipeline asked for it ("" when no pipeline did)."""
        return self.notify.tenant if self.notify else ""


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
    # the tenant whose pipeline requested it ("" when no pipeline did)
    tenant: str = ""
    version: int = field(default=-1, compare=False)

    @property
    def path(self) -> str:
        return paths_nodepool.nodepool_node(self.id)

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
            **({"tenant": self.tenant} if self.tenant else {}),
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
            tenant=str(data.get("tenant", "")),
            version=version,
        )
