"""The records of node requests and nodes: their states, the request, the node, the message.

Plain frozen data shared by the request queue (:mod:`scheduler.stores.node_requests`),
the store (:mod:`scheduler.stores.nodes`), the launchers and executors that serve
and use nodes, and the pipeline pass that reads a request's outcome
(:class:`NodeRequestMessage`, ``type: node-request``); no ZooKeeper calls
here (``path`` only names a record's znode). ``version`` is the znode's
version as read, never stored.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
