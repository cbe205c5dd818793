"""The builder's tick: a thread in every worker that consumes the ``builder`` queue.

As the timer and the pollers do in maintenance workers
(``tasks/gathering.py``), the :class:`ImageBuilderStep` bootstep starts a
thread with its own ZooKeeper client after the pool has forked. Its first
check runs at once, so a restarted builder finds its incomplete builds
within one check (once the dead session's lock has expired), and then
every ``images.check_interval`` seconds (:func:`workers.images.check.check_images`).
Builds themselves run as ``sluice.builder.build`` tasks in the pool; the
thread only nudges them. A failing check is logged and tried again at the
next tick; it never stops the worker.
"""

from __future__ import annotations

import logging

from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import Settings
from scheduler.zk.client import ZooKeeperClient
from workers.images.builder import ImageBuilder
from workers.images.check import NudgeMemory, check_images
from workers.ticker import Ticker, TickerStep

log = logging.getLogger(__name__)

BUILDER_QUEUE = "builder"


class ImageBuilderStep(TickerStep):
    """The builder's tick (:func:`check_images`), in workers that consume ``builder``."""

    label = "Sluice image builder"
    queue = BUILDER_QUEUE
    name = "image builder"

    def make_ticker(self, settings: Settings, client: ZooKeeperClient) -> Ticker:
        builder = ImageBuilder.from_settings(settings, client)
        interval = settings.images.check_interval
        memory = NudgeMemory(every=max(3.0, 3 * interval))

        def nudge(image: str) -> None:
            dispatch.send(task_names.IMAGE_BUILD, image, settings=settings, queue=BUILDER_QUEUE)

        log.info("image builder %s: checking every %.0fs", builder.builder_id, interval)
        return Ticker("image-builder", lambda: check_images(builder, nudge, memory), interval)
