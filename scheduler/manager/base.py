"""The pipeline manager: events in, state advanced, intents out.

A manager is pure: it changes a :class:`~scheduler.model.item.PipelineState`
in memory and records what must happen outside (merge and build requests,
cancels, reports) as :class:`~scheduler.manager.intents.Intents`. The
processing layer (:mod:`scheduler.processing`) commits the changed state and
the requests in one fenced ZooKeeper transaction, then sends the nudges and
runs the reporters. Nothing here does I/O, so every rule is unit-tested
directly.

Reporting is two-phase so no report is lost to a crash: an item that
finished gets its result and stays in the pipeline; the processor runs the
reporters (idempotent by uuid) after the commit, then calls
:meth:`PipelineManager.finish_reported` to remove it.

Gating pipelines that merge (``PipelineSettings.merge_on_success``) add a
phase before the report: a head item that passed is listed in
``Intents.merges_to_push`` (its ``push`` is ``PENDING``) on every pass until
the processing layer answers with :meth:`PipelineManager.merge_pushed` (the
tested merge, ``item.buildset.repo_state``, is on the target branch; the
next pass reports the item SUCCESS) or :meth:`PipelineManager.merge_failed`
(the item fails with the message; the next pass resets the items behind it
and reports it). A push must be idempotent: a branch that already points at
the tested commit is a success (a crash between the push and the commit of
its answer pushes again).

Fail-fast (``BuildSet.fail_fast``, frozen with the jobs from the project's
pipeline config) holds in every manager: the first voting job that fails
cancels the item's other builds and fails the item at once.

Subclasses (independent, dependent, serial, supercedent) change how items
are queued and which changes a merge stacks; the rest is shared.

What a manager is given (its :class:`PipelineSettings`, a layout provider,
a semaphore ledger) is in :mod:`scheduler.manager.settings`; the merge,
build and node events that answer its requests are applied by
:mod:`scheduler.manager.answers`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from scheduler.config.model import NOOP_JOB
from scheduler.manager import answers, batches, cycles, requirements, settling, verdicts
from scheduler.manager import events as ev
from scheduler.manager.intents import BuildIntent, CancelIntent, Intents, MergeIntent, NodeIntent
from scheduler.manager.settings import (
    FreezeResult,
    LayoutProvider,
    PipelineSettings,
    SemaphoreLedger,
    take_all,
)
from scheduler.model import reasons
from scheduler.model.build import Build, BuildState, JobState
from scheduler.model.change import Change
from scheduler.model.item import (
    BuildSet,
    ChangeQueue,
    MergeState,
    PipelineState,
    PushState,
    QueueItem,
)
from scheduler.model.reasons import LeaveReason
from scheduler.model.results import Result
from scheduler.model.tally import PassTally, queue_label
from scheduler.wire.events import Dequeue, Enqueue, Promote

log = logging.getLogger(__name__)

# job results that are not a failure (None: not ended yet)
PASSED = frozenset({None, Result.SUCCESS, Result.SKIPPED})

# Seconds before the first retry of a report that did not land, doubling to the max.
REPORT_RETRY_FIRST = 2.0
REPORT_RETRY_MAX = 60.0


def needed(change: Change) -> tuple[Change, ...]:
    """The changes ``change`` depends on, deepest first, without itself (a cycle)."""
    return tuple(n for n in change.needs if n.key != change.key)


def _pre_failed(job: JobState) -> bool:
    build = job.current
    return build is not None and build.pre_fail


def new_uuid() -> str:
    return uuid.uuid4().hex


class PipelineManager:
    """Behaviour shared by every manager; subclasses override the queueing rules."""

    kind = "base"

    def __init__(
        self,
        settings: PipelineSettings,
        layouts: LayoutProvider,
        semaphores: SemaphoreLedger,
        clock: Callable[[], float] = time.time,
        make_uuid: Callable[[], str] = new_uuid,
    ) -> None:
        self.settings = settings
        self.layouts = layouts
        self.semaphores = semaphores
        self.clock = clock
        self.make_uuid = make_uuid
        self.intents = Intents()
        # what changes that left the pipeline provided (set by the processing layer)
        self.records: requirements.Records = requirements.NO_RECORDS
        # what the pass counts for the metrics (committed with the pass's writes)
        self.tally = PassTally()

    # -- queueing rules (overridden by subclasses) ---------------------------

    def queue_for(self, state: PipelineState, change: Change) -> ChangeQueue:
        """The queue a new item of ``change`` joins."""
        raise NotImplementedError

    def changes_to_merge(self, state: PipelineState, item: QueueItem) -> tuple[Change, ...]:
        """The changes a merge for ``item`` stacks, in order (``item``'s last).

        A change's dependencies (``Depends-On``) are tested with it, first.
        """
        return (*needed(item.change), item.change)

    def ready_to_merge(self, state: PipelineState, item: QueueItem) -> bool:
        return item.active

    def can_start_builds(self, item: QueueItem) -> bool:
        """Whether new builds may start for ``item`` (running ones always finish)."""
        return True

    def supersedes(self, existing: QueueItem, change: Change) -> bool:
        """Whether a new commit ``change`` of ``existing``'s change dequeues it."""
        return self.settings.dequeue_on_new_patchset

    def place(self, state: PipelineState, queue: ChangeQueue, item: QueueItem) -> None:
        """Put a new item into its queue (at the end)."""
        queue.items.append(item.uuid)

    def freeze_jobs(
        self, state: PipelineState, item: QueueItem, outcome: ev.MergeOutcome
    ) -> FreezeResult:
        """The jobs of ``item`` under its merge (a batch's or a dependency cycle's: its
        members')."""
        return batches.freeze(self.layouts, state, item, outcome)

    def merge_shared(self, state: PipelineState, item: QueueItem, outcome: ev.MergeOutcome) -> None:
        """``item``'s merge is complete and its jobs frozen: what else it tested learns it."""
        batches.share_merge(state, item, outcome)

    # -- events ----------------------------------------------------------------

    def apply(self, state: PipelineState, event: ev.PipelineEvent) -> None:
        """Apply one event to ``state``; stale or duplicate events change nothing."""
        if verdicts.apply(self, state, event):
            return  # an answer to a run that judges a failure
        if isinstance(event, Enqueue):
            self.enqueue(state, event.change, event.event_id)
        elif isinstance(event, Dequeue) and event.current:
            self.dequeue_stale(state, event.change, event.current)
        elif isinstance(event, Dequeue):
            self.dequeue_change(state, event.change)
        elif isinstance(event, Promote):
            self.promote(state, event.changes)
        elif isinstance(event, ev.MergeCompleted):
            answers.merge_completed(self, state, event)
        elif isinstance(event, ev.BuildStarted | ev.BuildPaused):
            answers.build_progress(state, event)
        elif isinstance(event, ev.NodesAnswered):
            answers.nodes_answered(self, state, event)
        elif isinstance(event, ev.BuildPreFailed):
            answers.build_prefailed(state, event)
        else:
            answers.build_completed(self, state, event)

    def enqueue(self, state: PipelineState, change: Change, event_id: str = "") -> QueueItem:
        """Add ``change``; an identical live item is returned instead of a second one.

        A change in a dependency cycle is enqueued with the cycle's other
        changes as one unit where every queue of the cycle allows it, and
        refused with Zuul's message where one does not
        (:mod:`scheduler.manager.cycles`).
        """
        refused = cycles.refusal(self.settings, change) if change.in_cycle else ""
        if change.in_cycle and not refused:
            return cycles.enqueue(self, state, change, event_id)
        item = self.enqueue_one(state, change, event_id)
        if refused:
            self.set_result(item, Result.ERROR, refused, kind=reasons.DEPENDENCY_ERROR)
        return item

    def enqueue_one(self, state: PipelineState, change: Change, event_id: str = "") -> QueueItem:
        """Add one item of ``change`` (or return the identical live one)."""
        for existing in state.find(change):
            if existing.change.commit == change.commit:
                return existing
            if self.supersedes(existing, change):
                self.dequeue(
                    state,
                    existing,
                    "superseded by a newer commit",
                    report=True,
                    kind=reasons.SUPERSEDED,
                )
        queue = self.queue_for(state, change)
        item = QueueItem(
            uuid=self.make_uuid(),
            change=change,
            queue=queue.name,
            buildset=BuildSet(uuid=self.make_uuid()),
            enqueue_time=self.clock(),
            event_id=event_id,
        )
        state.items[item.uuid] = item
        self.place(state, queue, item)
        log.info("%s: enqueued %s as item %s", self.settings.name, change.key, item.uuid)
        return item

    def dequeue_change(self, state: PipelineState, change: Change) -> list[QueueItem]:
        items = state.find_for_dequeue(change)
        for item in items:
            self.dequeue(state, item, "dequeued by request", report=True, kind=reasons.OPERATOR)
        return items

    def dequeue_stale(self, state: PipelineState, change: Change, current: str) -> None:
        """The forge says ``change`` is now at ``current`` on ``change.branch``: older leave.

        An item of another target branch always leaves; one of another commit
        where ``dequeue-on-new-patchset`` holds (Zuul's removal of old
        versions of a change). A merged or merging item stays.
        """
        for item in state.find_for_dequeue(replace(change, branch="")):
            if item.push is not PushState.NONE:
                continue
            if item.change.branch != change.branch:
                why = f"its target branch changed from {item.change.branch} to {change.branch}"
            elif item.change.commit != current and self.settings.dequeue_on_new_patchset:
                why = f"superseded by a new patchset ({current[:12]})"
            else:
                continue
            self.dequeue(state, item, why, report=True, kind=reasons.SUPERSEDED)

    def promote(self, state: PipelineState, changes: Iterable[Change]) -> list[QueueItem]:
        """Move the live items of ``changes`` to the head of their queues, in that order.

        Only the order changes here; the next :meth:`advance` of a shared-queue
        manager resets every item whose items ahead are no longer the same.
        """
        promoted: list[QueueItem] = []
        for change in changes:
            for found in state.find_for_dequeue(change):
                # a change of a dependency cycle takes its whole cycle along, in its order
                group = [state.items[m.uuid] for m in cycles.members(state, found)]
                promoted.extend(m for m in group if m.uuid not in {p.uuid for p in promoted})
        for name in dict.fromkeys(item.queue for item in promoted):
            queue = state.queues[name]
            # a head item whose merge is being pushed stays in front of everything,
            # with the rest of its dependency cycle
            items = state.peek_of(queue)
            held = {i.cycle or i.uuid for i in items if i.push is not PushState.NONE}
            pushing = [i.uuid for i in items if (i.cycle or i.uuid) in held]
            named = [i.uuid for i in promoted if i.queue == name and i.uuid not in pushing]
            first = pushing + named
            queue.items = first + [uuid for uuid in queue.items if uuid not in first]
        return promoted

    def dequeue(
        self,
        state: PipelineState,
        item: QueueItem,
        why: str,
        report: bool,
        kind: str = reasons.DEQUEUED,
    ) -> None:
        """Take ``item`` out, and the other changes of its dependency cycle with it."""
        if not item.cycle or item.dequeued:
            self.dequeue_one(state, item, why, report, kind)
            return
        for member in cycles.dequeue_all(state, item, why, kind):
            if member.uuid == item.uuid:
                self.dequeue_one(state, member, why, report, kind)
            elif not member.dequeued:
                assert member.reason is not None
                self.dequeue_one(state, member, member.message, report, member.reason.kind)

    def dequeue_one(
        self,
        state: PipelineState,
        item: QueueItem,
        why: str,
        report: bool,
        kind: str = reasons.DEQUEUED,
    ) -> None:
        """Take ``item`` out: abort its builds, free its semaphores, report DEQUEUED.

        ``kind`` (:mod:`scheduler.model.reasons`) and ``why`` are the item's
        reason, unless it already failed with one.
        """
        self.abort_builds(item)
        item.dequeued = True
        self.note_reason(item, kind, why)
        if item.result is None:
            item.result = Result.DEQUEUED
            item.message = why
        if not report:
            item.reported = True

    def abort_builds(self, item: QueueItem) -> None:
        verdicts.abort(self, item)
        for job in item.buildset.graph:
            self.abort_job(item, job)
            if job.result is None:
                job.skipped = Result.SKIPPED

    def abort_job(self, item: QueueItem, job: JobState) -> None:
        """Cancel the job's build if it has not ended (ABORTED) and free its semaphores."""
        build = job.current
        if build is not None and not build.done:
            if build.node_request:
                # unanswered, or answered but not yet accepted by an executor
                self.intents.node_deletes.append(build.node_request)
            if not build.waiting_for_nodes:
                self.intents.cancels.append(CancelIntent(build.uuid, job.info.zone))
            build.state = BuildState.COMPLETED
            build.result = Result.ABORTED
            build.end_time = self.clock()
        self.release_semaphores(item, job)

    # -- advancing ---------------------------------------------------------------

    def advance(self, state: PipelineState) -> None:
        """Move every item as far as it can go now (settled ones are as far: skipped)."""

        def step(item: QueueItem) -> None:
            self.advance_item(state, item)
            self._finish(item)

        checking = settling.verifying()
        order = [item_uuid for queue in list(state.queues.values()) for item_uuid in queue.items]
        for item_uuid in order:
            seen = state.items.peek(item_uuid)
            if seen is None:
                continue
            if seen.dequeued and seen.reported:
                self.leave(state, seen)  # leaves without a report (e.g. no jobs to run)
            elif seen.dequeued:
                self._finish(seen)
            elif seen.result is None and settling.mark(state, item_uuid) is not None:
                if checking:
                    settling.verify(self, state, seen, step)
            else:
                settling.advance(self, state, item_uuid, step)

    def advance_item(self, state: PipelineState, item: QueueItem) -> None:
        """Merge, freeze and run ``item`` as far as it goes; set its result when done."""
        buildset = item.buildset
        if buildset.merge_state is MergeState.NEW:
            if item.result is None and self.ready_to_merge(state, item):
                self._request_merge(state, item)
            return
        if buildset.merge_state is MergeState.PENDING:
            return
        if buildset.merge_error is not None:
            self.set_result(
                item, Result.MERGE_CONFLICT, buildset.merge_error, kind=reasons.MERGE_CONFLICT
            )
        elif buildset.config_errors:
            message = "\n".join(buildset.config_errors)
            self.set_result(item, Result.CONFIG_ERROR, message, kind=reasons.CONFIG_ERROR)
        else:
            self._run_jobs(state, item)

    def _request_merge(self, state: PipelineState, item: QueueItem) -> None:
        request = self.make_uuid()
        item.buildset.merge_state = MergeState.PENDING
        item.buildset.merge_request = request
        changes = self.changes_to_merge(state, item)
        required = tuple(item.buildset.required)
        self.intents.merges.append(
            MergeIntent(item.uuid, item.buildset.uuid, request, changes, required)
        )

    def _run_jobs(self, state: PipelineState, item: QueueItem) -> None:
        if self._fail_fast(item):
            return
        graph = item.buildset.graph
        start = self.can_start_builds(item)
        for job in graph:
            if job.result is not None or job.running:
                continue
            if job.current is None and graph.blocked_by_failure(job):
                job.skipped = Result.SKIPPED
            elif start and (job.needs_retry or (job.current is None and graph.ready(job))):
                found = requirements.resolve(state, item, job, self.records)
                if found.failure:
                    requirements.fail(job, self.make_uuid(), found.failure, self.clock())
                elif found.ready:
                    self._start_build(item, job, found.artifacts)
        for job in graph.to_resume():
            assert job.current is not None
            job.current.resume_requested = True
            self.intents.resumes.append(CancelIntent(job.current.uuid, job.info.zone))
        if graph.complete and item.result is None:
            self.item_completed(item)

    def _fail_fast(self, item: QueueItem) -> bool:
        """Zuul's fail-fast: a voting failure cancels the rest and fails the item now."""
        if not item.buildset.fail_fast or item.result is not None:
            return False
        # a running build that pre-failed (failure-output) counts, as in Zuul
        running = [j.name for j in item.buildset.graph if j.info.voting and _pre_failed(j)]
        failed = sorted({*self.voting_failures(item), *running})
        if not failed:
            return False
        message = "failed: " + ", ".join(failed) + " (fail-fast: remaining builds cancelled)"
        self.set_result(item, Result.FAILURE, message, kind=reasons.FAILED, jobs=failed)
        self.abort_builds(item)
        return True

    @staticmethod
    def failing(item: QueueItem) -> bool:
        """The item will not merge as tested (Zuul's failing reasons).

        A voting job's build that pre-failed (its output matched the job's
        failure-output) counts before it ends: the walk moves the items
        behind at once, as Zuul does.
        """
        if item.result is not None:
            return item.result is not Result.SUCCESS
        return any(
            job.info.voting and (job.result not in PASSED or _pre_failed(job))
            for job in (item.buildset.jobs or {}).values()
        )

    def voting_failures(self, item: QueueItem) -> list[str]:
        """Names of the voting jobs that ended without success (sorted)."""
        return sorted(
            job.name for job in item.buildset.graph if job.info.voting and job.result not in PASSED
        )

    def _start_build(
        self, item: QueueItem, job: JobState, artifacts: tuple[dict[str, Any], ...] = ()
    ) -> None:
        holder = self._semaphore_holder(item, job)
        job.waiting_for_semaphore = take_all(self.semaphores, job.info.semaphores, holder)
        if job.waiting_for_semaphore is not None:
            return
        build = Build(uuid=self.make_uuid(), job=job.name, attempt=job.next_attempt)
        job.builds.append(build)
        if job.name == NOOP_JOB:
            # Zuul's built-in noop: no executor, no node; it succeeds at once.
            build.state = BuildState.COMPLETED
            build.result = Result.SUCCESS
            build.start_time = build.end_time = self.clock()
            return
        wanted = self.settings.nodes_for(job.info, 0)
        if wanted:
            # nodes first: the build request follows the node request's fulfilment
            self.intents.node_requests.append(
                NodeIntent(item.uuid, item.buildset.uuid, build, job.name, wanted)
            )
            return
        parent_data = item.buildset.graph.parent_data(job)
        self.intents.builds.append(
            BuildIntent(item.uuid, item.buildset.uuid, build, job.info, parent_data, artifacts)
        )

    def _semaphore_holder(self, item: QueueItem, job: JobState) -> str:
        return f"{item.buildset.uuid}/{job.name}"

    def release_semaphores(self, item: QueueItem, job: JobState) -> None:
        holder = self._semaphore_holder(item, job)
        for name in job.info.semaphores:
            self.semaphores.release(name, holder)

    def item_completed(self, item: QueueItem) -> None:
        """Every job has a result: decide the item's."""
        failed = self.voting_failures(item)
        if failed:
            message = "failed: " + ", ".join(failed)
            self.set_result(item, Result.FAILURE, message, kind=reasons.FAILED, jobs=failed)
        else:
            self.set_result(item, Result.SUCCESS, "")

    def set_result(
        self,
        item: QueueItem,
        result: Result,
        message: str,
        kind: str = reasons.FAILED,
        jobs: Iterable[str] = (),
    ) -> None:
        """The item's result; one that is not SUCCESS records its reason (``kind``)."""
        if item.result is None:
            item.result = result
            item.message = message
            item.buildset.result = result
            item.buildset.message = message
            if result is not Result.SUCCESS:
                self.note_reason(item, kind, message, jobs)

    @staticmethod
    def note_reason(item: QueueItem, kind: str, message: str, jobs: Iterable[str] = ()) -> None:
        """Record why ``item`` fails or leaves; the first reason holds until a reset."""
        if item.reason is None:
            item.reason = LeaveReason(kind, message, tuple(jobs))

    def finish(self, item: QueueItem) -> None:
        """Report ``item`` once it has a result (a cycle reports its members together)."""
        self._finish(item)

    def _finish(self, item: QueueItem) -> None:
        if item.result is None or item.reported or item.uuid in self.intents.reports:
            return
        if item.report_retry_at is not None and self.clock() < item.report_retry_at:
            return  # its last report did not land: wait for the back-off
        self.intents.reports.append(item.uuid)

    def report_failed(self, state: PipelineState, item_uuid: str, error: str) -> None:
        """A report of the item did not land (its database is down): it stays, retried later.

        A gate's head that cannot report blocks the items behind it, as in
        Zuul: their reports must follow it.
        """
        item = state.items.get(item_uuid)
        if item is None:
            return
        item.report_failures += 1
        item.report_error = error
        delay = min(REPORT_RETRY_MAX, REPORT_RETRY_FIRST * 2 ** (item.report_failures - 1))
        item.report_retry_at = self.clock() + delay

    # -- the merge push (gating pipelines that merge) ---------------------------

    def merge_pushed(self, state: PipelineState, item_uuid: str) -> None:
        """The processing layer pushed the item's tested merge: report it next pass."""
        item = state.items.get(item_uuid)
        if item is not None and item.push is PushState.PENDING:
            item.push = PushState.PUSHED

    def merge_failed(self, state: PipelineState, item_uuid: str, message: str) -> None:
        """The push was refused (e.g. the branch moved): the item fails with ``message``.

        The next pass resets the items tested on top of it and reports it.
        """
        item = state.items.get(item_uuid)
        if item is None or item.push is not PushState.PENDING:
            return
        item.push = PushState.FAILED
        item.result = Result.FAILURE
        item.message = f"merge failed: {message}"
        item.reason = LeaveReason(reasons.PUSH_FAILED, item.message)
        item.buildset.result = item.result
        item.buildset.message = item.message

    def finish_reported(self, state: PipelineState, item_uuids: Iterable[str]) -> None:
        """Reporters ran for these items: they leave the pipeline."""
        for item_uuid in item_uuids:
            item = state.items.get(item_uuid)
            if item is not None:
                if item.report_failures:
                    log.info(
                        "%s: item %s reported after %d failed attempts",
                        self.settings.name,
                        item.uuid,
                        item.report_failures,
                    )
                item.reported = True
                item.dequeued = True
                self.leave(state, item)

    def leave(self, state: PipelineState, item: QueueItem) -> None:
        """``item`` leaves the pipeline: counted (its reason, its time in queue), removed."""
        kind = None
        if item.result not in (None, Result.SUCCESS, Result.SKIPPED):
            kind = item.reason.kind if item.reason else reasons.DEQUEUED
        label = queue_label(item.queue, item.change.project)
        self.tally.left(label, kind, self.clock() - item.enqueue_time)
        state.remove(item)
