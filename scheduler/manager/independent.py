"""The ``independent`` manager (check pipelines): every item on its own."""

from __future__ import annotations

from scheduler.manager.base import PipelineManager
from scheduler.model.change import Change
from scheduler.model.item import ChangeQueue, PipelineState


class IndependentManager(PipelineManager):
    """Each item is tested alone on the tip of its target branch."""

    kind = "independent"

    def queue_for(self, state: PipelineState, change: Change) -> ChangeQueue:
        # A queue per item, named after nothing shared: items never wait for each other.
        name = f"item:{self.make_uuid()}"
        queue = ChangeQueue(name=name)
        state.queues[name] = queue
        return queue
