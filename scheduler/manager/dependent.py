"""The ``dependent`` manager (gate pipelines): speculative shared queues.

Projects that name the same ``queue`` share one change queue (one per
branch when the queue is ``per-branch``); any other project has a queue of
its own. Each item is tested on the speculative merge of every item ahead
of it that is not failing, so a change merges only after it passed on top
of everything that merges before it. The walk, the window and the resets
are :mod:`scheduler.manager.shared`, :mod:`scheduler.manager.window` and
:mod:`scheduler.manager.reset`; ``docs/scheduler.md`` tells the story.

Merging: in a pipeline whose success reporter says ``merge: true``
(``PipelineSettings.merge_on_success``) a head item that passed is listed in
``Intents.merges_to_push`` until the processing layer answers with
``merge_pushed`` (then it is reported SUCCESS and leaves, growing the
window) or ``merge_failed`` (then it fails with the message, the items
behind it are reset, and it is reported FAILURE, shrinking the window).
"""

from __future__ import annotations

from scheduler.manager.shared import SharedQueueManager


class DependentManager(SharedQueueManager):
    """Zuul's dependent manager: optimistic merging, nearest non-failing item."""

    kind = "dependent"
    speculative = True
    adjusts_window = True
