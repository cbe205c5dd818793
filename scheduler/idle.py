"""Is there pending work anywhere? (``sluice wait --idle``, tests, the demo.)

Pending work is anything ZooKeeper says is not finished: an event in any
queue (connection, tenant, pipeline), an item in any pipeline, a raised
dirty flag, or a merge or build request that is not COMPLETED. Each check
lists one small directory; this is for operators and tests, never for a
hot path.
"""

from __future__ import annotations

from scheduler.state.store import PipelineStore
from scheduler.sweep import executor_zones
from scheduler.zk import flags, inventory, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.job_requests import JobRequestQueue


def _queue_work(client: ZooKeeperClient, root: str, what: str) -> list[str]:
    count = EventQueue(client, root).length()
    return [f"{count} event(s) in {what}"] if count else []


def _pipeline_work(client: ZooKeeperClient, tenant: str, pipeline: str) -> list[str]:
    where = f"{tenant}/{pipeline}"
    found = _queue_work(client, paths.pipeline_management_queue(tenant, pipeline), where)
    found += _queue_work(client, paths.pipeline_trigger_queue(tenant, pipeline), where)
    found += _queue_work(client, paths.pipeline_result_queue(tenant, pipeline), where)
    store = PipelineStore(client)
    items = store.state(tenant, pipeline, store.read(tenant, pipeline)).items
    if items:
        found.append(f"{len(items)} item(s) in pipeline {where}")
    if flags.is_raised(client, paths.pipeline_dirty(tenant, pipeline)):
        found.append(f"pipeline {where} is marked dirty")
    return found


def pending_work(client: ZooKeeperClient) -> list[str]:
    """What is still pending, one line each; empty when the system is idle."""
    found: list[str] = []
    for connection in inventory.connections(client):
        found += _queue_work(
            client, paths.connection_event_queue(connection), f"connection {connection}"
        )
    for tenant in inventory.tenants(client):
        found += _queue_work(client, paths.tenant_management_queue(tenant), f"tenant {tenant}")
        found += _queue_work(client, paths.tenant_trigger_queue(tenant), f"tenant {tenant}")
        for pipeline in inventory.pipelines(client, tenant):
            found += _pipeline_work(client, tenant, pipeline)
    roots = {"merger": paths.merger_queue(), "executor": paths.executor_queue()}
    roots.update({f"executor zone {z}": paths.executor_queue(z) for z in executor_zones(client)})
    for name, root in roots.items():
        active = JobRequestQueue(client, root).active()
        if active:
            found.append(f"{len(active)} {name} request(s) not completed")
    return found
