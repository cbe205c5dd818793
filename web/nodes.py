"""The node verbs of ``zuul-client`` at Zuul's paths: nodes and nodeset requests.

* ``GET /api/tenant/<t>/nodes``: the tenant's nodes (``node-list``);
* ``PUT /api/tenant/<t>/nodes/<id>`` ``{"state": "hold" | "used"}``: admin;
  hold an in-use or used node (never deleted, never reused), or give a held
  one back (``node-set-state``);
* ``GET /api/tenant/<t>/nodeset-requests``: the tenant's node requests
  (``nodeset-request-list``);
* ``DELETE /api/tenant/<t>/nodeset-requests/<id>``: admin; the request goes,
  and the job waiting for it ends ``NODE_FAILURE`` (``nodeset-request-delete``).

The rules are the node store's (:mod:`scheduler.stores.nodes`); a node or
request of another tenant is as unknown as one that does not exist.
"""

from __future__ import annotations

from typing import Any

from scheduler.stores.node_records import NodeState, NodeStoreError
from scheduler.stores.node_requests import UnknownRequestError
from scheduler.stores.nodes import NodeStore, UnknownNodeError
from scheduler.views.nodes import tenant_nodes, tenant_requests
from web.endpoints import Call, Param
from web.errors import ApiError
from web.rest import API, T, tenant_of

NODE_ID = (Param("node", required=True, pattern=r"[0-9]{1,20}"),)
REQUEST_ID = (Param("request", required=True, pattern=r"[0-9]{3}-[0-9]{1,20}"),)


@API.get(T + "/nodes")
def nodes(call: Call) -> Any:
    """The tenant's nodes (those its pipelines requested)."""
    ctx, tenant = tenant_of(call)
    return tenant_nodes(ctx.client, tenant)


@API.put(
    T + "/nodes/{node}",
    path_params=NODE_ID,
    admin=True,
    body=(Param("state", required=True, choices=(NodeState.HOLD, NodeState.USED)),),
)
def node_set_state(call: Call) -> Any:
    """Hold a node, or give a held node back (``used``)."""
    ctx, tenant = tenant_of(call)
    store = NodeStore(ctx.client)
    node = store.node(call["node"])
    if node is None or node.tenant != tenant:
        raise ApiError(404, f"Node not found: {call['node']!r}", "node")
    try:
        store.set_state_by_operator(node.id, call["state"])
    except UnknownNodeError:
        raise ApiError(404, f"Node not found: {call['node']!r}", "node") from None
    except NodeStoreError as exc:
        raise ApiError(400, str(exc), "state") from None
    return None


@API.get(T + "/nodeset-requests")
def nodeset_requests(call: Call) -> Any:
    """The tenant's node requests, in the order launchers serve them."""
    ctx, tenant = tenant_of(call)
    return tenant_requests(ctx.client, tenant)


@API.delete(T + "/nodeset-requests/{request}", path_params=REQUEST_ID, admin=True, status=204)
def nodeset_request_delete(call: Call) -> Any:
    """Delete a node request; the job waiting for it fails (``NODE_FAILURE``)."""
    ctx, tenant = tenant_of(call)
    store = NodeStore(ctx.client)
    found = store.request(call["request"])
    missing = ApiError(404, f"Nodeset request not found: {call['request']!r}", "request")
    if found is None or found.tenant != tenant:
        raise missing
    try:
        store.delete_by_operator(found.id)
    except UnknownRequestError:
        raise missing from None
    return None
