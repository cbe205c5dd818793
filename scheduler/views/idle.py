"""Pending work, as ZooKeeper records it: for the sweep and ``sluice wait --idle``.

Pending work is anything not finished: an event in any queue (connection,
tenant, pipeline), a delivery deferred until its forge answers again, an
item in any pipeline, a raised dirty flag, or a merge or build request
that is not COMPLETED. The sweep re-nudges what waits for a scheduler task
(:func:`connections_with_events`, :func:`tenants_with_events`,
:func:`pipelines_to_process`); :func:`pending_work` lists everything for
operators and tests in three requests (``multiRead``). Each check lists
one small directory; none of this runs on a hot path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from scheduler.state import codec
from scheduler.stores import inventory
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.zk import doctree, flags, locks, paths, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.multiread import Children, Data, Read, Stat, read_many


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
    """Tenants with reconfiguration requests not yet applied and no reconfiguration under
    way: one that holds or waits for the tenant's write lock (``sluice reconfigure``, a
    reconfigure task) would only make a new one wait for it, on a merger worker the
    holder may need for its own merges; the sweep asks again once it is done."""
    return [
        t
        for t in inventory.tenants(client)
        if _events(client, paths.tenant_reconfigure_queue(t))
        and not locks.has_writer(client, paths.tenant_lock(t))
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
    return 0 if root is None else codec.item_count(root)


def pending_work(client: ZooKeeperClient) -> list[str]:
    """What is still pending, one line each; empty when the system is idle.

    Three requests whatever the number of tenants, pipelines and requests
    kept (``sluice wait --idle`` polls it), each a ``multiRead``
    (:mod:`scheduler.zk.multiread`): the inventories' listings; each tenant's
    pipelines and queues' stats; then every pipeline's queues' stats, flags
    and document (not its items) and every request queue's counts (requests
    minus result markers, :meth:`~scheduler.stores.job_requests.JobRequestQueue.active_count`).
    """
    connections_root, zones_root = paths.connection_events_root(), inventory.executor_zones_root()
    listed = read_many(
        client,
        [
            Children(connections_root),
            Children(paths.tenant_events_root()),
            Children(paths.tenants_root()),
            Children(zones_root),
        ],
    )
    connections, tenant_events, tenant_states, zones = (_unsegmented(r) for r in listed)
    tenants = sorted(tenant_events | tenant_states)

    second: list[Read] = [
        Data(paths.event_queue_items(root(c)))
        for c in sorted(connections)
        for root in (paths.connection_event_queue, paths.connection_deferred_queue)
    ]
    for tenant in tenants:
        second += [
            Children(paths.pipeline_events_root(tenant)),
            Children(paths.pipelines_root(tenant)),
            Data(paths.event_queue_items(paths.tenant_management_queue(tenant))),
            Data(paths.event_queue_items(paths.tenant_trigger_queue(tenant))),
            Data(paths.event_queue_items(paths.tenant_reconfigure_queue(tenant))),
        ]
    answers = iter(read_many(client, second))
    found = [line for c in sorted(connections) for line in _connection_work(c, answers)]
    pipelines: list[tuple[str, str]] = []
    reconfiguring: list[str] = []
    for tenant in tenants:
        events, states, management, trigger, reconfigure = (next(answers) for _ in range(5))
        pipelines += [(tenant, p) for p in sorted(_unsegmented(events) | _unsegmented(states))]
        if _count(management) + _count(trigger):
            found.append(f"events of tenant {tenant}")
        if _count(reconfigure):
            reconfiguring.append(f"reconfiguration of tenant {tenant}")
    found += reconfiguring

    roots = {"merger": paths.merger_queue(), "executor": paths.executor_queue()}
    roots.update({f"executor zone {z}": paths.executor_queue(z) for z in sorted(zones)})
    third: list[Read] = []
    for tenant, pipeline in pipelines:
        third += [Data(path) for path in _pipeline_looks(tenant, pipeline)]
    for root in roots.values():
        results = Data(paths.request_child(root, "results"))
        third += [results, Data(paths.request_child(root, "requests")), results]
    answers = iter(read_many(client, third))
    for tenant, pipeline in pipelines:
        *queues, dirty, retry, document = (next(answers) for _ in range(6))
        if sum(_count(q) for q in queues) or dirty is not None or retry is not None:
            found.append(f"pipeline {tenant}/{pipeline} to process")
        items = _items(client, tenant, pipeline, document)
        if items:
            found.append(f"{items} item(s) in pipeline {tenant}/{pipeline}")
    for name, root in roots.items():
        before, requests, after = next(answers), next(answers), next(answers)
        active = _active(client, root, before, requests, after)
        if active:
            found.append(f"{active} {name} request(s) not completed")
    return found


def _connection_work(connection: str, answers: Iterator[Any]) -> list[str]:
    """What a connection's queues hold (the next two answers: events, deferred)."""
    events, deferred = _count(next(answers)), _count(next(answers))
    found = [f"events of connection {connection}"] if events else []
    if deferred:
        found.append(f"{deferred} deferred deliveries of connection {connection}")
    return found


def _unsegmented(names: list[str] | None) -> set[str]:
    return {paths.unsegment(name) for name in names or []}


def _count(answer: tuple[bytes, Stat] | None) -> int:
    """How many children a Data read's node has (0 if it does not exist)."""
    return 0 if answer is None else int(answer[1].numChildren)


def _pipeline_looks(tenant: str, pipeline: str) -> list[str]:
    """The nodes ``pending_work`` reads of a pipeline: its queues, flags and document."""
    return [
        paths.event_queue_items(paths.pipeline_management_queue(tenant, pipeline)),
        paths.event_queue_items(paths.pipeline_trigger_queue(tenant, pipeline)),
        paths.event_queue_items(paths.pipeline_result_queue(tenant, pipeline)),
        paths.pipeline_dirty(tenant, pipeline),
        paths.pipeline_report_retry(tenant, pipeline),
        codec.root_path(tenant, pipeline),
    ]


def _items(
    client: ZooKeeperClient, tenant: str, pipeline: str, document: tuple[bytes, Stat] | None
) -> int:
    """How many items the pipeline document lists (read again only when sharded)."""
    if document is None or not document[0]:
        return 0
    raw = document[0]
    if raw.startswith(sharding.POINTER_MAGIC):
        return items_in(client, tenant, pipeline)
    return codec.item_count(stored.decode(raw, codec.root_path(tenant, pipeline)))


def _active(
    client: ZooKeeperClient,
    root: str,
    before: tuple[bytes, Stat] | None,
    requests: tuple[bytes, Stat] | None,
    after: tuple[bytes, Stat] | None,
) -> int:
    """Requests minus result markers, if no marker came or went between the reads."""
    if requests is None:
        return 0
    if (before is None) != (after is None) or (
        before is not None and after is not None and before[1].cversion != after[1].cversion
    ):
        return JobRequestQueue(client, root).active_count()  # completions meanwhile
    return max(0, _count(requests) - _count(after))
