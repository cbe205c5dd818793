"""A tenant's nodes and node requests in the rows of Zuul's ``nodes`` and
``nodeset-requests`` (what ``zuul-client node-list`` and ``nodeset-request-list`` show).

A node belongs to the tenant whose pipeline requested it (recorded on the
node when its launcher allocates it), a request to the tenant of the
pipeline it names; nodes and requests no pipeline asked for belong to no
tenant and are listed by none.
"""

from __future__ import annotations

from typing import Any

from scheduler.stores.node_records import Node, NodeRequest
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient


def node_row(node: Node) -> dict[str, Any]:
    """Zuul's node fields, and Sluice's own beside them."""
    return {
        "id": node.id,
        "uuid": node.id,
        "type": [node.label],
        "connection_type": ("namespace" if "netns" in node.connection else "ssh")
        if node.connection
        else None,
        "external_id": node.host or None,
        "provider": node.provider,
        "state": node.state,
        "state_time": node.state_time,
        "comment": None,
        "request": node.allocated_to or None,
        "launcher": node.launcher or None,
    }


def request_row(request: NodeRequest) -> dict[str, Any]:
    """Zuul's nodeset request fields, and Sluice's own beside them."""
    notify = request.notify
    return {
        "uuid": request.id,
        "labels": list(request.labels),
        "state": request.state,
        "request_time": request.state_time,
        "buildset_uuid": notify.buildset if notify else None,
        "pipeline_name": notify.pipeline if notify else None,
        "job_name": notify.job if notify else None,
        "priority": request.priority,
        "nodes": list(request.nodes),
        "reason": request.reason or None,
    }


def tenant_nodes(client: ZooKeeperClient, tenant: str) -> list[dict[str, Any]]:
    return [node_row(n) for n in NodeStore(client).nodes() if n.tenant == tenant]


def tenant_requests(client: ZooKeeperClient, tenant: str) -> list[dict[str, Any]]:
    return [request_row(r) for r in NodeStore(client).requests() if r.tenant == tenant]
