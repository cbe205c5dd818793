"""Pending work, as ZooKeeper records it: for the sweep and ``sluice wait --idle``.

Pending work is anything not finished: an event in any queue (connection,
tenant, pipeline), an item in any pipeline, a raised dirty flag, or a merge
or build request that is not COMPLETED. The sweep re-nudges what waits for
a scheduler task (:func:`connections_with_events`, :func:`tenants_with_events`,
:func:`pipelines_to_process`); :func:`pending_work` lists everything for
operators and tests. Each check lists one small directory; none of this
runs on a hot path.
"""

from __future__ import annotations

from scheduler.state import codec
from scheduler.zk import doctree, flags, inventory, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.job_requests import JobRequestQueue


def _events(client: ZooKeeperClient, *roots: str) -> int:
    return sum(EventQueue(client, root).length() for root in roots)


def connections_with_events(client: ZooKeeperClient) -> list[str]:
    return [
        c for c in inventory.connections(client) if _events(client, paths.connection_event_queue(c))
    ]


def tenants_with_events(client: ZooKeeperClient) -> list[str]:
    return [
        t
        for t in inventory.tenants(client)
        if _events(client, paths.tenant_management_queue(t), paths.tenant_trigger_queue(t))
    ]


def tenants_to_reconfigure(client: ZooKeeperClient) -> list[str]:
    """Tenants with reconfiguration requests not yet applied."""
    return [
        t for t in inventory.tenants(client) if _events(client, paths.tenant_reconfigure_queue(t))
    ]


def _pipeline_events(client: ZooKeeperClient, tenant: str, pipeline: str) -> int:
    return _events(
        client,
        paths.pipeline_management_queue(tenant, pipeline),
        paths.pipeline_trigger_queue(tenant, pipeline),
        paths.pipeline_result_queue(tenant, pipeline),
    )


def pipelines_to_process(client: ZooKeeperClient) -> list[tuple[str, str]]:
    """Pipelines with queued events or a raised dirty flag (a pass died or was cut short)."""
    return [
        (tenant, pipeline)
        for tenant in inventory.tenants(client)
        for pipeline in inventory.pipelines(client, tenant)
        if _pipeline_events(client, tenant, pipeline)
        or flags.is_raised(client, paths.pipeline_dirty(tenant, pipeline))
        or flags.is_raised(client, paths.pipeline_report_retry(tenant, pipeline))
    ]


def items_in(client: ZooKeeperClient, tenant: str, pipeline: str) -> int:
    """How many items the pipeline document lists (one get; no item is read)."""
    tree = doctree.DocTree(codec.root_path(tenant, pipeline))
    root = doctree.get_many(client, tree, [tree.root]).get(tree.root)
    return 0 if root is None else len(codec.item_paths(tenant, pipeline, root))


def pending_work(client: ZooKeeperClient) -> list[str]:
    """What is still pending, one line each; empty when the system is idle.

    Its cost does not grow with the history: a stat per queue, a get per
    pipeline document (not its items) and three stats per request queue
    (:meth:`~scheduler.zk.job_requests.JobRequestQueue.active_count`), so
    ``sluice wait --idle`` can poll it.
    """
    found = [f"events of connection {c}" for c in connections_with_events(client)]
    tenants = inventory.tenants(client)
    found += [
        f"events of tenant {t}"
        for t in tenants
        if _events(client, paths.tenant_management_queue(t), paths.tenant_trigger_queue(t))
    ]
    found += [
        f"reconfiguration of tenant {t}"
        for t in tenants
        if _events(client, paths.tenant_reconfigure_queue(t))
    ]
    for tenant in tenants:
        for pipeline in inventory.pipelines(client, tenant):
            if _pipeline_events(client, tenant, pipeline) or any(
                flags.is_raised(client, flag)
                for flag in (
                    paths.pipeline_dirty(tenant, pipeline),
                    paths.pipeline_report_retry(tenant, pipeline),
                )
            ):
                found.append(f"pipeline {tenant}/{pipeline} to process")
            items = items_in(client, tenant, pipeline)
            if items:
                found.append(f"{items} item(s) in pipeline {tenant}/{pipeline}")
    roots = {"merger": paths.merger_queue(), "executor": paths.executor_queue()}
    roots.update(
        {f"executor zone {z}": paths.executor_queue(z) for z in inventory.executor_zones(client)}
    )
    for name, root in roots.items():
        active = JobRequestQueue(client, root).active_count()
        if active:
            found.append(f"{active} {name} request(s) not completed")
    return found
