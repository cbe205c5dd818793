"""The builder's tick: a thread in every worker that consumes the ``builder`` queue.

As the timer and the pollers do in maintenance workers
(:mod:`workers.gatherers`), the :class:`ImageBuilderStep` bootstep starts a
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
import threading
import time
from typing import Any

from celery import bootsteps

from scheduler import dispatch, tasknames
from scheduler.settings import Settings, load_settings
from scheduler.zk import client as zk_client
from scheduler.zk.errors import ZooKeeperError
from workers.bootsteps import worker_queues
from workers.images.builder import ImageBuilder
from workers.images.check import NudgeMemory, check_images

log = logging.getLogger(__name__)

BUILDER_QUEUE = "builder"


class BuilderLoop:
    """Runs :func:`check_images` every ``check_interval`` seconds until stopped."""

    def __init__(self, settings: Settings, client: zk_client.ZooKeeperClient) -> None:
        self.settings = settings
        self.builder = ImageBuilder.from_settings(settings, client)
        interval = settings.images.check_interval
        self.memory = NudgeMemory(every=max(3.0, 3 * interval))
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="sluice-image-builder", daemon=True)

    def start(self) -> None:
        log.info("image builder %s: checking every %.0fs", self.builder.builder_id, self.interval)
        self.thread.start()

    @property
    def interval(self) -> float:
        return self.settings.images.check_interval

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                report = check_images(self.builder, self._nudge, self.memory)
                if report:
                    log.info("image builder: %s", report)
            except (ZooKeeperError, OSError) as exc:
                log.warning("image builder: %s (trying again)", exc)
            except Exception:  # a process boundary: log and keep ticking
                log.exception("image builder: unexpected error (trying again)")
            self.stopping.wait(max(0.05, self.interval - (time.monotonic() - started)))

    def _nudge(self, image: str) -> None:
        dispatch.send(tasknames.IMAGE_BUILD, image, settings=self.settings, queue=BUILDER_QUEUE)


class ImageBuilderStep(bootsteps.StartStopStep):
    """The builder's tick, in workers that consume ``builder``."""

    requires = ("celery.worker.components:Pool",)
    label = "Sluice image builder"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.running: BuilderLoop | None = None
        self.client: zk_client.ZooKeeperClient | None = None
        self.stopped = threading.Event()

    def start(self, worker: Any) -> None:
        if BUILDER_QUEUE not in worker_queues(worker):
            return
        threading.Thread(target=self._start, name="sluice-builder-start", daemon=True).start()

    def _start(self) -> None:
        settings = load_settings()
        for delay in (1, 2, 5, 10, 30):
            try:
                self.client = zk_client.connect(settings.zookeeper)
                break
            except (ZooKeeperError, OSError) as exc:
                log.warning("image builder: no ZooKeeper yet (%s); again in %ds", exc, delay)
                if self.stopped.wait(delay):
                    return
        else:
            log.error("image builder: not started: ZooKeeper unreachable")
            return
        if self.stopped.is_set():
            return
        self.running = BuilderLoop(settings, self.client)
        self.running.start()

    def stop(self, worker: Any) -> None:
        self.stopped.set()
        if self.running is not None:
            self.running.stop()
            self.running = None
        if self.client is not None:
            try:
                self.client.stop()
                self.client.close()
            except Exception:  # closing at shutdown: nothing left to save
                log.debug("closing the image builder's client", exc_info=True)
            self.client = None

    shutdown = stop
