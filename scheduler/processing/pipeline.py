"""Processing one pipeline: its events in, its items advanced, one commit per pass.

:func:`process_pipeline` is what the ``process pipeline`` task calls. Under
the pipeline lock (coalesced, :mod:`scheduler.processing.coalesce`) each
pass

1. **read**s the pipeline state (validated cache, :mod:`scheduler.state.store`);
2. **appl**ies the management, trigger and result events, in that order, and
   advances every item (:mod:`scheduler.manager`);
3. **decide**s what it commits besides the state (acks, requests, semaphores,
   management outcomes, reconfiguration requests);
4. **commit**s, in ONE transaction fenced by the pipeline lock: the changed state
   documents, the acks of the consumed events, the new merge and build
   requests and the semaphore updates. Either all of it happens or none,
   so an event is applied exactly once (docs/architecture.md invariants 3 and 4);
5. after the commit, **nudge**s the new requests' tasks, asks for cancels and
   wakes the waiters of freed semaphores;
6. **report**s finished items and then removes them in a second commit (a
   crash in between repeats the idempotent reports, never loses one).

Request events name a request and its buildset; a completed request's
result is read from its queue when the event is decoded
(:mod:`scheduler.processing.decoding`), so the event stays small.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler import reconfiguration, scope, testhooks
from scheduler.manager import actions, settling
from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.model.change import Change
from scheduler.model.item import PipelineState
from scheduler.model.results import Result
from scheduler.nudge import task_labels, task_names
from scheduler.processing import quiet
from scheduler.processing.coalesce import run_exclusive
from scheduler.processing.decoding import EventDecoder, PushOutcome, push_request_uuid
from scheduler.processing.environment import Environment, NewRequest
from scheduler.state import codec
from scheduler.state.store import PipelineStore
from scheduler.stores import pipeline_stats, provided, timings
from scheduler.stores.event_state import decode_event_state
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.ledger import TxnLedger
from scheduler.stores.node_records import PipelineRequestor
from scheduler.stores.nodes import NodeStore
from scheduler.wire.events import Dequeue, Enqueue, Promote
from scheduler.zk import flags, locks, multiread, paths, paths_nodepool, stored
from scheduler.zk.context import OpFailedError, Transaction
from scheduler.zk.doctree import DocTree
from scheduler.zk.event_queue import Event, EventQueue

log = logging.getLogger(__name__)

# The broker queue of the launchers (sluice.launcher.serve).
LAUNCHER_QUEUE = "launcher"
# Events consumed per queue and pass: bounds the size of one transaction.
EVENTS_PER_PASS = 100
# Request queues by (client, root): each creates its directories once per process.
_QUEUES: dict[tuple[int, str], JobRequestQueue] = {}


def event_queues(env: Environment, tenant: str, pipeline: str) -> list[EventQueue]:
    """The pipeline's queues in processing order: management, trigger, result.

    A pass leaves the result queue alone while its tenant's result queue is
    paused (``manage-events pause-result``: :mod:`scheduler.stores.event_state`).
    """
    return [
        EventQueue(env.client, paths.pipeline_management_queue(tenant, pipeline)),
        EventQueue(env.client, paths.pipeline_trigger_queue(tenant, pipeline)),
        EventQueue(env.client, paths.pipeline_result_queue(tenant, pipeline)),
    ]


def process_pipeline(env: Environment, tenant: str, pipeline: str) -> bool:
    """Process ``pipeline`` until quiet; False if another worker is processing it."""

    def renudge() -> None:
        env.nudge(task_names.PROCESS_PIPELINE, (tenant, pipeline), None)

    return run_exclusive(
        env.client,
        paths.pipeline_lock(tenant, pipeline),
        paths.pipeline_dirty(tenant, pipeline),
        lambda held: PipelinePass(env, tenant, pipeline, held).run(),
        renudge,
    )


@dataclass(frozen=True)
class PassLook:
    """What a pass sees first (one request): its queues' listings and its state's stat."""

    queues: list[tuple[EventQueue, list[str]]]
    # the pipeline document's stat under the lock (None: no state yet)
    state_stat: multiread.Stat | None


@dataclass
class PipelinePass:
    env: Environment
    tenant: str
    pipeline: str
    held: locks.HeldLock
    consumed: list[tuple[EventQueue, Event]] = field(default_factory=list)
    requests: list[NewRequest] = field(default_factory=list)
    more_events: bool = False
    # outcomes of management events, by result id (read by `sluice enqueue`)
    outcomes: dict[str, dict[str, object]] = field(default_factory=dict)
    # changes merged by this pass that edit configuration: the tenant reconfigures
    config_merged: list[str] = field(default_factory=list)
    # node requests this pass submits (a launcher is nudged after the commit)
    node_requests: list[str] = field(default_factory=list)
    # the state was at rest (scheduler.processing.quiet): the pass runs only to verify
    skippable: bool = False
    # items this pass enqueued (their ``enqueue`` report follows the commit)
    enqueued: list[str] = field(default_factory=list)
    # the result events into the manager's; it keeps the node requests of stale or
    # failed answers, deleted after the commit with the manager's (cancelled builds)
    decoder: EventDecoder = field(init=False)

    def __post_init__(self) -> None:
        self.decoder = EventDecoder(self.env, self.pipeline)

    def run(self) -> bool:
        """One pass in named steps; True if another pass may find something.

        The tenant's layout is validated once for the whole pass (its commit
        is fenced by the layout state's version: :mod:`scheduler.scope`).
        """
        with scope.validation_scope():
            return self._run()

    def _run(self) -> bool:
        store = PipelineStore(self.env.client)
        look = self.look()
        events = self.read_events(look)
        manager, ledger = self.env.managers.open(self.env.client, self.tenant, self.pipeline)
        manager.records = provided.ProvidedRecords(self.env.client, self.tenant, self.pipeline)
        if self.quiet(events, ledger, look):
            return False  # no event, and the state is as this process left it at rest
        quiet.forget(self.env.client, self.tenant, self.pipeline)  # until this pass ends
        tree, state = self.read(store, look)
        manager.settings = actions.settings_for(manager.settings, state)
        # items settled under the manager's layout are not advanced again
        state.fence = ledger.layout_fence or settling.FIXED_LAYOUT
        waking = _waking(state)
        self.apply(manager, state, events)
        txn = self.decide(manager, state, ledger)
        if self.skippable and txn is not None:
            raise AssertionError(f"{self.tenant}/{self.pipeline}: a pass at rest decided")
        if txn is None:
            # nothing new (a push may be pending: its result will wake us)
            store.keep_settled(state)
            self.rest(tree, ledger, state)
            self.wake(waking, state)
            return False
        try:
            tree = self.commit(store, tree, state, txn)
        except OpFailedError as exc:
            if not (ledger.guards(exc.path) or paths_nodepool.is_node_request(exc.path)):
                raise
            # A reconfiguration replaced the layout, or another pipeline took or
            # freed a semaphore slot, or another requestor took the id of a node
            # request, during this pass: nothing was committed; decide again with
            # what ZooKeeper holds now.
            log.info(
                "%s/%s: %s changed during the pass; deciding again",
                self.tenant,
                self.pipeline,
                exc.path,
            )
            return True
        self.nudge(manager, ledger)
        self.wake(waking, state)
        self.announce(manager, state)
        landed = self.report(manager, store, tree, state)
        self.measure()
        # Another pass only if it can find something: items left the queue
        # (those behind may move up), or a queue had more events than one
        # pass takes. New events raise the dirty flag, which the loop checks.
        more = bool(landed) or self.more_events
        if not more and not manager.intents.reports:  # (a report writes the state again)
            self.rest(tree, ledger, state)
        return more

    # -- the steps ---------------------------------------------------------------

    def look(self) -> PassLook:
        """The queues' listings and the layout state's stat in one request, the state's stat.

        The pipeline document's stat is asked with ``exists`` (sent first, so
        both are in flight at once), not read in the ``multiRead``: reading
        it would fetch the document, whose item list grows with the depth.
        The layout state's mzxid is seeded into the pass's validation scope
        (the manager's layout is validated with it, :mod:`scheduler.scope`).
        """
        client = self.env.client
        state = client.kazoo.exists_async(codec.root_path(self.tenant, self.pipeline))
        queues = event_queues(self.env, self.tenant, self.pipeline)
        reads: list[multiread.Read] = [multiread.Children(q.queue_path) for q in queues]
        reads.append(multiread.Data(paths.layout_state(self.tenant)))
        reads.append(multiread.Data(paths.tenant_event_state(self.tenant)))
        *listings, layout, events = multiread.read_many(client, reads)
        layout_mzxid = None if layout is None else int(layout[1].mzxid)
        scope.seed(scope.layout_mzxid_key(self.tenant), layout_mzxid)
        if events is not None and decode_event_state(events[0]).result_queue_paused:
            listings[-1] = []  # manage-events paused results: they stay queued
        return PassLook(
            [(q, names or []) for q, names in zip(queues, listings, strict=True)],
            client.wait(state),
        )

    def read_events(self, look: PassLook) -> list[tuple[EventQueue, list[Event]]]:
        """The queued events, management first (at most ``EVENTS_PER_PASS`` a queue)."""
        found = []
        for queue, names in look.queues:
            events = queue.read(limit=EVENTS_PER_PASS, names=names) if names else []
            self.more_events |= len(events) >= EVENTS_PER_PASS
            found.append((queue, events))
        return found

    def quiet(
        self, events: list[tuple[EventQueue, list[Event]]], ledger: TxnLedger, look: PassLook
    ) -> bool:
        """No event, and the state is as a pass of this process left it at rest."""
        if any(batch for _, batch in events):
            return False
        if not quiet.holds(
            self.env.client, self.tenant, self.pipeline, ledger.layout_fence, look.state_stat
        ):
            return False
        self.skippable = True
        return not quiet.verifying()  # tests run it in full: it must decide nothing

    def rest(self, tree: DocTree, ledger: TxnLedger, state: PipelineState) -> None:
        """The pass ended with nothing more to do: mark the state at rest (if it is)."""
        mark = quiet.QuietMark(tree.root_version, tree.root_zxid, ledger.layout_fence)
        quiet.remember(self.env.client, self.tenant, self.pipeline, mark, state)

    def read(self, store: PipelineStore, look: PassLook) -> tuple[DocTree, PipelineState]:
        """The pipeline's state (the validated cache or ZooKeeper)."""
        tree = store.read(self.tenant, self.pipeline, locked=True, root_stat=look.state_stat)
        return tree, store.state(self.tenant, self.pipeline, tree)

    def apply(
        self,
        manager: PipelineManager,
        state: PipelineState,
        events: list[tuple[EventQueue, list[Event]]],
    ) -> None:
        """Apply the queued events, then advance every item (the manager decides)."""
        before = set(_listed(state))
        self._apply_events(manager, state, events)
        manager.advance(state)
        self.enqueued = [item_uuid for item_uuid in _listed(state) if item_uuid not in before]

    def decide(
        self, manager: PipelineManager, state: PipelineState, ledger: TxnLedger
    ) -> Transaction | None:
        """Everything the pass commits besides the state; None if it decided nothing."""
        intents = manager.intents
        txn = Transaction(self.env.client)
        self._request_ops(manager, state, txn)
        if not (
            self.consumed
            or self.requests
            or self.node_requests
            or intents.cancels
            or intents.resumes
            or intents.reports
            or intents.node_deletes
            or manager.tally
        ):
            return None
        for queue, event in self.consumed:
            queue.ack_ops(event, txn)
        ledger.add_ops(txn)
        # what the pass counted, committed with what it counted (never twice)
        pipeline_stats.add_ops(
            self.env.client, self.tenant, self.pipeline, manager.tally.take(), txn
        )
        for result_id, outcome in self.outcomes.items():
            path = paths.management_result(result_id)
            self.env.client.ensure_path(paths.parent(path))
            txn.create(path, stored.encode(outcome))
        if self.config_merged:
            why = "merged config change " + ", ".join(self.config_merged)
            reconfiguration.request_ops(self.env.client, self.tenant, why, txn)
        return txn

    def commit(
        self, store: PipelineStore, tree: DocTree, state: PipelineState, txn: Transaction
    ) -> DocTree:
        """The changed state and ``txn`` in ONE transaction fenced by the pipeline lock."""
        testhooks.hold_before_commit()
        return store.write(self.held.context, tree, state, extra=txn)

    def nudge(self, manager: PipelineManager, ledger: TxnLedger) -> None:
        """After the commit: the new requests' tasks, cancels, and waiters of freed slots."""
        self._after_commit(manager)
        for tenant, pipeline in ledger.to_wake():  # a slot freed: waiters elsewhere retry
            self.env.nudge(task_names.PROCESS_PIPELINE, (tenant, pipeline), None)

    def wake(self, before: dict[str, float], state: PipelineState) -> None:
        """A batch waits for more changes: the pipeline is nudged when it may start.

        A delayed nudge comes at the time; the retry flag makes the sweep
        nudge the pipeline until then too, so a lost one delays the batch by
        one sweep interval at most. The flag comes down when nothing waits.
        """
        after = _waking(state)
        if after == before:
            return
        flag = paths.pipeline_report_retry(self.tenant, self.pipeline)
        if not after:
            if not any(i.report_failures for i in state.items.peek_values()):
                flags.lower_flag(self.env.client, flag)
            return
        flags.raise_flag(self.env.client, flag)
        if self.env.nudge_later is not None:
            delay = max(0.0, min(after.values()) - time.time())
            self.env.nudge_later(self.tenant, self.pipeline, delay + 0.05)

    def announce(self, manager: PipelineManager, state: PipelineState) -> None:
        """Items enqueued in this pass (``enqueue:``), then those whose first merge was
        requested in it (``start:``); nothing while the pipeline is disabled."""
        if not actions.announces(state):
            return
        for item_uuid in self.enqueued:
            item = state.items.peek(item_uuid)
            if item is not None and not item.dequeued:
                self.env.announce(self.tenant, self.pipeline, item, "enqueue")
        for merge in manager.intents.merges:
            item = state.items.get(merge.item)
            if item is not None and item.buildset.jobs is None:
                self.env.announce(self.tenant, self.pipeline, item, "start")

    def report(
        self, manager: PipelineManager, store: PipelineStore, tree: DocTree, state: PipelineState
    ) -> list[str]:
        """Report finished items, then remove those whose reports landed (a second commit)."""
        reports = manager.intents.reports
        if not reports:
            return []
        landed = self._report(manager, state, reports)
        counted = Transaction(self.env.client)  # the items that left, and the resets it made
        self._record_provided(state, landed, counted)
        manager.finish_reported(state, landed)
        pipeline_stats.add_ops(
            self.env.client, self.tenant, self.pipeline, manager.tally.take(), counted
        )
        store.write(self.held.context, tree, state, extra=counted)
        return landed

    def _record_provided(self, state: PipelineState, landed: list[str], txn: Transaction) -> None:
        """What the providing jobs of the items leaving left, for Depends-On changes later."""
        now = time.time()
        for item_uuid in landed:
            item = state.items.peek(item_uuid)
            record = provided.record_of(item, now) if item is not None else None
            if record is not None:
                provided.set_ops(self.env.client, self.tenant, self.pipeline, record, txn)

    def measure(self) -> None:
        """How long the events this pass applied waited (for the metrics)."""
        now = time.time()
        waited = [now - event.created for _, event in self.consumed if event.created]
        timings.buffered(self.env.client).add(timings.EVENT_PROCESSING, waited)

    # -- events ---------------------------------------------------------------

    def _apply_events(
        self,
        manager: PipelineManager,
        state: PipelineState,
        events: list[tuple[EventQueue, list[Event]]],
    ) -> None:
        for queue, batch in events:
            for event in batch:
                self.consumed.append((queue, event))
                decoded = self.decoder.decode(state, event)
                if isinstance(decoded, PushOutcome):
                    if decoded.pushed:
                        manager.merge_pushed(state, decoded.item)
                        self._note_config_merge(state, decoded.item)
                    else:
                        manager.merge_failed(state, decoded.item, decoded.message)
                elif decoded is not None:
                    affected = _named_items(state, decoded)
                    manager.apply(state, decoded)
                    self._record_outcome(state, decoded, affected)

    def _note_config_merge(self, state: PipelineState, item_uuid: str) -> None:
        """Zuul reconfigures the tenant when a change that edits config merges."""
        item = state.items.get(item_uuid)
        if item is not None and reconfiguration.touches_config(item.buildset.files):
            self.config_merged.append(item.change.key)

    def _record_outcome(
        self, state: PipelineState, event: ev.PipelineEvent, affected: list[str]
    ) -> None:
        """The answer to a management event, for whoever waits on its result id."""
        if not isinstance(event, Enqueue | Dequeue | Promote) or not event.result_id:
            return
        outcome: dict[str, object]
        if isinstance(event, Enqueue):
            live = [i for i in state.find(event.change) if i.change.commit == event.change.commit]
            outcome = {"item": live[0].uuid} if live else {"error": "the change was not enqueued"}
        elif not affected:
            outcome = {"error": "no such item in the pipeline", "reason": "not-found"}
        else:
            key = "dequeued" if isinstance(event, Dequeue) else "promoted"
            outcome = {key: affected}
        self.outcomes[event.result_id] = outcome

    # -- requests and reports -----------------------------------------------

    def _request_ops(
        self, manager: PipelineManager, state: PipelineState, txn: Transaction
    ) -> None:
        for merge in manager.intents.merges:
            self.requests.append(
                self.env.formats.merge(self.tenant, self.pipeline, state.items[merge.item], merge)
            )
        for build in manager.intents.builds:
            self.requests.append(
                self.env.formats.build(self.tenant, self.pipeline, state.items[build.item], build)
            )
        merger = self._queue(paths.merger_queue())
        for item_uuid in manager.intents.merges_to_push:
            item = state.items[item_uuid]
            request_uuid = push_request_uuid(item)
            if merger.get(request_uuid) is None:  # pushed once per buildset, not per pass
                action = "disabled" if state.disabled else "success"
                self.requests.append(
                    self.env.formats.push(self.tenant, self.pipeline, item, request_uuid, action)
                )
        for new in self.requests:
            self._queue(new.queue_root).submit_ops(new.request, new.params, txn)
        self._node_request_ops(manager, txn)
        for resume in manager.intents.resumes:
            self._queue(paths.executor_queue(resume.zone or None)).resume_ops(resume.build, txn)

    def _node_request_ops(self, manager: PipelineManager, txn: Transaction) -> None:
        """Node requests of the builds that need nodes, in the pass's transaction.

        The build records the request's id in the same commit, so a pass
        that fails to commit leaves neither (docs/architecture.md invariant 4).
        """
        store = NodeStore(self.env.client)
        for intent in manager.intents.node_requests:
            if intent.build.done:
                continue  # aborted later in the same pass
            notify = PipelineRequestor(self.tenant, self.pipeline, intent.buildset, intent.job)
            request_id = store.submit_ops(
                txn,
                [label for _, label in intent.nodes],
                f"{self.tenant}/{self.pipeline}/{intent.buildset}/{intent.job}",
                manager.settings.node_priority,
                notify=notify,
            )
            intent.build.node_request = request_id
            self.node_requests.append(request_id)

    def _queue(self, root: str) -> JobRequestQueue:
        key = (id(self.env.client), root)
        queue = _QUEUES.get(key)
        if queue is None or queue.client is not self.env.client:
            queue = _QUEUES[key] = JobRequestQueue(self.env.client, root)
        return queue

    def _after_commit(self, manager: PipelineManager) -> None:
        for queue, event in self.consumed:
            queue.discard_data(event)
        if self.config_merged:
            self.env.nudge(task_names.RECONFIGURE, (self.tenant,), None)
        for new in self.requests:
            label = task_labels.request_label(new.request)
            if new.queue_root == paths.merger_queue():
                self.env.nudge(task_names.MERGE, (new.request.uuid,), None, label=label)
            else:
                zone = new.request.info.get("zone") or None
                route = task_names.executor_queue_name(zone) if zone else None
                self.env.nudge(task_names.BUILD, (new.request.uuid, zone), route, label=label)
        for cancel in manager.intents.cancels:
            root = paths.executor_queue(cancel.zone or None)
            self._queue(root).request_cancel(cancel.build)
        for request_id in self.node_requests:
            self.env.nudge(task_names.LAUNCH, (request_id,), LAUNCHER_QUEUE)
        store = NodeStore(self.env.client)
        for request_id in [*manager.intents.node_deletes, *self.decoder.node_deletes]:
            store.delete_request(request_id)  # its nodes, if any, are recovered as used

    def _report(
        self, manager: PipelineManager, state: PipelineState, item_uuids: Iterable[str]
    ) -> list[str]:
        """Report the items; the uuids of those whose reports landed.

        An item whose report did not land (the database is down) stays, with
        a back-off (``PipelineManager.report_failed``); the pipeline's
        ``report-retry`` flag makes the sweep nudge it until it lands. The
        flag is raised before the state that needs it is written.
        """
        landed: list[str] = []
        failed = False
        for item_uuid in item_uuids:
            item = state.items.get(item_uuid)
            if item is None:
                continue
            error = ""
            if item.result is not Result.SKIPPED:
                action = actions.final_action(state, item, manager.settings.reporter_actions)
                error = self.env.report(self.tenant, self.pipeline, item, action)
            if error:
                failed = True
                manager.report_failed(state, item_uuid, error)
            else:
                landed.append(item_uuid)
                actions.counted(state, item, manager.settings.disable_after)
        retry_flag = paths.pipeline_report_retry(self.tenant, self.pipeline)
        if failed:
            flags.raise_flag(self.env.client, retry_flag)
            return landed
        items = state.items
        waiting = any(i.report_failures for i in items.peek_values() if i.uuid not in landed)
        waiting = waiting or bool(_waking(state))
        recovered = any(item.report_failures for u in landed if (item := items.peek(u)))
        if recovered and not waiting:
            flags.lower_flag(self.env.client, retry_flag)
        return landed


def _listed(state: PipelineState) -> list[str]:
    """The items of every queue, in order (only an enqueue adds one)."""
    return [item_uuid for queue in state.queues.values() for item_uuid in queue.items]


def _waking(state: PipelineState) -> dict[str, float]:
    """When each queue's waiting batch may start (scheduler.manager.batches)."""
    return {q.name: q.wake_at for q in state.queues.values() if q.wake_at is not None}


def _named_items(state: PipelineState, event: ev.PipelineEvent) -> list[str]:
    """The live items a dequeue or promote names (before it is applied)."""
    if isinstance(event, Dequeue):
        changes: tuple[Change, ...] = (event.change,)
    elif isinstance(event, Promote):
        changes = event.changes
    else:
        return []
    found: list[str] = []
    for change in changes:
        found += [i.uuid for i in state.find_for_dequeue(change) if i.uuid not in found]
    return found
