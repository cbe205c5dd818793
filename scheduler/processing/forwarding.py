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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduler import scope, tasknames
from scheduler.drivers import ForgeError, webhooks
from scheduler.errors import SluiceError
from scheduler.processing.environment import Nudge
from scheduler.wire.events import (
    Dequeue,
    Enqueue,
    MalformedEventError,
    TriggerEvent,
    decode_as,
    decode_management,
)
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import MAX_TRANSACTION_BYTES, Transaction
from scheduler.zk.event_queue import Event, EventQueue, commit_creating_parents

log = logging.getLogger(__name__)

BATCH = 100
# bytes of one batch's transaction (ZooKeeper refuses a multi over ~1 MB)
BATCH_BYTES = MAX_TRANSACTION_BYTES // 2


class ForgeUnavailableError(SluiceError):
    """A forge's API did not answer while its events were processed (retried)."""


class Routing(Protocol):
    """Which tenants and pipelines an event concerns (from the tenant layouts)."""

    def tenants_for_project(self, connection: str, project: str) -> list[str]: ...

    def pipelines_for_event(self, tenant: str, event: Mapping[str, Any]) -> list[str]: ...

    def default_branch(self, tenant: str, project: str) -> str: ...

    def pipelines(self, tenant: str) -> list[str]: ...


def _drain(
    client: ZooKeeperClient,
    lock_path: str,
    queue: EventQueue,
    route: Callable[[Event], Sequence[tuple[str, dict[str, Any]]]],
) -> set[str]:
    """Move ``queue``'s events where ``route`` says, batch by batch; returns the targets.

    A batch is at most :data:`BATCH` events and closes early when its
    transaction would pass :data:`BATCH_BYTES` (an event for a project that
    many tenants hold puts one copy into each tenant's queue).
    """
    touched: set[str] = set()
    held = locks.try_exclusive(client, lock_path)
    if held is None:
        return touched  # another worker drains it; it re-checks after releasing
    with held:
        while True:
            events = queue.read(limit=BATCH)
            if not events:
                break
            batch = _Batch(held.context.transaction())
            for event in events:
                ops = Transaction(client)
                targets: dict[str, EventQueue] = {}
                for target, payload in route(event):
                    targets.setdefault(target, EventQueue(client, target)).put_ops(payload, ops)
                queue.ack_ops(event, ops)
                if batch.moved and batch.txn.size + ops.size > BATCH_BYTES:
                    touched |= batch.commit(client, queue)
                    batch = _Batch(held.context.transaction())
                batch.add(event, ops, targets)
            touched |= batch.commit(client, queue)
    return touched


@dataclass
class _Batch:
    """Events moved in one transaction, with the queues they go to."""

    txn: Transaction
    moved: list[Event] = field(default_factory=list)
    targets: dict[str, EventQueue] = field(default_factory=dict)

    def add(self, event: Event, ops: Transaction, targets: Mapping[str, EventQueue]) -> None:
        self.txn.extend(ops)
        self.moved.append(event)
        self.targets.update(targets)

    def commit(self, client: ZooKeeperClient, queue: EventQueue) -> set[str]:
        commit_creating_parents(client, self.txn, list(self.targets.values()))
        for event in self.moved:
            queue.discard_data(event)
        return set(self.targets)


def forward_connection_events(
    client: ZooKeeperClient,
    routing: Routing,
    nudge: Nudge,
    connection: str,
    translate: Callable[[Mapping[str, Any]], list[TriggerEvent]] = webhooks.translate,
) -> None:
    queue = EventQueue(client, paths.connection_event_queue(connection))

    def route(event: Event) -> list[tuple[str, dict[str, Any]]]:
        try:
            if webhooks.is_webhook(event.payload):  # a forge's raw event: its driver reads it
                triggers = translate(event.payload)
            else:
                triggers = [decode_as(event.payload, TriggerEvent)]
        except MalformedEventError as exc:
            log.error("%s: dropping malformed event %s: %s", connection, event.path, exc)
            return []
        except ForgeError as exc:
            if 400 <= exc.status < 500:  # the forge says no (a pull request gone): drop it
                log.error("%s: dropping event %s: %s", connection, event.path, exc)
                return []
            raise ForgeUnavailableError(f"{connection}: {exc}") from exc
        routed = []
        for trigger in triggers:
            payload = replace(trigger, connection=connection, event_id=event.id).to_dict()
            tenants = routing.tenants_for_project(connection, trigger.project)
            routed += [(paths.tenant_trigger_queue(t), payload) for t in tenants]
        return routed

    touched = _drain(client, paths.connection_lock(connection, "events"), queue, route)
    for tenant in sorted({_tenant_of(root) for root in touched}):
        nudge(tasknames.PROCESS_TENANT, (tenant,), None)
    if queue.length():
        nudge(tasknames.FORWARD_CONNECTION_EVENTS, (connection,), None)


def is_abandoned(trigger: TriggerEvent) -> bool:
    """A pull or merge request closed without being merged (Zuul dequeues its items)."""
    if trigger.type not in ("pull_request", "gl_merge_request"):
        return False
    return trigger.extra.get("action") == "closed" and not trigger.extra.get("merged")


def revises(trigger: TriggerEvent) -> bool:
    """A pull or merge request given a new head or target branch (its old versions leave)."""
    if trigger.type not in ("pull_request", "gl_merge_request"):
        return False
    action = trigger.extra.get("action")
    return action in ("changed", "edited") and bool(trigger.newrev and trigger.branch)


def _tenant_of(trigger_root: str) -> str:
    return paths.unsegment(paths.basename(paths.parent(trigger_root)))


def process_tenant(client: ZooKeeperClient, routing: Routing, nudge: Nudge, tenant: str) -> None:
    management = EventQueue(client, paths.tenant_management_queue(tenant))
    trigger = EventQueue(client, paths.tenant_trigger_queue(tenant))
    targets: dict[str, str] = {}

    def route_management(event: Event) -> list[tuple[str, dict[str, Any]]]:
        try:
            management = decode_management(event.payload)
        except MalformedEventError as exc:
            log.error("%s: dropping malformed event %s: %s", tenant, event.path, exc)
            return []
        if not management.pipeline:
            log.error("%s: management event without a pipeline: %s", tenant, event.path)
            return []
        root = paths.pipeline_management_queue(tenant, management.pipeline)
        targets[root] = management.pipeline
        return [(root, management.to_dict())]

    def route_trigger(event: Event) -> list[tuple[str, dict[str, Any]]]:
        return _route_trigger(routing, tenant, event, targets)

    _drain(client, paths.management_queue_lock(tenant), management, route_management)
    # Routing asks the layout per event: validated once for the hop (as
    # unfenced as one check per event, whose commit comes later anyway)
    with scope.validation_scope():
        _drain(client, paths.trigger_queue_lock(tenant), trigger, route_trigger)
    for pipeline in sorted(set(targets.values())):
        nudge(tasknames.PROCESS_PIPELINE, (tenant, pipeline), None)
    if management.length() or trigger.length():
        nudge(tasknames.PROCESS_TENANT, (tenant,), None)


def _route_trigger(
    routing: Routing, tenant: str, event: Event, targets: dict[str, str]
) -> list[tuple[str, dict[str, Any]]]:
    """Where a tenant's trigger event goes (``targets``: queue root -> pipeline, to nudge)."""
    try:
        trigger = decode_as(event.payload, TriggerEvent)
    except MalformedEventError as exc:
        log.error("%s: dropping malformed event %s: %s", tenant, event.path, exc)
        return []
    if not trigger.connection:
        log.error("%s: trigger event %s names no connection", tenant, event.path)
        return []
    try:
        change = trigger.change()
    except (KeyError, TypeError, ValueError) as exc:  # its dependencies are malformed
        log.error("%s: dropping trigger event %s: %s", tenant, event.path, exc)
        return []
    if is_abandoned(trigger):  # closed unmerged: its items leave every pipeline
        gone = Dequeue(replace(change, branch=""), event_id=event.id).to_dict()
        routed = []
        for pipeline in routing.pipelines(tenant):
            root = paths.pipeline_management_queue(tenant, pipeline)
            targets[root] = pipeline
            routed.append((root, gone))
        return routed
    routed = []
    if revises(trigger):  # the items of its older versions leave every pipeline
        stale = Dequeue(change, event_id=event.id, current=trigger.newrev).to_dict()
        for pipeline in routing.pipelines(tenant):
            root = paths.pipeline_management_queue(tenant, pipeline)
            targets[root] = pipeline
            routed.append((root, stale))
    pipelines = routing.pipelines_for_event(tenant, trigger.to_dict())
    if not pipelines:
        return routed
    if not change.branch:  # a tag: tested on the project's default branch
        change = replace(change, branch=routing.default_branch(tenant, trigger.project))
    payload = Enqueue(change, event_id=event.id).to_dict()
    for pipeline in pipelines:
        root = paths.pipeline_trigger_queue(tenant, pipeline)
        targets[root] = pipeline
        routed.append((root, payload))
    return routed
