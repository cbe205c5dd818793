"""The maintenance sweep: small steps that find work ZooKeeper says is pending.

The sweep task (``sluice.maintenance.sweep``, on a timer every
``sweep_interval`` seconds) calls :func:`run_sweep` with the steps of
:func:`standard_steps`. For each job request queue (the merger queue, the
unzoned executor queue and every executor zone) the steps are:

* **re-nudge** every REQUESTED request older than ``min_age`` (one sweep
  interval by default): a nudge lost or purged from the broker delays its
  work by at most about one sweep interval (docs/architecture.md invariant 2). The
  broker queue is counted first: if it holds at least one message per such
  request, nothing is re-sent (a backlog is not a loss, and must not grow
  by a duplicate per request and sweep). A request whose nudge is still
  queued may get a second one; that delivery finds it claimed and returns
  without effect.
* **recover lost requests**: RUNNING or PAUSED requests whose lock is gone
  (their worker died and its session expired) are completed with a LOST
  result and their ``request-completed`` event, so the pipeline retries
  them; detection takes at most the session timeout plus one sweep
  interval (invariant 6).
* **clean up** completed requests older than ``max_age`` (a day) that
  nobody waits for, and a build's or a merge's request as soon as its
  completion event is consumed (15 seconds after it completed, at most
  15 seconds later: see :func:`cleanup`) and, for a merge, no item in any
  pipeline names it any more (:func:`referenced_merges`), so the queues
  hold the work in flight and the last half minute's, not the day's.

One runner at a time: the sweep holds the ``general`` cleanup lock
(non-blocking); a sweep that cannot take it returns at once, as another is
running. A step that fails is logged with its traceback and the next step
runs: one broken queue never stops the sweep of the others. Steps are plain
callables, so the scheduler can add its own (pipeline re-nudges) to the
same list.

On ZooKeeper session loss while sweeping, a step fails with a
:class:`~scheduler.zk.errors.ZooKeeperError` and the rest fail fast; every
step is safe to repeat on the next sweep (``recover_lost`` proves in one
transaction that nobody holds the lock).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from scheduler.model.item import QueueItem
from scheduler.nudge import dispatch, task_labels, task_names
from scheduler.reconfiguration import check_tenant_file
from scheduler.settings.sections import Settings
from scheduler.state.store import PipelineStore
from scheduler.stores import deliveries, inventory, parked, provided
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.stores.nodes import NodeStore
from scheduler.stores.semaphores import SemaphoreNode
from scheduler.views import idle
from scheduler.zk import locks, paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext
from scheduler.zk.errors import NoDataError, ZooKeeperError
from scheduler.zk.event_queue import EVENT_PREFIX, EventQueue

log = logging.getLogger(__name__)

SWEEP_LOCK = "general"
# Completed requests are kept this long for their submitter to read.
DEFAULT_REQUEST_MAX_AGE = 24 * 3600.0
# A build's or merge's completed request goes this long after it completed
# once the scheduler consumed its completion event (and, for a merge, no item
# names it): nobody reads it after that (a duplicate or re-sent task finds no
# request: nothing to claim).
CONSUMED_MAX_AGE = 15.0

Nudge = Callable[[JobRequest], object]


@dataclass(frozen=True)
class SweepStep:
    """One step: ``run`` returns the ids it acted on (for the report)."""

    name: str
    run: Callable[[], Sequence[str]]


@dataclass
class SweepReport:
    """What one sweep did; ``ran`` is false when another sweep held the lock."""

    ran: bool
    done: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "ran": self.ran,
            "done": {name: list(ids) for name, ids in self.done.items()},
            "failed": dict(self.failed),
            "seconds": round(self.seconds, 3),
        }


# ---------------------------------------------------------------- steps on one queue


def renudge_pending(
    queue: JobRequestQueue,
    nudge: Nudge,
    min_age: float,
    queued: Callable[[], int] | None = None,
    in_flight: Callable[[], list[JobRequest]] | None = None,
) -> list[str]:
    """Nudge every REQUESTED request created more than ``min_age`` seconds ago.

    ``queued`` counts the nudges waiting in the broker queue. When it holds
    at least one message per such request, none is re-sent: the nudges are
    most likely all there, and a backlog must not grow by one duplicate per
    request and sweep. Once executors drain the queue below that number,
    every one is re-sent: a re-nudge would have waited behind those messages
    anyway (FIFO), so skipping it delays it by at most one more interval.

    ``in_flight``: the queue's requests in flight as this sweep reads them
    (:func:`request_queue_steps`: once for its steps); None reads them now.
    """
    cutoff = time.time() - min_age
    read = (in_flight or queue.in_flight)()
    waiting = [r for r in queue.pending(read) if r.created <= cutoff]
    if not waiting or (queued is not None and queued() >= len(waiting)):
        return []
    for request in waiting:
        nudge(request)
    return [r.uuid for r in waiting]


def recover_lost(
    queue: JobRequestQueue, in_flight: Callable[[], list[JobRequest]] | None = None
) -> list[str]:
    """Complete every lost request as LOST (with its event); the uuids recovered.

    ``in_flight`` as for :func:`renudge_pending`. A read a few steps old is
    safe: the locks are looked at now, and a request that moved on since
    is not recovered (its version changed).
    """
    recovered = []
    for request in queue.lost_requests((in_flight or queue.in_flight)()):
        if queue.recover_lost(request):
            log.warning(
                "request %s of %s (worker %s) lost; completed as LOST",
                request.uuid,
                queue.root,
                request.worker or "?",
            )
            recovered.append(request.uuid)
    return recovered


# Removing day-old requests need not run every sweep: it stats every completed
# request, so this process runs it at most every CLEANUP_EVERY seconds per queue
# (or every max_age / 10, whichever is shorter: tests use ages of seconds).
CLEANUP_EVERY = 300.0
_last_cleanup: dict[tuple[int, str], float] = {}


def cleanup(
    queue: JobRequestQueue,
    max_age: float,
    *,
    consumed: bool = False,
    referenced: Callable[[], set[str]] | None = None,
) -> list[str]:
    """The queue's clean-up, at most every :data:`CLEANUP_EVERY` seconds.

    With ``consumed`` (build and merge requests), at most every
    :data:`CONSUMED_MAX_AGE` seconds, and a request also goes once it
    completed that long ago, no pipeline's result queue still holds its
    completion event and ``referenced()`` (read after the ages, as the
    events are) does not name it: pipeline passes submit these requests
    and their completions go to the pipeline's result queue; a blocking
    caller's request is kept by its waiter node. A day's builds and merges
    would otherwise stay in ZooKeeper (a few kB and three znodes each),
    and with them the server's memory and the size of every snapshot.
    """
    key = (id(queue.client), queue.root)
    now = time.monotonic()
    every = min(CLEANUP_EVERY, max_age / 10, CONSUMED_MAX_AGE if consumed else math.inf)
    if now - _last_cleanup.get(key, -math.inf) < every:
        return []
    _last_cleanup[key] = now
    if not consumed:
        return queue.cleanup(max_age)
    return queue.cleanup(
        max_age,
        consumed_age=min(CONSUMED_MAX_AGE, max_age),
        pending=lambda: still_needed(queue.client, referenced),
    )


def still_needed(
    client: ZooKeeperClient, referenced: Callable[[], set[str]] | None = None
) -> set[str] | None:
    """The completed requests that must stay: events still queued, and what ``referenced`` names.

    None (keep every young request this time) when an event or a
    reference cannot be read.
    """
    queued = queued_completions(client)
    if queued is None or referenced is None:
        return queued
    try:
        return queued | referenced()
    except ZooKeeperError as exc:
        log.warning("the requests pipelines still name could not be read: %s", exc)
        return None


def queued_completions(client: ZooKeeperClient) -> set[str] | None:
    """The requests named by the events still queued in every pipeline's result queue.

    None when an event stays that could not be read (one of a newer Sluice,
    left for a newer reader): the requests it names are unknown, so none is
    taken for consumed this time.
    """
    found: set[str] = set()
    for tenant in inventory.tenants(client):
        for pipeline in inventory.pipelines(client, tenant):
            queue = EventQueue(client, paths.pipeline_result_queue(tenant, pipeline))
            names = queue.listing()
            events = queue.read(names=names)
            found.update(r for e in events if isinstance(r := e.payload.get("request"), str))
            unread = {n for n in names if n.startswith(EVENT_PREFIX)} - {e.id for e in events}
            if unread and unread & set(queue.listing()):
                return None
    return found


# Seconds after which an event's data node that no event names is an orphan
# (a put whose transaction failed after the data was written, or a crash
# between an ack and its data's delete): far longer than any put takes.
EVENT_DATA_MAX_AGE = 3600.0


def event_queue_roots(client: ZooKeeperClient) -> list[str]:
    """Every event queue: each connection's (and its deferred), tenant's and pipeline's."""
    roots = []
    for connection in inventory.connections(client):
        roots += [paths.connection_event_queue(connection)]
        roots += [paths.connection_deferred_queue(connection)]
    for tenant in inventory.tenants(client):
        roots += [paths.tenant_management_queue(tenant), paths.tenant_trigger_queue(tenant)]
        roots += [paths.tenant_reconfigure_queue(tenant)]
        for pipeline in inventory.pipelines(client, tenant):
            roots += [
                paths.pipeline_management_queue(tenant, pipeline),
                paths.pipeline_trigger_queue(tenant, pipeline),
                paths.pipeline_result_queue(tenant, pipeline),
            ]
    return roots


def orphaned_event_data(client: ZooKeeperClient, max_age: float = EVENT_DATA_MAX_AGE) -> list[str]:
    """Remove the data nodes no event names, older than ``max_age``; the queues cleaned.

    Runs at most every :data:`CLEANUP_EVERY` seconds in a process (it lists
    every queue).
    """
    key = (id(client), "event-data")
    now = time.monotonic()
    if now - _last_cleanup.get(key, -math.inf) < min(CLEANUP_EVERY, max_age / 10):
        return []
    _last_cleanup[key] = now
    cleaned = []
    for root in event_queue_roots(client):
        removed = EventQueue(client, root).cleanup(max_age)
        if removed:
            log.warning("%s: %d orphaned event data nodes removed", root, removed)
            cleaned.append(f"{root}: {removed}")
    return cleaned


def request_queue_steps(
    name: str,
    queue: JobRequestQueue,
    nudge: Nudge | None,
    *,
    min_age: float,
    max_age: float = DEFAULT_REQUEST_MAX_AGE,
    queued: Callable[[], int] | None = None,
    consumed: bool = False,
    referenced: Callable[[], set[str]] | None = None,
) -> list[SweepStep]:
    """The steps for one job request queue (``nudge=None``: no re-nudges).

    ``consumed``: the queue's completed requests go once their completion
    event is consumed and ``referenced()`` does not name them (see
    :func:`cleanup`), not only after ``max_age``.
    """
    steps = []
    # one read of the requests in flight for both steps; a failed read is
    # not kept (the cache keeps results only), so the next step reads again
    read = functools.cache(queue.in_flight)
    if nudge is not None:
        steps.append(
            SweepStep(
                f"{name}:renudge", lambda: renudge_pending(queue, nudge, min_age, queued, read)
            )
        )
    steps.append(SweepStep(f"{name}:lost", lambda: recover_lost(queue, read)))
    steps.append(
        SweepStep(
            f"{name}:cleanup",
            lambda: cleanup(queue, max_age, consumed=consumed, referenced=referenced),
        )
    )
    return steps


# ---------------------------------------------------------------- which queues


def _build_nudge(zone: str | None, settings: Settings) -> Nudge:
    return lambda request: dispatch.send_build(
        request.uuid, zone, settings=settings, label=task_labels.request_label(request)
    )


def _broker_count(queue_name: str, settings: Settings) -> Callable[[], int]:
    return lambda: dispatch.queued_messages(queue_name, settings=settings)


def _executor_steps(
    client: ZooKeeperClient,
    settings: Settings,
    zone: str | None,
    *,
    min_age: float,
    max_age: float,
) -> list[SweepStep]:
    queue = JobRequestQueue(client, paths.executor_queue(zone))
    try:
        name = task_names.executor_queue_name(zone)
    except task_names.DispatchError as exc:
        # No worker can consume such a zone's Celery queue: still record its
        # lost requests and clean it up, so one bad name never stops a sweep.
        log.error("executor zone %r: %s; its requests are not re-nudged", zone, exc)
        return request_queue_steps(
            f"executor.{zone}", queue, None, min_age=min_age, max_age=max_age, consumed=True
        )
    return request_queue_steps(
        name,
        queue,
        _build_nudge(zone, settings),
        min_age=min_age,
        max_age=max_age,
        queued=_broker_count(name, settings),
        consumed=True,
    )


def standard_steps(
    client: ZooKeeperClient,
    settings: Settings,
    *,
    renudge_merges: bool = True,
    max_age: float = DEFAULT_REQUEST_MAX_AGE,
) -> list[SweepStep]:
    """Steps for the merger queue, the unzoned executor queue and every zone found.

    Merge requests are re-nudged with ``sluice.merger.run`` on the ``merger``
    queue (:func:`scheduler.nudge.dispatch.send_merge`); ``renudge_merges=False``
    leaves them alone (an app that has no merge task registered). Lost
    merges are completed as LOST like builds; the scheduler merges again.
    """
    min_age = settings.sweep_interval
    merger = JobRequestQueue(client, paths.merger_queue())
    merge_nudge: Nudge | None = None
    if renudge_merges:

        def merge_nudge(request: JobRequest) -> object:
            return dispatch.send_merge(
                request.uuid, settings=settings, label=task_labels.request_label(request)
            )

    steps = request_queue_steps(
        "merger",
        merger,
        merge_nudge,
        min_age=min_age,
        max_age=max_age,
        queued=_broker_count("merger", settings),
        consumed=True,
        referenced=lambda: referenced_merges(client),
    )
    for zone in [None, *inventory.executor_zones(client)]:
        steps += _executor_steps(client, settings, zone, min_age=min_age, max_age=max_age)
    return steps


# ---------------------------------------------------------------- running


def run_steps(steps: Sequence[SweepStep], report: SweepReport) -> None:
    """Run every step; a failing step is logged with its traceback and skipped."""
    for step in steps:
        try:
            report.done[step.name] = list(step.run())
        except Exception as exc:  # a step boundary: one broken queue never stops the rest
            log.exception("sweep step %s failed", step.name)
            report.failed[step.name] = f"{type(exc).__name__}: {exc}"


# Steps whose results are counted in /stats/sweep (metrics): recoveries, re-nudges.
COUNTED = (":lost", ":renudge")


def _count(context: LockContext, report: SweepReport) -> None:
    """Add what this sweep recovered and re-nudged to the totals (under the sweep lock)."""
    done = {n: len(ids) for n, ids in report.done.items() if ids and n.endswith(COUNTED)}
    if not done:
        return
    try:
        try:
            found = stored.load(context, paths.sweep_stats())
            totals, version = dict(found.data.get("totals", {})), found.version
        except NoDataError:
            totals, version = {}, -1
        for name, count in done.items():
            totals[name] = int(totals.get(name, 0)) + count
        stored.save(context, paths.sweep_stats(), {"totals": totals}, version=version)
    except ZooKeeperError as exc:  # a count is for people; the sweep's work is done
        log.warning("sweep: totals not recorded: %s", exc)


def sweep_totals(context: LockContext) -> dict[str, int]:
    """What every sweep so far recovered and re-nudged, by step (``merger:lost`` ...)."""
    try:
        found = stored.load(context, paths.sweep_stats())
    except NoDataError:
        return {}
    return {str(k): int(v) for k, v in dict(found.data.get("totals", {})).items()}


def run_sweep(
    client: ZooKeeperClient,
    steps: Sequence[SweepStep] | Callable[[], Sequence[SweepStep]],
) -> SweepReport:
    """Run the steps under the sweep lock; return at once if another sweep holds it.

    ``steps`` may be a callable, so that listing them (which reads ZooKeeper)
    happens under the lock too.
    """
    started = time.monotonic()
    held = locks.acquire(client, paths.cleanup_lock(SWEEP_LOCK), blocking=False)
    if held is None:
        log.info("sweep skipped: another sweep holds the lock")
        return SweepReport(ran=False)
    report = SweepReport(ran=True)
    try:
        if callable(steps):
            try:
                steps = steps()
            except Exception as exc:  # listing the queues failed: report it, run nothing
                log.exception("sweep: listing the steps failed")
                report.failed["steps"] = f"{type(exc).__name__}: {exc}"
                steps = []
        run_steps(steps, report)
        _count(held.context, report)
    finally:
        held.release()
    report.seconds = time.monotonic() - started
    acted = {name: ids for name, ids in report.done.items() if ids}
    if acted or report.failed:
        log.info("sweep: %s; failed: %s", acted, report.failed)
    return report


# ---------------------------------------------------------------- nodes


def node_steps(client: ZooKeeperClient, settings: Settings) -> list[SweepStep]:
    """Recover what dead launchers and node users left (issue 19, seed 000).

    A pending node request whose launcher died goes back to requested and is
    nudged to the ``launcher`` queue; a node whose user or launcher died is
    marked used, for a launcher to delete. Every launcher's own check does
    the same; the sweep does it too so that recovery does not depend on a
    launcher being alive when its peer died. Two listings when there are no
    node requests or nodes.
    """

    def recover() -> list[str]:
        done = NodeStore(client).recover()
        for request_id in done.requests_requeued:
            dispatch.send(task_names.LAUNCH, request_id, settings=settings, queue="launcher")
        return [*done.requests_requeued, *done.nodes_used]

    return [SweepStep("nodes:recover", recover)]


# ---------------------------------------------------------------- scheduler work


def scheduler_steps(client: ZooKeeperClient, settings: Settings) -> list[SweepStep]:
    """Re-nudge every connection, tenant and pipeline that ZooKeeper says has work.

    A purged broker or a scheduler worker killed mid-pass leaves events
    queued or a dirty flag raised; these steps send the nudge again, so the
    work is delayed by at most one sweep interval (docs/architecture.md invariant 2).
    A nudge for work that another worker is doing coalesces harmlessly.
    """

    def nudge_connection(name: str) -> None:
        dispatch.send(task_names.FORWARD_CONNECTION_EVENTS, name, settings=settings)

    def connections() -> list[str]:
        found = idle.connections_with_events(client)
        for name in found:
            dispatch.send(task_names.FORWARD_CONNECTION_EVENTS, name, settings=settings)
        return found

    def tenants() -> list[str]:
        found = idle.tenants_with_events(client)
        for name in found:
            dispatch.send(task_names.PROCESS_TENANT, name, settings=settings)
        return found

    def tenant_file() -> list[str]:
        # the next step nudges every tenant with requests, these included
        return check_tenant_file(client, settings, lambda task, args: None)

    def reconfigurations() -> list[str]:
        found = idle.tenants_to_reconfigure(client)
        for name in found:
            dispatch.send(task_names.RECONFIGURE, name, settings=settings)
        return found

    def nudge_pipeline(tenant: str, pipeline: str) -> None:
        dispatch.send(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=settings)

    def pipelines() -> list[str]:
        found = idle.pipelines_to_process(client)
        for tenant, pipeline in found:
            dispatch.send(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=settings)
        return [f"{tenant}/{pipeline}" for tenant, pipeline in found]

    return [
        SweepStep("tenant-file", tenant_file),
        SweepStep("reconfigure", reconfigurations),
        SweepStep("connections", connections),
        SweepStep("tenants", tenants),
        SweepStep("pipelines", pipelines),
        SweepStep("semaphores", lambda: release_leaked_semaphores(client, nudge_pipeline)),
        SweepStep("semaphore-waiters", lambda: wake_semaphore_waiters(client, nudge_pipeline)),
        SweepStep("webhook-deliveries", lambda: deliveries.prune(client)),
        SweepStep("deferred-deliveries", lambda: renudge_deferred(client, nudge_connection)),
        SweepStep("set-aside-deliveries", lambda: deliveries.prune_set_aside(client)),
        SweepStep("parked-changes", lambda: parked.prune(client, inventory.tenants(client))),
        SweepStep("provided-records", lambda: provided.prune(client)),
        SweepStep("event-data", lambda: orphaned_event_data(client)),
    ]


def renudge_deferred(client: ZooKeeperClient, nudge: Callable[[str], object]) -> list[str]:
    """Nudge the hop of every connection whose deferred deliveries are due to be tried again."""
    found = [c for c in inventory.connections(client) if deliveries.deferred_due(client, c)]
    for name in found:
        nudge(name)
    return found


def live_items(client: ZooKeeperClient) -> Iterator[QueueItem]:
    """Every item in every pipeline's state, read one pipeline at a time."""
    store = PipelineStore(client)
    for tenant in inventory.tenants(client):
        for pipeline in inventory.pipelines(client, tenant):
            yield from store.state(
                tenant, pipeline, store.read(tenant, pipeline)
            ).items.peek_values()


def live_buildsets(client: ZooKeeperClient) -> set[str]:
    """The uuid of every buildset in every pipeline's state."""
    return {item.buildset.uuid for item in live_items(client)}


def referenced_merges(client: ZooKeeperClient) -> set[str]:
    """The merge requests an item in some pipeline still names.

    An item's buildset names the merge its builds were tested on (a batch's
    riders name their tail's), and each probe its own: an executor on
    another host makes that state again from the request
    (:mod:`workers.merger.replay`), and the item's push names it.
    """
    found: set[str] = set()
    for item in live_items(client):
        named = [item.buildset.merge_request, *(p.merge_request for p in item.probes)]
        found.update(uuid for uuid in named if uuid)
    return found


def wake_semaphore_waiters(client: ZooKeeperClient, nudge: Callable[[str, str], None]) -> list[str]:
    """Re-nudge the pipelines waiting for a semaphore that has a free slot.

    The pass that frees a slot nudges the waiters itself; this recovers a
    nudge lost with a purged broker or a worker killed after its commit.
    """
    woken: list[str] = []
    for path in inventory.semaphores(client):
        semaphore = SemaphoreNode(client, path)
        if not semaphore.has_free_slot():
            continue
        for tenant, pipeline in semaphore.waiters():
            nudge(tenant, pipeline)
            woken.append(f"{path}:{tenant}/{pipeline}")
    return woken


def release_leaked_semaphores(
    client: ZooKeeperClient, nudge: Callable[[str, str], None] | None = None
) -> list[str]:
    """Release semaphore holders whose buildset no longer exists anywhere.

    A holder is ``<buildset uuid>/<job>`` and is committed in the same
    transaction as its buildset's build, so reading the holders first and
    the pipelines afterwards can never mistake a fresh holder for a leak.
    The pipelines waiting for a semaphore that got a slot back are nudged.
    """
    released: list[str] = []
    live: set[str] | None = None

    def exists(holder: str) -> bool:
        nonlocal live
        if live is None:  # read after the holders, on the first question
            live = live_buildsets(client)
        return holder.split("/", 1)[0] in live

    for path in inventory.semaphores(client):
        semaphore = SemaphoreNode(client, path)
        freed = semaphore.cleanup(exists)
        released += [f"{path}:{h}" for h in freed]
        if freed and nudge is not None:
            for tenant, pipeline in semaphore.waiters():
                nudge(tenant, pipeline)
    return released
