"""Batches in dependent pipelines: several changes tested as one, a failed batch bisected.

A queue (or pipeline) with ``batch: {size: N, max-wait: S, max-bisect-depth: D}``
tests up to N consecutive changes on one buildset. The members of a batch
are ordinary items of the queue that share :attr:`QueueItem.batch`; each
keeps its place, its ``ahead`` (the item before it) and its own report. Only
the last member, the batch's *tail*, merges and builds: its merge stacks
every change ahead of it, the batch's included, so its buildset tests the
whole batch on top of everything ahead. The other members, *riders*, do
nothing of their own:

* **Forming.** A new item joins the batch at the end of its queue while
  that batch is open: nothing of it was requested yet, it came from no
  split, and it has fewer members than the queue's batches take now.
  Otherwise it starts a batch. The size follows the failures, as the
  window does: a batch that fails halves the size of the next ones (down
  to one change), a batch that passes doubles it (up to N). The
  tail asks for its merge once the batch is full, once its first member has
  waited S seconds (the queue's ``wake_at`` says when, so the pass is
  nudged then), or at once for a batch made by a split.
* **Success.** When the tail's merge completes, each rider gets its own
  speculative state from it (its branch at the commit its change made);
  when the tail passes, every rider passes. The members then reach the
  head in queue order and each is pushed and reported on its own: N
  changes, N commits, in order.
* **Failure bisects.** When the tail is failing (a voting job failed, the
  merge conflicted, the config broke), the batch has more than one member
  and everything it was tested on has passed, its members are split into
  two batches, the first half and the second, and reset. While something
  ahead of it is still running the failing batch waits: if that fails, the
  walk moves the whole batch off it and tests it again unsplit. The walk
  tests the first half on what is ahead and the second half on top of the
  first, at once, as any two items of a dependent queue; a half that fails
  is split again, and the second half moves onto what is ahead if the
  first one fails. A batch behind a split one waits for the results of its
  parts that hold more than one change before it merges (builds on a half
  holding the culprit would be thrown away); behind single changes it
  builds at once, as any item behind another. After D splits (default 1:
  halved once) the remaining members are tested one by one. A batch of one
  that fails is a culprit: it fails, is reported, and leaves, as any item.
* **The depth follows the failures.** Halves pay when a failed batch
  holds one culprit. A batch that fails while the queue's batches are
  already smaller than N (an earlier batch failed and none passed since)
  likely holds more than one: its members are tested one by one at once,
  as after the depth bound.

Everything is in the items' documents (``batch``, ``bisect_depth``), written
with the pass that decided it: a scheduler killed mid-bisection leaves the
split as committed, and the next pass goes on from there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from scheduler.config.model import BatchConfig
from scheduler.manager import events as ev
from scheduler.manager import reset
from scheduler.manager.settings import FreezeResult, LayoutProvider
from scheduler.model.item import ChangeQueue, MergeState, PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.model.tally import queue_label

log = logging.getLogger(__name__)


class Batching(reset.Resets, Protocol):
    """What batches need of their pipeline's manager (``SharedQueueManager``)."""

    @property
    def speculative(self) -> bool: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def wake_at(self, queue_name: str, when: float) -> None: ...

    def set_result(self, item: QueueItem, result: Result, message: str) -> None: ...

    def failing(self, item: QueueItem) -> bool: ...

    splits: int


def settings_of(manager: Batching, item: QueueItem) -> BatchConfig | None:
    """The batching of ``item``'s queue; None when it tests one change an item."""
    if not manager.speculative:
        return None
    batch = manager.settings.batch_for(item.change.project, item.change.branch)
    return batch if batch is not None and batch.size > 1 else None


def members(state: PipelineState, item: QueueItem) -> list[QueueItem]:
    """The live members of ``item``'s batch in queue order, for reading only."""
    if not item.batch:
        return [item]
    queue = state.queues.get(item.queue)
    if queue is None:
        return [item]
    return [
        other for other in state.peek_of(queue) if other.batch == item.batch and not other.dequeued
    ]


def is_rider(state: PipelineState, item: QueueItem) -> bool:
    """A member of a batch that is not its tail: it neither merges nor builds."""
    if not item.batch:
        return False
    found = members(state, item)
    return len(found) > 1 and found[-1].uuid != item.uuid


def join(manager: Batching, state: PipelineState, item: QueueItem) -> None:
    """A new item joins the open batch at the end of its queue, or starts one."""
    batch = settings_of(manager, item)
    if batch is None:
        return
    queue = state.queues.get(item.queue)
    live = [i for i in state.peek_of(queue) if not i.dequeued] if queue else []
    last = live[-1] if live else None
    if last is not None and last.batch and not last.cycle and last.bisect_depth == 0:
        group = [i for i in live if i.batch == last.batch]
        if len(group) < size_now(queue, batch) and all(reset.untouched(i) for i in group):
            item.batch = last.batch
            return
    item.batch = item.uuid


def size_now(queue: ChangeQueue | None, batch: BatchConfig) -> int:
    """How many changes a new batch of ``queue`` takes (it follows the failures)."""
    if queue is None or not queue.batch_size:
        return batch.size
    return min(queue.batch_size, batch.size)


def _adapt(state: PipelineState, item: QueueItem, batch: BatchConfig, passed: bool) -> None:
    """A passed batch doubles the size of the next ones, a failed one halves it."""
    queue = state.queues.get(item.queue)
    if queue is None:
        return
    now = size_now(queue, batch)
    queue.batch_size = min(batch.size, now * 2) if passed else max(1, now // 2)


def ready(manager: Batching, state: PipelineState, item: QueueItem) -> bool:
    """Whether a batch's tail may ask for its merge (full, waited enough, or split)."""
    if not item.batch or item.bisect_depth > 0:
        return True
    group = members(state, item)
    if _behind_a_bisection(state, group[0]):
        return False  # tested on a half that may hold a culprit: wait for the halves
    batch = settings_of(manager, item)
    queue = state.queues.get(item.queue)
    if item.cycle or batch is None or len(group) >= size_now(queue, batch):
        return True  # a dependency cycle is complete as enqueued
    due = group[0].enqueue_time + batch.max_wait
    if manager.clock() >= due:
        return True
    if queue is not None:
        manager.wake_at(queue.name, due)
    return False


def freeze(
    layouts: LayoutProvider, state: PipelineState, tail: QueueItem, outcome: ev.MergeOutcome
) -> FreezeResult:
    """The batch's jobs: those of each member's project and branch, one of each name.

    Every member's change is frozen with the files it touches; a job two
    members run is run once (the first member's variant), on the whole
    batch's state.
    """
    group = members(state, tail)
    if len(group) < 2:
        return layouts.freeze(tail, outcome)
    files = _files_by_member(group, outcome)
    seen: dict[tuple[str, str], FreezeResult] = {}
    jobs: dict[str, object] = {}
    errors: list[str] = []
    fail_fast = False
    for member in [tail, *group[:-1]]:
        key = (member.change.project, member.change.branch)
        if key in seen:
            continue
        found = seen[key] = layouts.freeze(
            member, replace(outcome, files=files.get(member.uuid, outcome.files))
        )
        errors.extend(e for e in found.errors if e not in errors)
        fail_fast = fail_fast or found.fail_fast
        for job in found.jobs:
            jobs.setdefault(job.name, job)
    if errors:
        return FreezeResult(errors=tuple(errors))
    union = tuple(job for results in seen.values() for job in results.jobs if jobs[job.name] is job)
    return FreezeResult(jobs=union, fail_fast=fail_fast)


def _files_by_member(
    group: list[QueueItem], outcome: ev.MergeOutcome
) -> dict[str, tuple[str, ...]]:
    merged = outcome.merged
    offset = len(merged) - len(group)
    if offset < 0:
        return {}
    return {member.uuid: merged[offset + i].files for i, member in enumerate(group)}


def share_merge(state: PipelineState, tail: QueueItem, outcome: ev.MergeOutcome) -> None:
    """Each rider's own speculative state, from the tail's merge of the whole batch.

    A rider's branch is at the commit its change made; a branch that only
    changes after it in the batch is at what it was before them.
    """
    group = members(state, tail)
    merged = outcome.merged
    offset = len(merged) - len(group)
    if len(group) < 2 or offset < 0:
        return
    for index, seen in enumerate(group[:-1]):
        rider = state.items[seen.uuid]
        upto = offset + index + 1
        # a dependency cycle's members are all tested on the whole cycle
        whole = {p: dict(b) for p, b in outcome.repo_state.items()}
        rider.buildset.repo_state = whole if tail.cycle else _state_after(outcome, upto)
        rider.buildset.base_state = {p: dict(b) for p, b in outcome.base_state.items()}
        rider.buildset.files = list(merged[upto - 1].files)
        rider.buildset.merge_state = MergeState.COMPLETE
        rider.buildset.merge_request = tail.buildset.merge_request


def _state_after(outcome: ev.MergeOutcome, upto: int) -> dict[str, dict[str, str]]:
    """The repo state once the first ``upto`` changes of the merge are applied."""
    state = {project: dict(branches) for project, branches in outcome.repo_state.items()}
    done: dict[tuple[str, str], str] = {}
    for change in outcome.merged[:upto]:
        done[(change.project, change.branch)] = change.commit
    for change in outcome.merged[upto:]:
        key = (change.project, change.branch)
        before = done.get(key) or _base(outcome.base_state, key)
        if before:
            state.setdefault(change.project, {})[change.branch] = before
    return state


def _base(base_state: Mapping[str, Mapping[str, str]], key: tuple[str, str]) -> str:
    return base_state.get(key[0], {}).get(key[1], "")


def after_step(manager: Batching, state: PipelineState, tail: QueueItem) -> QueueItem | None:
    """A tail that passed passes its riders; one that is failing splits its batch.

    Returns the batch's first member when its riders passed in this step
    (already walked, it reports only when told).
    """
    group = members(state, tail)
    batch = settings_of(manager, tail)
    if tail.result is Result.SUCCESS:
        passed = [state.items[seen.uuid] for seen in group[:-1] if seen.result is None]
        if passed and batch is not None and tail.bisect_depth == 0:
            _adapt(state, tail, batch, passed=True)
        for rider in passed:
            manager.set_result(rider, Result.SUCCESS, f"tested in a batch of {len(group)}")
        return passed[0] if passed and passed[0].uuid == group[0].uuid else None
    if len(group) > 1 and manager.failing(tail):
        if ahead_passed(manager, state, group[0]):
            # a failure in a queue whose batches were already cut down by failures
            # likely has company: its members are tested one by one at once
            calm = batch is None or size_now(state.queues.get(tail.queue), batch) >= batch.size
            if batch is not None and tail.bisect_depth == 0:
                _adapt(state, tail, batch, passed=False)
            bisect(manager, state, group, halves=calm or tail.bisect_depth > 0)
        # else: what is ahead may be the cause; if it fails, the walk moves the
        # whole batch off it (no split), if it passes the batch is split then
    elif tail.result is not None and tail.bisect_depth > 0 and "culprit" not in tail.message:
        depth = tail.bisect_depth
        tail.message = tail.buildset.message = (
            f"{tail.message} (the culprit, found by {depth} split{'s' if depth > 1 else ''} "
            "of a failed batch)"
        )
    return None


def _behind_a_bisection(state: PipelineState, first: QueueItem) -> bool:
    """Whether ``first`` is tested on a part of a split batch that has no result yet and
    holds more than one change (a single change ahead is an ordinary item: Zuul's bet)."""
    return any(
        ahead.bisect_depth > 0 and ahead.result is None and len(members(state, ahead)) > 1
        for ahead in reset.peek_ahead(state, first)
    )


def ahead_passed(manager: Batching, state: PipelineState, first: QueueItem) -> bool:
    """Whether everything ``first`` is tested on has passed (or nothing is ahead): a failed
    batch splits only then, and a failed dependency cycle (:mod:`.cycles`) leaves."""
    return all(
        ahead.result is Result.SUCCESS and not manager.failing(ahead)
        for ahead in reset.peek_ahead(state, first)
    )


def bisect(
    manager: Batching, state: PipelineState, group: list[QueueItem], halves: bool = True
) -> None:
    """Split a failing batch in two halves (or one by one past the depth bound, or when not
    ``halves``), reset it."""
    first = state.items[group[0].uuid]
    depth = first.bisect_depth + 1
    batch = settings_of(manager, first)
    bound = batch.max_bisect_depth if batch is not None else 0
    if depth > bound or not halves:
        parts = [[m] for m in group]
    else:
        half = math.ceil(len(group) / 2)
        parts = [group[:half], group[half:]]
    sizes = ", ".join(str(len(part)) for part in parts)
    why = f"batch {first.batch} failed: split into {len(parts)} ({sizes})"
    log.info("%s: %s", manager.settings.name, why)
    manager.splits += 1
    manager.tally.bisection(queue_label(first.queue, first.change.project))
    tail = state.items[group[-1].uuid]
    reset.reset_item(manager, state, first, why, cause=tail)
    for part in parts:
        name = manager.make_uuid()
        for seen in part:
            member = state.items[seen.uuid]
            member.batch = name
            member.bisect_depth = depth
