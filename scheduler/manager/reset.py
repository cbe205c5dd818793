"""Resetting items of a shared queue: what a failure or a dequeue ahead does.

An item of a shared queue is tested on top of the item named by its
``ahead`` (None: on the tip of its target branch). The items *behind* an
item are those whose ``ahead`` names it; they form a tree, so resetting one
item resets its whole subtree. A reset aborts the item's builds (cancel
intents, semaphores released), gives it a new :class:`BuildSet` with a new
uuid (so every merge and build event of the old one is stale and ignored,
see :mod:`scheduler.manager.answers`) and forgets its result: the
item is merged and tested again from the start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from scheduler.manager.settings import PipelineSettings
from scheduler.model.item import BuildSet, MergeState, PipelineState, PushState, QueueItem

log = logging.getLogger(__name__)


class Resets(Protocol):
    """What a reset needs of its pipeline's manager (``PipelineManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def make_uuid(self) -> Callable[[], str]: ...

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


def untouched(item: QueueItem) -> bool:
    """Nothing of the item's buildset was requested yet: a reset has nothing to undo."""
    buildset = item.buildset
    return (
        buildset.merge_state is MergeState.NEW
        and buildset.jobs is None
        and item.result is None
        and item.push is PushState.NONE
    )


def reset_item(manager: Resets, state: PipelineState, item: QueueItem, why: str) -> None:
    """Abort ``item``'s builds and test it again, with every item behind it."""
    for behind in items_behind(state, item):
        reset_item(manager, state, behind, why)
    if untouched(item):
        return
    log.info("%s: resetting item %s: %s", manager.settings.name, item.uuid, why)
    manager.abort_builds(item)
    item.buildset = BuildSet(uuid=manager.make_uuid())
    item.result = None
    item.message = ""
    item.push = PushState.NONE
    item.verdict = ""


def move_item(
    manager: Resets, state: PipelineState, item: QueueItem, ahead: str | None, why: str
) -> None:
    """Test ``item`` on ``ahead`` instead (resetting it and its subtree)."""
    reset_item(manager, state, item, why)
    item.ahead = ahead


def detach_behind(
    manager: Resets, state: PipelineState, item: QueueItem, reset: bool, why: str
) -> None:
    """``item`` leaves: the items on top of it move onto what it was on.

    With ``reset`` (the item will not merge) they are tested again; without
    (it merged) their speculative state is still what the branch becomes.
    """
    for behind in items_behind(state, item):
        behind.ahead = item.ahead
        if reset:
            reset_item(manager, state, behind, why)
