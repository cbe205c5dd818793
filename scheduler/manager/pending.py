"""Failures judged before they reset the gate (``pending-failure-depth: K``, Sluice's own).

In a dependent queue an item that fails normally resets every item tested
on top of it at once: a flaky test near the head throws the whole queue
away. With ``pending-failure-depth: K`` on the pipeline (or its queue) a
failing item is first *pending*: it keeps its place, the items behind it
stay on top of it (their tested state includes it), and the walk waits
for the K nearest of them to finish:

* one of them **passes**: the failure did not reproduce with the same
  changes in the tested state, so the item is **flaky**. Once its own
  builds have ended it is given SUCCESS (its message says which item
  passed on top of it) and merges with them, in queue order.
* all of them (or all there are) **fail**: the failure is **confirmed**;
  the item is failing from then on and the walk resets the items behind it
  as usual. With none behind it the failure is confirmed at once.

An item that fails while an item it is tested on waits for its judgement
waits too: its failure may be that one's, and is judged after it.

The verdict is kept in the item's document (``QueueItem.verdict``) and a
reset forgets it. A pending item is never skipped as settled: its fate
depends on other items' results.
"""

from __future__ import annotations

import enum
from typing import Protocol

from scheduler.manager import reset
from scheduler.manager.settings import PipelineSettings
from scheduler.model.item import ChangeQueue, PipelineState, QueueItem
from scheduler.model.results import Result

FLAKY = "flaky"
FAILED = "failed"


class Judgement(enum.Enum):
    PASSING = "passing"  # not failing
    FAILING = "failing"  # failing, in a queue that does not judge failures
    WAIT = "wait"  # failing, its followers have not all finished
    FLAKY = "flaky"  # failing, but an item tested on top of it passed
    FAILED = "failed"  # failing, confirmed


class Judges(Protocol):
    """What judging needs of its pipeline's manager (``SharedQueueManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    def failing(self, item: QueueItem) -> bool: ...


def depth_of(manager: Judges, item: QueueItem) -> int:
    return manager.settings.pending_failure_for(item.change.project, item.change.branch)


def judge(manager: Judges, state: PipelineState, queue: ChangeQueue, item: QueueItem) -> Judgement:
    """Where ``item``'s failure stands (for reading: nothing is changed)."""
    if not manager.failing(item):
        return Judgement.PASSING
    depth = depth_of(manager, item)
    if depth <= 0:
        return Judgement.FAILING
    if item.verdict == FAILED:
        return Judgement.FAILED
    if _pending_ahead(manager, state, item):
        return Judgement.WAIT  # its failure may be that one's: judged after it
    return _by_followers(_followers(state, queue, item, depth))


def _by_followers(followers: list[QueueItem]) -> Judgement:
    if any(f.result is Result.SUCCESS for f in followers):
        return Judgement.FLAKY
    if all(f.result is not None for f in followers):
        return Judgement.FAILED
    return Judgement.WAIT


def _followers(
    state: PipelineState, queue: ChangeQueue, item: QueueItem, depth: int
) -> list[QueueItem]:
    """The ``depth`` nearest live items behind ``item`` tested on top of it."""
    found: list[QueueItem] = []
    behind = False
    for uuid in queue.items:
        other = state.items.peek(uuid)
        if other is None or other.dequeued:
            continue
        if uuid == item.uuid:
            behind = True
        elif behind and _on_top_of(state, other, item.uuid):
            found.append(other)
            if len(found) == depth:
                break
    return found


def _pending_ahead(manager: Judges, state: PipelineState, item: QueueItem) -> bool:
    """Whether an item ``item`` is tested on is failing and not judged yet."""
    return any(
        manager.failing(ahead) and ahead.verdict != FAILED
        for ahead in reset.peek_ahead(state, item)
    )


def _on_top_of(state: PipelineState, other: QueueItem, uuid: str) -> bool:
    return any(ahead.uuid == uuid for ahead in reset.peek_ahead(state, other))


def settle(state: PipelineState, queue: ChangeQueue, item: QueueItem, judged: Judgement) -> bool:
    """Record a verdict on ``item`` (owned); True if it is failing for the walk.

    A flaky item with its builds ended passes; one still building waits.
    """
    if judged is Judgement.PASSING:
        return False
    if judged is Judgement.FAILING:
        return True
    if judged is Judgement.FAILED:
        item.verdict = FAILED
        return True
    if judged is Judgement.FLAKY and item.result is not None:
        passed = next(
            f
            for f in _followers(state, queue, item, len(queue.items))
            if f.result is Result.SUCCESS
        )
        item.verdict = FLAKY
        item.message = item.buildset.message = (
            f"{item.message} (judged flaky: {passed.change.ref} passed on top of it)"
        )
        item.result = item.buildset.result = Result.SUCCESS
        item.reason = None
    return False
