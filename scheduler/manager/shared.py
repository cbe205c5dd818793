"""Shared change queues: the rules the dependent, serial and supercedent managers share.

Items of a queue are processed in queue order by :meth:`SharedQueueManager.advance`
(Zuul's *nearest non-failing item* walk):

* An item is **active** while its position (items awaiting a DEQUEUED
  report not counted) is inside the queue's window; only active items merge
  and start builds. Running builds of an item that fell out of the window
  finish.
* A **speculative** manager (dependent) tests each item on top of the
  nearest non-failing item ahead of it (``QueueItem.ahead``); its merge
  stacks the changes of that whole chain (:meth:`changes_to_merge`). When
  the item an item was tested on is no longer the nearest non-failing one
  (it failed), the item is moved onto the nearest non-failing item and
  reset with its subtree (:mod:`scheduler.manager.reset`). A failing item
  keeps its place and its results; it is retested only if it is moved
  (an item ahead of it failed too).
* An item with nothing ahead of it is at the **head**: once it has a result
  it is reported (and, for SUCCESS in a pipeline that merges, pushed first:
  ``Intents.merges_to_push``) and then removed by ``finish_reported``, which
  moves the items behind it onto what it was on (without a reset when it
  merged) and grows or shrinks the window.
* A **dequeue** (by hand, a new patchset, no jobs) moves the items behind
  the dequeued item onto what it was on and resets them.

Non-speculative managers (serial, supercedent) test every item alone on
its branch tip (``ahead`` is always None) with a window of one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from scheduler.manager import batches, cycles, pending, reset, settling, verdicts
from scheduler.manager.base import PipelineManager, needed
from scheduler.manager.window import in_window
from scheduler.model import reasons
from scheduler.model.change import Change
from scheduler.model.item import (
    BuildSet,
    ChangeQueue,
    MergeState,
    PipelineState,
    PushState,
    QueueItem,
)
from scheduler.model.results import Result
from scheduler.model.tally import queue_label

log = logging.getLogger(__name__)

# walks of a queue in one pass after batches were split in it
MAX_REWALKS = 4


class SharedQueueManager(PipelineManager):
    """Items in shared queues, reported from the head in queue order."""

    kind = "shared"
    # each item is tested on the items ahead of it
    speculative = True
    # the window follows results at the head
    adjusts_window = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # per queue, when a waiting batch must be looked at again (this walk's)
        self._waking: dict[str, float] = {}
        # batches split during the walk of a queue
        self.splits = 0
        # a failure waited for the items behind it during the walk of a queue
        self.waiting_judgement = False

    # -- queueing ---------------------------------------------------------------

    def queue_name(self, change: Change) -> str:
        """The project's shared queue (per branch if it says so), else the project (Zuul)."""
        found = self.settings.queue_for(change.project, change.branch)
        if found is None:
            return change.project
        name, per_branch = found
        return f"{name}@{change.branch}" if per_branch else name

    def initial_window(self) -> int:
        return self.settings.window.window

    def new_queue(self, name: str) -> ChangeQueue:
        return ChangeQueue(name=name, window=self.initial_window())

    def queue_for(self, state: PipelineState, change: Change) -> ChangeQueue:
        name = self.queue_name(change)
        queue = state.queues.get(name)
        if queue is None:
            queue = state.queues[name] = self.new_queue(name)
        return queue

    def place(self, state: PipelineState, queue: ChangeQueue, item: QueueItem) -> None:
        if self.speculative:
            live = self.live_items(state, queue)
            item.ahead = live[-1].uuid if live else None
            batches.join(self, state, item)
        queue.items.append(item.uuid)

    def live_items(self, state: PipelineState, queue: ChangeQueue) -> list[QueueItem]:
        return state.owned(item for item in state.peek_of(queue) if not item.dequeued)

    def changes_to_merge(self, state: PipelineState, item: QueueItem) -> tuple[Change, ...]:
        chain = [ahead.change for ahead in reversed(reset.items_ahead(state, item))]
        if not self.speculative:
            return (*needed(item.change), item.change)
        return (*chain, item.change)

    # -- dependencies ---------------------------------------------------------------

    def enqueue(self, state: PipelineState, change: Change, event_id: str = "") -> QueueItem:
        """A speculative queue enqueues a change's dependencies ahead of it (Depends-On).

        A dependency must join the same shared queue (it is merged first, in
        queue order); one that would go elsewhere makes the change an error.
        The changes of a dependency cycle must share the queue too; they are
        enqueued together behind the other dependencies
        (:mod:`scheduler.manager.cycles`).
        """
        problem = ""
        refused = change.in_cycle and cycles.refusal(self.settings, change)
        if self.speculative and not refused:
            mine = self.queue_name(change)
            inside = {c.key for c in cycles.changes_of(change)} if change.in_cycle else set()
            for need in needed(change):
                live = [i for i in state.find(need) if not i.dequeued]
                if (live and live[0].queue != mine) or (not live and self.queue_name(need) != mine):
                    problem = f"depends on {need.ref} of {need.project}, not in queue {mine}"
                    break
                if not live and need.key not in inside:
                    self.enqueue_one(state, replace(need, needs=()), event_id)
        if not problem:
            return super().enqueue(state, change, event_id)
        item = self.enqueue_one(state, change, event_id)
        self.set_result(item, Result.ERROR, problem, kind=reasons.DEPENDENCY_ERROR)
        return item

    def _fail_dependents(self, state: PipelineState, failed: QueueItem, why: str) -> None:
        """Items that need ``failed``'s change are not merged without it."""
        for item in list(state.items.values()):
            if item is failed or item.dequeued or item.push is not PushState.NONE:
                continue
            if failed.cycle and item.cycle == failed.cycle:
                continue  # its cycle leaves with it (scheduler.manager.cycles)
            if any(n.key == failed.change.key for n in needed(item.change)):
                # even a passed result: tested without its dependency, it must not merge
                message = f"{why}: {failed.change.ref} was not merged"
                item.result = item.buildset.result = Result.ERROR
                item.message = item.buildset.message = message
                item.reason = reasons.LeaveReason(reasons.DEPENDENCY_FAILED, message)
                self.dequeue(state, item, message, report=True, kind=reasons.DEPENDENCY_FAILED)

    def can_start_builds(self, item: QueueItem) -> bool:
        return item.active

    # -- batches (scheduler.manager.batches) --------------------------------------

    def ready_to_merge(self, state: PipelineState, item: QueueItem) -> bool:
        if not (item.active and batches.ready(self, state, item)):
            return False
        if item.batch:
            size = len(batches.members(state, item))
            self.tally.batch(queue_label(item.queue, item.change.project), size)
        return True

    def wake_at(self, queue_name: str, when: float) -> None:
        """A batch of the queue waits for more changes until ``when``: a pass must look then."""
        self._waking[queue_name] = min(when, self._waking.get(queue_name, when))

    def advance_item(self, state: PipelineState, item: QueueItem) -> None:
        self._advance_item(state, item)
        if item.dequeued:
            return  # its dependency cycle failed (scheduler.manager.cycles)
        if verdicts.wanted(self, item) and not self._judging_behind(state, item):
            verdicts.start(self, item)
        if item.probes:
            verdicts.advance(self, item)

    def _judging_behind(self, state: PipelineState, item: QueueItem) -> bool:
        """Items behind may still show the failure flaky (pending-failure-depth)."""
        queue = state.queues.get(item.queue)
        if queue is None:
            return False
        return pending.judge(self, state, queue, item) is pending.Judgement.WAIT

    def _advance_item(self, state: PipelineState, item: QueueItem) -> None:
        if not item.batch:
            super().advance_item(state, item)
            return
        if batches.is_rider(state, item):
            return  # the batch's tail merges and builds for it
        buildset = item.buildset
        shared_merge = (
            buildset.merge_state is MergeState.COMPLETE
            and buildset.jobs is None
            and buildset.merge_error is None
            and not buildset.config_errors
            and item.result is None
        )
        if shared_merge:
            # a rider that became the tail (the tail left): its state was the batch's
            item.buildset = BuildSet(uuid=self.make_uuid())
        super().advance_item(state, item)
        if item.cycle:
            first = batches.members(state, item)[0]
            cycles.tail_step(self, state, item, batches.ahead_passed(self, state, first))
            if item.result is Result.SUCCESS and first.ahead is None:
                self._at_head(state, state.items[first.uuid])  # the cycle reports now
            return
        head = batches.after_step(self, state, item)
        if head is not None and head.ahead is None:
            self._at_head(state, head)  # the batch passed: its first member reports now

    # -- dequeue -----------------------------------------------------------------

    def dequeue_one(
        self,
        state: PipelineState,
        item: QueueItem,
        why: str,
        report: bool,
        kind: str = reasons.DEQUEUED,
    ) -> None:
        if not item.dequeued:
            self.note_reason(item, kind, why)  # the items behind are reset for it
            self._fail_dependents(state, item, "a dependency was dequeued")
            others = [m for m in batches.members(state, item) if m.uuid != item.uuid]
            if item.cycle:
                others = []  # its cycle leaves with it
            why_reset = f"item {item.uuid} ahead was dequeued"
            reset.detach_behind(self, state, item, reset=True, why=why_reset, cause=item)
            if others:
                # the rest of its batch is tested again without it
                first = state.items[others[0].uuid]
                reset.reset_item(self, state, first, f"{why} (batch)", cause=item)
        super().dequeue_one(state, item, why, report, kind)

    # -- the walk ----------------------------------------------------------------

    def advance(self, state: PipelineState) -> None:
        self._waking = {}
        for queue in list(state.queues.values()):
            self.splits = 0
            self.waiting_judgement = False
            self.process_queue(state, queue)
            for _ in range(MAX_REWALKS):
                if not (self.splits or self.waiting_judgement):
                    break
                # a batch was split: its halves (already walked) merge in this pass;
                # a failure waits for items behind it that this walk may have finished
                rejudge = self.waiting_judgement
                self.splits = 0
                self.waiting_judgement = False
                self.process_queue(state, queue)
                if rejudge and not self.splits:
                    break
            waking = self._waking.get(queue.name)
            if queue.wake_at != waking:
                queue.wake_at = waking

    def process_queue(self, state: PipelineState, queue: ChangeQueue) -> None:
        """The walk: each item's step in queue order; settled items are skipped
        (:mod:`scheduler.manager.settling`) while their place is unchanged."""
        nnfi: str | None = None  # the nearest non-failing item so far
        position = 0
        # only a pipeline holding changes with dependencies pays for looking for them
        dependencies = any(i.change.needs for i in state.items.peek_values())
        checking = settling.verifying()
        # whether each item stepped in this walk is failing, as its step judged it
        judged_failing: dict[str, bool] = {}
        for uuid in list(queue.items):
            seen = state.items.peek(uuid)
            if seen is None:
                continue
            if seen.dequeued:
                self._leave(state, seen)
                continue
            active = in_window(queue.window, position)
            if not (seen.batch and batches.is_rider(state, seen)):
                position += 1  # a batch takes one place in the window, at its tail
            ahead = nnfi if self.speculative else None

            def step(item: QueueItem, active: bool = active, ahead: str | None = ahead) -> None:
                item.active = active
                self._reparent(state, item, ahead)
                self.advance_item(state, item)
                judged = pending.judge(self, state, queue, item)
                if judged is pending.Judgement.WAIT:
                    self.waiting_judgement = True
                failing = pending.settle(state, queue, item, judged)
                judged_failing[item.uuid] = failing
                if dependencies and failing:
                    # it will not merge as tested: what depends on it must not merge either
                    self._fail_dependents(state, item, "a dependency failed")
                if item.ahead is None and judged is not pending.Judgement.WAIT:
                    self._at_head(state, item)

            mark = settling.mark(state, uuid)
            # skipped: settled, and in the same place (a head with a result reports);
            # a failure judged by the items behind it is looked at every walk
            skip = (
                mark is not None
                and seen.active == active
                and seen.ahead == ahead
                and not (ahead is None and seen.result is not None)
                and not (dependencies and mark.failing)
                and not (mark.failing and pending.depth_of(self, seen) > 0)
            )
            if mark is not None and skip:
                if checking:
                    settling.verify(self, state, seen, step)
                failing = mark.failing
            else:
                settling.advance(self, state, uuid, step)
                failing = judged_failing[uuid]
            if not failing:
                nnfi = uuid

    def _leave(self, state: PipelineState, seen: QueueItem) -> None:
        if seen.reported:
            self.leave(state, seen)  # leaves without a report (no jobs to run)
        else:
            self._finish(seen)

    def _reparent(self, state: PipelineState, item: QueueItem, expected: str | None) -> None:
        if item.ahead == expected:
            return
        why = f"the item it was tested on is not the nearest non-failing item ({expected})"
        reset.move_item(self, state, item, expected, why, cause=self._reset_cause(state, item))

    def _reset_cause(self, state: PipelineState, item: QueueItem) -> QueueItem | None:
        """The nearest item of the chain ``item`` was tested on that fails or left.

        None: nothing ahead failed (the queue was reordered by a promote).
        """
        for ahead in reset.items_ahead(state, item):
            if ahead.dequeued or self.failing(ahead):
                return ahead
        return None

    def _at_head(self, state: PipelineState, item: QueueItem) -> None:
        """Report a finished head item; a passed one is pushed first where the pipeline merges."""
        if item.result is None or item.dequeued:
            return
        if item.cycle:
            cycles.at_head(self, state, item)  # every member pushed in turn, then reported
            return
        if any(probe.result is None for probe in item.probes):
            return  # its failure is being judged (scheduler.manager.verdicts)
        needs_push = (
            item.result is Result.SUCCESS
            and self.settings.merge_on_success
            and item.push is not PushState.PUSHED
        )
        if needs_push:
            item.push = PushState.PENDING
            if item.uuid not in self.intents.merges_to_push:
                self.intents.merges_to_push.append(item.uuid)
        else:
            self._finish(item)

    # -- leaving the head ----------------------------------------------------------

    def finish_reported(self, state: PipelineState, item_uuids: Iterable[str]) -> None:
        item_uuids = list(item_uuids)
        for item_uuid in item_uuids:
            item = state.items.get(item_uuid)
            if item is not None and not item.dequeued:
                self._left_head(state, item)
        super().finish_reported(state, item_uuids)

    def _left_head(self, state: PipelineState, item: QueueItem) -> None:
        passed = item.result is Result.SUCCESS
        if not passed:
            self._fail_dependents(state, item, "a dependency failed")
        queue = state.queues.get(item.queue)
        if queue is not None and self.adjusts_window:
            window = self.settings.window
            queue.window = window.grow(queue.window) if passed else window.shrink(queue.window)
        why = f"item {item.uuid} ahead failed"
        reset.detach_behind(self, state, item, reset=not passed, why=why, cause=item)
