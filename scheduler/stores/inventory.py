"""What exists in the tree: tenants, pipelines and connections with queues or state.

For the maintenance sweep and ``sluice wait``/``status``, which must find
work that no nudge points at. Each call lists a small directory (one child
per tenant, pipeline or connection); none of them is used on a hot path.
"""

from __future__ import annotations

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient


def _names(client: ZooKeeperClient, path: str) -> set[str]:
    try:
        return {paths.unsegment(child) for child in client.get_children(path)}
    except NoNodeError:
        return set()


def connections(client: ZooKeeperClient) -> list[str]:
    """Connections that have an event queue."""
    return sorted(_names(client, paths.connection_events_root()))


def executor_zones(client: ZooKeeperClient) -> list[str]:
    """Zones that have an executor queue (created by a first submit)."""
    return sorted(_names(client, executor_zones_root()))


def executor_zones_root() -> str:
    """The zones' parent, through the path builder (the queue of any zone)."""
    return paths.parent(paths.executor_queue("zone"))


def semaphores(client: ZooKeeperClient) -> list[str]:
    """Paths of every semaphore node, tenant and global."""
    found = [
        paths.global_semaphore(name) for name in _names(client, paths.global_semaphores_root())
    ]
    for tenant in _names(client, paths.semaphores_root()):
        found += [
            paths.semaphore(tenant, name) for name in _names(client, paths.semaphores_root(tenant))
        ]
    return sorted(found)


def tenants(client: ZooKeeperClient) -> list[str]:
    """Tenants that have event queues or pipeline state."""
    return sorted(_names(client, paths.tenant_events_root()) | _names(client, paths.tenants_root()))


def pipelines(client: ZooKeeperClient, tenant: str) -> list[str]:
    """Pipelines of ``tenant`` that have event queues or state."""
    found = _names(client, paths.pipeline_events_root(tenant))
    return sorted(found | _names(client, paths.pipelines_root(tenant)))
