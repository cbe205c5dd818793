"""The ``supercedent`` manager: per ref, the running item and the newest one.

Items are grouped by project, branch and ref (one dynamic queue each,
removed with its last item). The first item of a group runs, alone on its
branch tip; at most one more waits behind it. A newer item for the same
ref replaces the waiting one (it is dequeued and reported DEQUEUED), so
when the running item finishes only the newest runs next. A running item
is not interrupted by a newer ref update; a new patchset of a change
dequeues it as in any pipeline where ``dequeue-on-new-patchset`` holds.
"""

from __future__ import annotations

from scheduler.manager.shared import SharedQueueManager
from scheduler.model import reasons
from scheduler.model.change import Change
from scheduler.model.item import ChangeQueue, PipelineState, QueueItem


class SupercedentManager(SharedQueueManager):
    """Zuul's supercedent manager."""

    kind = "supercedent"
    speculative = False
    adjusts_window = False

    def queue_name(self, change: Change) -> str:
        return f"ref:{change.key}"

    def new_queue(self, name: str) -> ChangeQueue:
        return ChangeQueue(name=name, window=1, dynamic=True)

    def supersedes(self, existing: QueueItem, change: Change) -> bool:
        # A ref update waits behind the running item instead (Zuul).
        return super().supersedes(existing, change) and not change.is_branch_update

    def enqueue(self, state: PipelineState, change: Change, event_id: str = "") -> QueueItem:
        item = super().enqueue(state, change, event_id)
        queue = state.queue_of(item)
        for waiting in self.live_items(state, queue)[1:-1]:
            why = f"superseded by the newer item {item.uuid}"
            self.dequeue(state, waiting, why, report=True, kind=reasons.SUPERSEDED)
        return item
