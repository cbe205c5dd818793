"""The manager of a pipeline that a reconfiguration removed.

Zuul dequeues the items of a removed pipeline and reports them. The
retiring manager does that on the pipeline's next pass: every live item is
dequeued (its builds cancelled, its semaphores released) and reported as
``DEQUEUED`` with the reason, then removed; events still queued for the
pipeline are consumed without effect (an enqueue answers that it was not
enqueued).
"""

from __future__ import annotations

from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.manager.settings import FreezeResult
from scheduler.model import reasons
from scheduler.model.change import Change
from scheduler.model.item import ChangeQueue, PipelineState, QueueItem

REMOVED = "the pipeline was removed from the configuration"


class NoLayout:
    """The layout provider of a removed pipeline: nothing can be frozen."""

    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(errors=(REMOVED,))


class RetiringManager(PipelineManager):
    kind = "retiring"

    def apply(self, state: PipelineState, event: ev.PipelineEvent) -> None:
        """Events of a removed pipeline change nothing (they are acknowledged)."""

    def advance(self, state: PipelineState) -> None:
        for item in list(state.items_in_order()):
            if not item.dequeued:
                self.dequeue(state, item, REMOVED, report=True, kind=reasons.PIPELINE_REMOVED)
        super().advance(state)

    def queue_for(self, state: PipelineState, change: Change) -> ChangeQueue:
        raise RuntimeError("a removed pipeline takes no new items")
