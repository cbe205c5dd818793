"""What a tenant's jobs hold and run on, at Zuul's paths: semaphores and labels.

* ``/semaphores``: every semaphore the tenant defines or may use (its
  global ones), with Zuul's fields: ``name``, ``global``, ``max`` and
  ``holders`` (``count``; ``this_tenant``: the ``buildset_uuid`` and
  ``job_name`` of each holder in this tenant; ``other_tenants``: how many
  holders of a global semaphore are elsewhere, not who). Holders are read
  from the semaphore's znode (:mod:`scheduler.stores.semaphores`).
* ``/labels``: the labels the configured node providers serve
  (``sluice.yaml``'s ``nodes.providers``), ``[{"name": ...}]``.

The tenant's nodes and node requests are in :mod:`web.nodes`.
"""

from __future__ import annotations

from typing import Any

from scheduler.stores.semaphores import SemaphoreNode
from scheduler.zk import paths
from web.context import WebContext
from web.endpoints import Call
from web.rest import API, T, tenant_of


def _buildsets(ctx: WebContext, tenant: str) -> set[str]:
    """The buildsets of the tenant's queued items."""
    return {item.buildset.uuid for state in ctx.pipelines(tenant) for item in state.items.values()}


def _holders(holders: list[str], ours: set[str], is_global: bool) -> dict[str, Any]:
    this_tenant = []
    other_tenants = 0
    for holder in holders:
        buildset, _, job = holder.partition("/")
        if is_global and buildset not in ours:
            other_tenants += 1
            continue
        this_tenant.append({"buildset_uuid": buildset, "job_name": job})
    return {
        "count": len(this_tenant) + other_tenants,
        "this_tenant": this_tenant,
        "other_tenants": other_tenants,
    }


@API.get(T + "/semaphores")
def semaphores(call: Call) -> Any:
    """The tenant's semaphores (and the global ones it uses) with their holders."""
    ctx, tenant = tenant_of(call)
    loaded = ctx.layout(tenant)
    global_max = dict(loaded.tenant.global_semaphores)
    names = sorted(set(loaded.layout.semaphores) | set(global_max))
    ours = _buildsets(ctx, tenant) if global_max else set()
    found = []
    for name in names:
        is_global = name in global_max  # a global one the tenant lists wins, as when taken
        path = paths.global_semaphore(name) if is_global else paths.semaphore(tenant, name)
        held = SemaphoreNode(ctx.client, path).holders()
        found.append(
            {
                "name": name,
                "global": is_global,
                "max": global_max[name] if is_global else loaded.layout.semaphore(name).max,
                "holders": _holders(held, ours, is_global),
            }
        )
    return found


@API.get(T + "/labels")
def labels(call: Call) -> Any:
    """The labels the node providers serve."""
    ctx, _ = tenant_of(call)
    served = {label for p in ctx.settings.nodes.providers for label in p.labels}
    return [{"name": label} for label in sorted(served)]
