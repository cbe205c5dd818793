"""Resetting items of a shared queue: what a failure or a dequeue ahead does.

An item of a shared queue is tested on top of the item named by its
``ahead`` (None: on the tip of its target branch). The items *behind* an
item are those whose ``ahead`` names it; they form a tree, so resetting one
item resets its whole subtree. A reset aborts the item's builds (cancel
intents, semaphores released), gives it a new :class:`BuildSet` with a new
uuid (so every merge and build event of the old one is stale and ignored,
see :mod:`scheduler.manager.answers`) and forgets its result: the
item is merged and tested again from the start.

A reset records what it threw away (:func:`wasted`: the builds of the old
buildset that started, and the CI seconds they used up to their end or to
now) on the item (``QueueItem.resets``, with the item ahead that caused it
and that item's reason), on that cause (``QueueItem.reset_cost``: what its
failure or dequeue cost the others) and in the pass's tally for the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from scheduler.manager.settings import PipelineSettings
from scheduler.model import reasons
from scheduler.model.item import BuildSet, MergeState, PipelineState, PushState, QueueItem
from scheduler.model.reasons import LeaveReason, ResetCause, ResetHistory, Waste
from scheduler.model.results import Result
from scheduler.model.tally import PassTally, queue_label

log = logging.getLogger(__name__)


class Resets(Protocol):
    """What a reset needs of its pipeline's manager (``PipelineManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def make_uuid(self) -> Callable[[], str]: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def tally(self) -> PassTally: ...

    def abort_builds(self, item: QueueItem) -> None: ...


def items_behind(state: PipelineState, item: QueueItem) -> list[QueueItem]:
    """Live items of ``item``'s queue tested directly on top of it, in queue order."""
    queue = state.queues.get(item.queue)
    if queue is None:
        return []
    behind = [i for i in state.peek_of(queue) if not i.dequeued and i.ahead == item.uuid]
    return state.owned(behind)


def items_ahead(state: PipelineState, item: QueueItem) -> list[QueueItem]:
    """The chain ``item`` is tested on, nearest first."""
    chain: list[QueueItem] = []
    current = state.items.get(item.ahead) if item.ahead else None
    while current is not None and current not in chain:
        chain.append(current)
        current = state.items.get(current.ahead) if current.ahead else None
    return chain


def peek_ahead(state: PipelineState, item: QueueItem) -> Iterator[QueueItem]:
    """The chain ``item`` is tested on, nearest first, for reading only (nothing is taken)."""
    seen: set[str] = set()
    current = item.ahead
    while current is not None and current not in seen:
        seen.add(current)
        ahead = state.items.peek(current)
        if ahead is None:
            return
        yield ahead
        current = ahead.ahead


def untouched(item: QueueItem) -> bool:
    """Nothing of the item's buildset was requested yet: a reset has nothing to undo."""
    buildset = item.buildset
    return (
        buildset.merge_state is MergeState.NEW
        and buildset.jobs is None
        and item.result is None
        and item.push is PushState.NONE
    )


def wasted(item: QueueItem, now: float) -> Waste:
    """One reset of ``item``: its builds that started (running or ended) and their CI seconds."""
    builds = 0
    seconds = 0.0
    for job in item.buildset.graph:
        for build in job.builds:
            if build.start_time is None:
                continue  # never started: it cost nothing
            end = build.end_time if build.done and build.end_time is not None else now
            builds += 1
            seconds += max(0.0, end - build.start_time)
    return Waste(1, builds, round(seconds, 3))


def reset_cause(item: QueueItem | None, why: str) -> ResetCause:
    """What a reset is attributed to: the item ahead and its reason (none: a reorder)."""
    if item is None:
        return ResetCause("", "", "", reasons.REORDERED, why)
    reason = item.reason
    if reason is None:  # still running, but a voting job failed
        failed = [
            job.name
            for job in item.buildset.graph
            if job.info.voting and job.result not in (None, Result.SUCCESS, Result.SKIPPED)
        ]
        reason = LeaveReason(reasons.FAILED, "failing: " + ", ".join(failed), tuple(failed))
    return ResetCause(item.uuid, item.change.project, item.change.ref, reason.kind, reason.message)


def reset_item(
    manager: Resets,
    state: PipelineState,
    item: QueueItem,
    why: str,
    *,
    cause: QueueItem | None = None,
) -> None:
    """Abort ``item``'s builds and test it again, with every item behind it.

    ``cause`` is the item ahead whose failure or dequeue made the reset (None:
    the queue was reordered); it is charged with what the reset threw away.
    """
    for behind in items_behind(state, item):
        reset_item(manager, state, behind, why, cause=cause)
    if untouched(item):
        return
    log.info("%s: resetting item %s: %s", manager.settings.name, item.uuid, why)
    waste = wasted(item, manager.clock())
    item.resets = ResetHistory(item.resets.total + waste, reset_cause(cause, why))
    if cause is not None:
        cause.reset_cost = cause.reset_cost + waste
    manager.tally.reset(queue_label(item.queue, item.change.project), waste)
    manager.abort_builds(item)
    item.buildset = BuildSet(uuid=manager.make_uuid())
    item.result = None
    item.message = ""
    item.reason = None
    item.push = PushState.NONE
    item.verdict = ""
    item.probes = []


def move_item(
    manager: Resets,
    state: PipelineState,
    item: QueueItem,
    ahead: str | None,
    why: str,
    *,
    cause: QueueItem | None = None,
) -> None:
    """Test ``item`` on ``ahead`` instead (resetting it and its subtree)."""
    reset_item(manager, state, item, why, cause=cause)
    item.ahead = ahead


def detach_behind(
    manager: Resets,
    state: PipelineState,
    item: QueueItem,
    reset: bool,
    why: str,
    *,
    cause: QueueItem | None = None,
) -> None:
    """``item`` leaves: the items on top of it move onto what it was on.

    With ``reset`` (the item will not merge) they are tested again; without
    (it merged) their speculative state is still what the branch becomes.
    """
    for behind in items_behind(state, item):
        behind.ahead = item.ahead
        if reset:
            reset_item(manager, state, behind, why, cause=cause)
