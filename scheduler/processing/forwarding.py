"""The event hops before a pipeline: connection queue -> tenant queues -> pipeline queues.

* :func:`forward_connection_events` moves each event of a connection's queue
  into the trigger queue of every tenant that holds the event's project.
* :func:`process_tenant` moves management events (enqueue, dequeue: they
  name their pipeline) into that pipeline's management queue, and trigger
  events into the trigger queue of every pipeline whose triggers match.

Each hop runs under its queue's lock and commits, per batch, the puts into
the next queues and the acks of the events it moved in ONE transaction
fenced by that lock: an event moves exactly once, and a worker that dies
mid-hop leaves the batch in place for the next (DESIGN.md invariant 4).
After releasing the lock a hop looks at its queue once more and nudges
itself if events arrived meanwhile, so no wake-up is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from scheduler import tasknames
from scheduler.model.change import Change
from scheduler.processing.environment import Nudge
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import Event, EventQueue, commit_creating_parents

log = logging.getLogger(__name__)

BATCH = 100


class Routing(Protocol):
    """Which tenants and pipelines an event concerns (from the tenant layouts)."""

    def tenants_for_project(self, connection: str, project: str) -> list[str]: ...

    def pipelines_for_event(self, tenant: str, event: Mapping[str, Any]) -> list[str]: ...


def change_of_trigger(event: Mapping[str, Any]) -> Change:
    """The change a trigger event enqueues: a branch update, or a proposed ref."""
    branch = str(event.get("branch", ""))
    ref = str(event.get("ref") or branch)
    return Change(
        connection=str(event["connection"]),
        project=str(event["project"]),
        branch=branch,
        ref=ref,
        commit=str(event.get("newrev", "")),
        is_branch_update=event.get("type") == "ref-updated",
    )


def _drain(
    client: ZooKeeperClient,
    lock_path: str,
    queue: EventQueue,
    route: Callable[[Event], Sequence[tuple[str, dict[str, Any]]]],
) -> set[str]:
    """Move ``queue``'s events where ``route`` says, batch by batch; returns the targets."""
    touched: set[str] = set()
    held = locks.acquire(client, lock_path, blocking=False)
    if held is None:
        return touched  # another worker drains it; it re-checks after releasing
    with held:
        while True:
            events = queue.read(limit=BATCH)
            if not events:
                break
            txn = held.context.transaction()
            targets: dict[str, EventQueue] = {}
            for event in events:
                for target, payload in route(event):
                    targets.setdefault(target, EventQueue(client, target)).put_ops(payload, txn)
                queue.ack_ops(event, txn)
            commit_creating_parents(client, txn, list(targets.values()))
            touched.update(targets)
            for event in events:
                queue.discard_data(event)
    return touched


def forward_connection_events(
    client: ZooKeeperClient, routing: Routing, nudge: Nudge, connection: str
) -> None:
    queue = EventQueue(client, paths.connection_event_queue(connection))

    def route(event: Event) -> list[tuple[str, dict[str, Any]]]:
        payload = event.payload
        project = payload.get("project")
        if not isinstance(project, str) or not project:
            log.error("%s: dropping event without a project: %s", connection, event.path)
            return []
        payload = {**payload, "connection": connection, "event_id": event.id}
        tenants = routing.tenants_for_project(connection, project)
        return [(paths.tenant_trigger_queue(t), payload) for t in tenants]

    touched = _drain(client, paths.connection_lock(connection, "events"), queue, route)
    for tenant in sorted({_tenant_of(root) for root in touched}):
        nudge(tasknames.PROCESS_TENANT, (tenant,), None)
    if queue.length():
        nudge(tasknames.FORWARD_CONNECTION_EVENTS, (connection,), None)


def _tenant_of(trigger_root: str) -> str:
    return paths.unsegment(paths.basename(paths.parent(trigger_root)))


def process_tenant(client: ZooKeeperClient, routing: Routing, nudge: Nudge, tenant: str) -> None:
    management = EventQueue(client, paths.tenant_management_queue(tenant))
    trigger = EventQueue(client, paths.tenant_trigger_queue(tenant))
    targets: dict[str, str] = {}

    def route_management(event: Event) -> list[tuple[str, dict[str, Any]]]:
        pipeline = event.payload.get("pipeline")
        if not isinstance(pipeline, str) or not pipeline:
            log.error("%s: management event without a pipeline: %s", tenant, event.path)
            return []
        root = paths.pipeline_management_queue(tenant, pipeline)
        targets[root] = pipeline
        return [(root, dict(event.payload))]

    def route_trigger(event: Event) -> list[tuple[str, dict[str, Any]]]:
        try:
            change = change_of_trigger(event.payload)
        except KeyError as exc:
            log.error("%s: trigger event %s lacks %s", tenant, event.path, exc)
            return []
        payload = {"type": "enqueue", "change": change.to_dict(), "event_id": event.id}
        routed = []
        for pipeline in routing.pipelines_for_event(tenant, event.payload):
            root = paths.pipeline_trigger_queue(tenant, pipeline)
            targets[root] = pipeline
            routed.append((root, payload))
        return routed

    _drain(client, paths.management_queue_lock(tenant), management, route_management)
    _drain(client, paths.trigger_queue_lock(tenant), trigger, route_trigger)
    for pipeline in sorted(set(targets.values())):
        nudge(tasknames.PROCESS_PIPELINE, (tenant, pipeline), None)
    if management.length() or trigger.length():
        nudge(tasknames.PROCESS_TENANT, (tenant,), None)
