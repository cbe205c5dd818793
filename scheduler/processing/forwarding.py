"""The event hops before a pipeline: connection queue -> tenant queues -> pipeline queues.

* :func:`forward_connection_events` moves each event of a connection's queue
  into the trigger queue of every tenant that holds the event's project.
* :func:`process_tenant` moves management events (enqueue, dequeue: they
  name their pipeline) into that pipeline's management queue, and trigger
  events into the trigger queue of every pipeline whose triggers match;
  unless the tenant's trigger queue is paused (its events stay) or
  discarding (they are dropped): :mod:`scheduler.stores.event_state`.

The connection hop is the front door's last step and nothing a delivery
holds may stall it: each event is routed, deferred (its forge was
unavailable: the connection's deferred queue, tried again after a back-off
by this hop) or set aside with its reason
(:class:`~scheduler.stores.deliveries.SetAsideStore`), in the transaction that
acknowledges it; only ZooKeeper's own failures abort the hop.

Each hop runs under its queue's lock and commits, per batch, the puts into
the next queues and the acks of the events it moved in ONE transaction
fenced by that lock: an event moves exactly once, and a worker that dies
mid-hop leaves the batch in place for the next (docs/architecture.md invariant 4).
After releasing the lock a hop looks at its queue once more and nudges
itself if events arrived meanwhile, so no wake-up is lost.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from scheduler import scope
from scheduler.drivers import ForgeError, webhooks
from scheduler.layouts.triggers import ENQUEUE
from scheduler.nudge import task_names
from scheduler.processing import behind
from scheduler.processing.environment import Nudge
from scheduler.stores import deliveries
from scheduler.stores.event_state import discard_trigger_events, event_state
from scheduler.stores.parked import Parked
from scheduler.wire.events import (
    Dequeue,
    Enqueue,
    MalformedEventError,
    ReconfigureEvent,
    TriggerEvent,
    decode_as,
    decode_management,
)
from scheduler.zk import locks, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import MAX_TRANSACTION_BYTES, Transaction
from scheduler.zk.errors import (
    AccessDeniedError,
    DecodeError,
    LockLostError,
    ZooKeeperUnavailableError,
)
from scheduler.zk.event_queue import Event, EventQueue, commit_creating_parents

log = logging.getLogger(__name__)

BATCH = 100
# bytes of one batch's transaction (ZooKeeper refuses a multi over ~1 MB)
BATCH_BYTES = MAX_TRANSACTION_BYTES // 2
# seconds after which a batch is committed, however few its events: a forge
# that answers slowly (or times out) for each delivery never costs the work
# of a whole batch when the hop is cut short
BATCH_SECONDS = 10.0
# the events that move a branch (a push, the git driver's ref events)
BRANCH_EVENTS = frozenset({"ref-updated", "ref-created", "ref-deleted", "push", "gl_push"})


# Failures of ZooKeeper met while an event is routed: the task retries the hop
INFRASTRUCTURE = (ZooKeeperUnavailableError, LockLostError, AccessDeniedError)


class Routing(Protocol):
    """Which tenants and pipelines an event concerns (from the tenant layouts)."""

    def tenants_for_project(self, connection: str, project: str) -> list[str]: ...

    def verdicts(self, tenant: str, event: Mapping[str, Any]) -> dict[str, str]: ...

    def requirements_verdict(self, tenant: str, pipeline: str, event: Mapping[str, Any]) -> str: ...

    def default_branch(self, tenant: str, project: str) -> str: ...

    def pipelines(self, tenant: str) -> list[str]: ...


# What a route gets: an event, and the event's own transaction (for writes of
# its own beside the puts); what it gives: (queue root, payload) to put.
Route = Callable[[Event, Transaction], Sequence[tuple[str, dict[str, Any]]]]


def _drain(
    client: ZooKeeperClient,
    lock_path: str,
    queue: EventQueue,
    route: Callable[[Event], Sequence[tuple[str, dict[str, Any]]]],
) -> set[str]:
    """Move ``queue``'s events where ``route`` says, under the lock; returns the targets."""
    return _drain_all(client, lock_path, [_Source(queue, lambda event, _ops: route(event))])


@dataclass(frozen=True)
class _Source:
    """A queue a hop drains: its route, and (for a deferred queue) which events are due."""

    queue: EventQueue
    route: Route
    due: Callable[[Event], bool] | None = None


def _drain_all(client: ZooKeeperClient, lock_path: str, sources: Sequence[_Source]) -> set[str]:
    """Drain each source in turn under one hold of the lock; returns the targets."""
    held = locks.try_exclusive(client, lock_path)
    if held is None:
        return set()  # another worker drains it; it re-checks after releasing
    touched: set[str] = set()
    with held:
        for source in sources:
            touched |= _move(client, held, source)
    return touched


def _move(client: ZooKeeperClient, held: locks.HeldLock, source: _Source) -> set[str]:
    """Move a source's events batch by batch (a deferred queue: up to its first not due).

    A batch is at most :data:`BATCH` events and closes early when its
    transaction would pass :data:`BATCH_BYTES` (an event for a project that
    many tenants hold puts one copy into each tenant's queue), or once it
    took :data:`BATCH_SECONDS` to route.
    """
    touched: set[str] = set()
    queue = source.queue
    while True:
        if source.due is not None and not _head_due(queue, source.due):
            break  # a deferred queue whose first delivery waits: none of it is read
        events = queue.read(limit=BATCH)
        if source.due is not None:
            ready = list(itertools.takewhile(source.due, events))
            events, done = ready, len(ready) < len(events)
        else:
            done = False
        if not events:
            break
        batch = _Batch(held.context.transaction())
        for event in events:
            ops = Transaction(client)
            targets: dict[str, EventQueue] = {}
            for target, payload in source.route(event, ops):
                targets.setdefault(target, EventQueue(client, target)).put_ops(payload, ops)
            queue.ack_ops(event, ops)
            if batch.moved and (
                batch.txn.size + ops.size > BATCH_BYTES
                or time.monotonic() - batch.started > BATCH_SECONDS
            ):
                touched |= batch.commit(client, queue)
                batch = _Batch(held.context.transaction())
            batch.add(event, ops, targets)
        touched |= batch.commit(client, queue)
        if done:
            break
    return touched


def _head_due(queue: EventQueue, due: Callable[[Event], bool]) -> bool:
    head = queue.read(limit=1)
    return bool(head) and due(head[0])


@dataclass
class _Batch:
    """Events moved in one transaction, with the queues they go to."""

    txn: Transaction
    started: float = field(default_factory=time.monotonic)
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
    *,
    translate: Callable[[Mapping[str, Any]], list[TriggerEvent]] = webhooks.translate,
    retry: webhooks.DeliveryRetry | None = None,
    now: float | None = None,
) -> float | None:
    """Move the connection's events (and its deferred deliveries now due) to the tenants.

    Every event is either routed, deferred (its forge was unavailable: it
    goes to the deferred queue with its attempt count and back-off) or set
    aside with its reason, in the transaction that acknowledges it, so no
    delivery ever holds back the ones behind it. Returns the seconds until
    the deferred queue's head is due when this pass deferred or took
    deliveries and some still wait (the caller nudges the hop again then;
    the sweep does it too), else None. ``now``: the time this pass takes
    for the present (the clock, by default).
    """
    queue = EventQueue(client, paths.connection_event_queue(connection))
    deferred = EventQueue(client, paths.connection_deferred_queue(connection))
    policy = retry or webhooks.DeliveryRetry()
    hop = _ConnectionHop(client, connection, routing, translate, policy, deferred.root)
    hop.now = time.time() if now is None else now
    sources = [_Source(queue, hop.route), _Source(deferred, hop.route, due=hop.due)]
    touched = _drain_all(client, paths.connection_lock(connection, "events"), sources)
    for tenant in sorted({hop.tenants[root] for root in touched if root in hop.tenants}):
        nudge(task_names.PROCESS_TENANT, (tenant,), None)
    if queue.length():
        nudge(task_names.FORWARD_CONNECTION_EVENTS, (connection,), None)
    if not hop.handled_deferred or not deferred.length():
        return None
    head = deferred.read(limit=1)
    if not head:
        return None
    return max(0.0, deliveries.retry_state(head[0].payload).not_before - hop.now)


class _ConnectionHop:
    """The connection hop's decision for each event: routed, deferred or set aside."""

    def __init__(  # noqa: PLR0917 (what the hop was given)
        self,
        client: ZooKeeperClient,
        connection: str,
        routing: Routing,
        translate: Callable[[Mapping[str, Any]], list[TriggerEvent]],
        retry: webhooks.DeliveryRetry,
        deferred_root: str,
    ) -> None:
        self.connection = connection
        self.routing = routing
        self.translate = translate
        self.retry = retry
        self.deferred_root = deferred_root
        self.set_aside = deliveries.SetAsideStore(client, connection)
        self.now = time.time()
        self.handled_deferred = False
        # trigger queue root -> its tenant (to nudge the tenants an event went to)
        self.tenants: dict[str, str] = {}

    def due(self, event: Event) -> bool:
        """Whether a deferred delivery may be tried (never in the pass that deferred it)."""
        return deliveries.retry_state(event.payload).not_before < self.now

    def route(self, event: Event, ops: Transaction) -> list[tuple[str, dict[str, Any]]]:
        payload = event.payload
        try:
            triggers = self._triggers(payload)
            routed = self._payloads(event, triggers)
        except INFRASTRUCTURE:
            raise  # ZooKeeper, not the delivery: the task retries
        except Exception as exc:  # the boundary: whatever a delivery holds
            if webhooks.is_webhook(payload) and webhooks.is_transient(exc):
                return self._defer(event, ops, f"{type(exc).__name__}: {exc}")
            self._refuse(event, ops, exc)
            return []
        if deliveries.retry_state(payload).attempts:
            self.handled_deferred = True
        found = []
        for project, data in routed:
            for tenant in self.routing.tenants_for_project(self.connection, project):
                root = paths.tenant_trigger_queue(tenant)
                self.tenants[root] = tenant
                found.append((root, data))
        return found

    def _triggers(self, payload: Mapping[str, Any]) -> list[TriggerEvent]:
        if webhooks.is_webhook(payload):  # a forge's raw event: its driver reads it
            return self.translate(payload)
        return [decode_as(payload, TriggerEvent)]

    def _payloads(
        self, event: Event, triggers: Sequence[TriggerEvent]
    ) -> list[tuple[str, dict[str, Any]]]:
        """Each trigger's project and payload, checked to be storable (a forge's answer
        may hold what JSON cannot carry)."""
        found = []
        for trigger in triggers:
            data = replace(trigger, connection=self.connection, event_id=event.id).to_dict()
            stored.encode(data)
            found.append((trigger.project, data))
        return found

    def _defer(self, event: Event, ops: Transaction, why: str) -> list[tuple[str, dict[str, Any]]]:
        """To the deferred queue with one more attempt, or set aside after the last."""
        self.handled_deferred = True
        attempts = deliveries.retry_state(event.payload).attempts + 1
        if attempts >= self.retry.attempts:
            reason = f"forge unavailable: {why} ({attempts} attempts)"
            log.error("%s: delivery %s set aside: %s", self.connection, event.path, reason)
            self._set_aside(event, ops, reason, attempts)
            return []
        state = deliveries.RetryState(attempts, self.now + self.retry.delay(attempts), why)
        log.warning(
            "%s: delivery %s deferred (attempt %d, again in %.0fs): %s",
            self.connection,
            event.path,
            attempts,
            self.retry.delay(attempts),
            why,
        )
        return [(self.deferred_root, deliveries.deferred_payload(event.payload, state))]

    def _refuse(self, event: Event, ops: Transaction, exc: Exception) -> None:
        if isinstance(exc, MalformedEventError | ForgeError | DecodeError):
            log.error("%s: delivery %s set aside: %s", self.connection, event.path, exc)
        else:  # not the delivery's fault alone: a bug met on the way
            log.exception("%s: delivery %s set aside", self.connection, event.path)
        attempts = deliveries.retry_state(event.payload).attempts
        self._set_aside(event, ops, f"{type(exc).__name__}: {exc}", attempts)

    def _set_aside(self, event: Event, ops: Transaction, reason: str, attempts: int) -> None:
        payload = event.payload
        delivery = str(payload.get("delivery") or "") if webhooks.is_webhook(payload) else ""
        received = payload.get("received")
        self.set_aside.add_ops(
            ops,
            deliveries.fresh_payload(payload),
            reason,
            delivery=delivery or event.id,
            event=event.id,
            received=float(received) if isinstance(received, int | float) else event.created,
            attempts=attempts,
        )


def is_abandoned(trigger: TriggerEvent) -> bool:
    """A pull or merge request closed without being merged (Zuul dequeues its items)."""
    if trigger.type not in ("pull_request", "gl_merge_request"):
        return False
    return trigger.extra.get("action") == "closed" and not trigger.extra.get("merged")


def branch_made_or_removed(trigger: TriggerEvent) -> str:
    """Why the event changes a project's branches ("" if it does not)."""
    if trigger.type not in BRANCH_EVENTS or not trigger.branch:
        return ""
    if trigger.deleted or trigger.type == "ref-deleted" or _zeros(trigger.newrev):
        return f"branch {trigger.branch} of {trigger.project} deleted"
    if trigger.type == "ref-created" or _zeros(trigger.oldrev):
        return f"branch {trigger.branch} of {trigger.project} created"
    return ""


def _zeros(rev: str) -> bool:
    """A git "no commit" (all zeros), as a push of a new or deleted ref names it."""
    return bool(rev) and rev.strip("0") == ""


def revises(trigger: TriggerEvent) -> bool:
    """A pull or merge request given a new head or target branch (its old versions leave)."""
    if trigger.type not in ("pull_request", "gl_merge_request"):
        return False
    action = trigger.extra.get("action")
    return action in ("changed", "edited") and bool(trigger.newrev and trigger.branch)


def process_tenant(client: ZooKeeperClient, routing: Routing, nudge: Nudge, tenant: str) -> None:
    management = EventQueue(client, paths.tenant_management_queue(tenant))
    trigger = EventQueue(client, paths.tenant_trigger_queue(tenant))
    # queue root -> the pipeline to nudge (None: the tenant's reconfiguration)
    targets: dict[str, str | None] = {}

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

    parked = Parked(client, tenant)

    def route_trigger(event: Event) -> list[tuple[str, dict[str, Any]]]:
        return _route_trigger(routing, tenant, event, targets, parked)

    _drain(client, paths.management_queue_lock(tenant), management, route_management)
    state = event_state(client, tenant)
    if state.trigger_queue_discarding:
        discard_trigger_events(client, tenant, wait=0)
    elif not state.trigger_queue_paused:
        # Routing asks the layout per event: validated once for the hop (as
        # unfenced as one check per event, whose commit comes later anyway)
        with scope.validation_scope():
            _drain(client, paths.trigger_queue_lock(tenant), trigger, route_trigger)
    for pipeline in sorted({p for p in targets.values() if p is not None}):
        nudge(task_names.PROCESS_PIPELINE, (tenant, pipeline), None)
    if None in targets.values():
        nudge(task_names.RECONFIGURE, (tenant,), None)
    if management.length() or (not state.trigger_queue_paused and trigger.length()):
        nudge(task_names.PROCESS_TENANT, (tenant,), None)


def _route_trigger(
    routing: Routing,
    tenant: str,
    event: Event,
    targets: dict[str, str | None],
    parked: Parked,
) -> list[tuple[str, dict[str, Any]]]:
    """Where a tenant's trigger event goes (``targets``: queue root -> pipeline, to nudge).

    A change that waits for a dependency is parked; one that enters a
    pipeline takes the parked changes that wait for it there behind it
    (:mod:`scheduler.processing.behind`).
    """
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
    branching = branch_made_or_removed(trigger)
    if branching:  # the tenant's branches changed: reconfigured (as Zuul does)
        root = paths.tenant_reconfigure_queue(tenant)
        targets[root] = None
        routed.append((root, ReconfigureEvent(branching, time.time()).to_dict()))
    if revises(trigger):  # the items of its older versions leave every pipeline
        stale = Dequeue(change, event_id=event.id, current=trigger.newrev).to_dict()
        for pipeline in routing.pipelines(tenant):
            root = paths.pipeline_management_queue(tenant, pipeline)
            targets[root] = pipeline
            routed.append((root, stale))
    described = trigger.to_dict()
    verdicts = routing.verdicts(tenant, described)
    pipelines = [name for name, verdict in verdicts.items() if verdict == ENQUEUE]
    pipelines += behind.after_event(routing, parked, tenant, described, verdicts)
    payload = _enqueue(routing, tenant, trigger, event.id) if pipelines else {}
    for pipeline in pipelines:
        root = paths.pipeline_trigger_queue(tenant, pipeline)
        targets[root] = pipeline
        routed.append((root, payload))
        for waiting in behind.behind(routing, parked, tenant, described, pipeline):
            try:
                queued = decode_as(waiting, TriggerEvent)
                routed.append((root, _enqueue(routing, tenant, queued, event.id)))
            except (MalformedEventError, KeyError, TypeError, ValueError) as exc:
                log.error("%s: a parked change cannot enter %s: %s", tenant, pipeline, exc)
    return routed


def _enqueue(routing: Routing, tenant: str, trigger: TriggerEvent, event_id: str) -> dict[str, Any]:
    change = trigger.change()
    if not change.branch:  # a tag: tested on the project's default branch
        change = replace(change, branch=routing.default_branch(tenant, trigger.project))
    return Enqueue(change, event_id=event_id).to_dict()
