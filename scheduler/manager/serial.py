"""The ``serial`` manager: shared queues, one item at a time, no speculation.

Queues are named as in a dependent pipeline, but each queue runs only its
first item (a window of one that never changes), tested alone on the tip of
its branch; the next item starts once the one ahead of it was reported.
A failure resets nothing: no item was tested on top of another.
"""

from __future__ import annotations

from scheduler.manager.shared import SharedQueueManager


class SerialManager(SharedQueueManager):
    """Zuul's serial manager."""

    kind = "serial"
    speculative = False
    adjusts_window = False

    def initial_window(self) -> int:
        return 1
