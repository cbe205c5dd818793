"""The launcher's tick: a thread in every worker that consumes the ``launcher`` queue.

As the image builder's (:mod:`workers.images.loop`), the
:class:`LauncherStep` bootstep starts a thread with its own ZooKeeper
client once the pool has forked. Its first check runs at once, then every
``nodes.check_interval`` seconds (:meth:`Launcher.check`): it repairs what
dead launchers and users left, deletes used nodes of its providers and
nudges requests that wait (``sluice.launcher.serve``, at most one nudge per
request every three intervals). Requests themselves are served by the
tasks in the pool. A failing check is logged and tried again at the next
tick; it never stops the worker.
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
from workers.launcher.launcher import Launcher, RequestNudges

log = logging.getLogger(__name__)

LAUNCHER_QUEUE = "launcher"


class LauncherLoop:
    """Runs :meth:`Launcher.check` every ``check_interval`` seconds until stopped."""

    def __init__(self, settings: Settings, client: zk_client.ZooKeeperClient) -> None:
        self.settings = settings
        self.launcher = Launcher(settings, client)
        self.nudges = RequestNudges(every=max(2.0, 3 * self.interval))
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="sluice-launcher", daemon=True)

    @property
    def interval(self) -> float:
        return self.settings.nodes.check_interval

    def start(self) -> None:
        log.info("launcher %s: checking every %.0fs", self.launcher.id, self.interval)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                report = self.launcher.check(self._nudge, self.nudges)
                if report:
                    log.info("launcher: %s", report)
            except (ZooKeeperError, OSError) as exc:
                log.warning("launcher: %s (trying again)", exc)
            except Exception:  # a process boundary: log and keep ticking
                log.exception("launcher: unexpected error (trying again)")
            self.stopping.wait(max(0.05, self.interval - (time.monotonic() - started)))

    def _nudge(self, request_id: str) -> None:
        dispatch.send(tasknames.LAUNCH, request_id, settings=self.settings, queue=LAUNCHER_QUEUE)


class LauncherStep(bootsteps.StartStopStep):
    """The launcher's tick, in workers that consume ``launcher``."""

    requires = ("celery.worker.components:Pool",)
    label = "Sluice launcher"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.running: LauncherLoop | None = None
        self.client: zk_client.ZooKeeperClient | None = None
        self.stopped = threading.Event()

    def start(self, worker: Any) -> None:
        if LAUNCHER_QUEUE not in worker_queues(worker):
            return
        threading.Thread(target=self._start, name="sluice-launcher-start", daemon=True).start()

    def _start(self) -> None:
        settings = load_settings()
        for delay in (1, 2, 5, 10, 30):
            try:
                self.client = zk_client.connect(settings.zookeeper)
                break
            except (ZooKeeperError, OSError) as exc:
                log.warning("launcher: no ZooKeeper yet (%s); again in %ds", exc, delay)
                if self.stopped.wait(delay):
                    return
        else:
            log.error("launcher: not started: ZooKeeper unreachable")
            return
        if self.stopped.is_set():
            return
        self.running = LauncherLoop(settings, self.client)
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
                log.debug("closing the launcher's client", exc_info=True)
            self.client = None

    shutdown = stop
