"""The ``independent`` manager (check pipelines): every item on its own.

A dependency cycle (:mod:`scheduler.manager.cycles`) is the one exception:
its changes share a queue of their own, the last one merges and builds for
all, and every change is reported with the cycle's result.
"""

from __future__ import annotations

from scheduler.manager import batches, cycles
from scheduler.manager.base import PipelineManager
from scheduler.model.change import Change
from scheduler.model.item import ChangeQueue, PipelineState, QueueItem


class IndependentManager(PipelineManager):
    """Each item is tested alone on the tip of its target branch."""

    kind = "independent"

    def queue_for(self, state: PipelineState, change: Change) -> ChangeQueue:
        # A queue per item, named after nothing shared: items never wait for each other.
        name = f"item:{self.make_uuid()}"
        queue = ChangeQueue(name=name)
        state.queues[name] = queue
        return queue

    # -- dependency cycles: the last change merges and builds for all -------------

    def advance_item(self, state: PipelineState, item: QueueItem) -> None:
        if item.cycle and batches.is_rider(state, item):
            return  # the cycle's last change merges and builds for it
        super().advance_item(state, item)
        if item.cycle and item.result is not None:
            cycles.tail_step(self, state, item, ahead_passed=True)
            for member in cycles.members(state, item):
                self.finish(state.items[member.uuid])
