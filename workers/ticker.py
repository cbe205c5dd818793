"""A periodic check in its own thread, started by a worker bootstep.

The image builder, the launcher and the gatherers (pollers and timer) run so.

A worker that consumes a given queue starts, once its pool has forked, a
thread with its own ZooKeeper client (retried while ZooKeeper is not there
yet). The thread runs its check at once and then every ``interval``
seconds; a failing check is logged and tried again at the next tick, never
stopping the worker. Subclasses of :class:`TickerStep` say which queue,
and build the check from the settings and the client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import bootsteps

from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings
from scheduler.zk import client as zk_client
from scheduler.zk.errors import ZooKeeperError
from workers.bootsteps import worker_queues

log = logging.getLogger(__name__)

# what a check did, for the log ("" or falsy: nothing worth a line)
Check = Callable[[], object]


class Ticker:
    """Runs ``check`` every ``interval`` seconds in a daemon thread until stopped."""

    def __init__(
        self,
        name: str,
        check: Check,
        interval: float,
        closing: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.check = check
        self.interval = interval
        # run on the thread once it stops ticking (give up locks, leave memberships)
        self.closing = closing
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"sluice-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    def run(self) -> None:
        while not self.stopping.is_set():
            started = time.monotonic()
            try:
                report = self.check()
                if report:
                    log.info("%s: %s", self.name, report)
            except (ZooKeeperError, OSError) as exc:
                log.warning("%s: %s (trying again)", self.name, exc)
            except Exception:  # a process boundary: log and keep ticking
                log.exception("%s: unexpected error (trying again)", self.name)
            self.stopping.wait(max(0.05, self.interval - (time.monotonic() - started)))
        if self.closing is not None:
            try:
                self.closing()
            except Exception:  # stopping anyway: the session's end frees what is left
                log.exception("%s: closing failed", self.name)


class TickerStep(bootsteps.StartStopStep):
    """Starts a :class:`Ticker` in workers that consume :attr:`queue`."""

    requires = ("celery.worker.components:Pool",)
    queue = ""
    name = ""

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.running: Ticker | None = None
        self.client: zk_client.ZooKeeperClient | None = None
        self.stopped = threading.Event()

    def make_ticker(self, settings: Settings, client: zk_client.ZooKeeperClient) -> Ticker:
        raise NotImplementedError

    def start(self, worker: Any) -> None:
        if self.queue not in worker_queues(worker):
            return
        threading.Thread(target=self._start, name=f"sluice-{self.name}-start", daemon=True).start()

    def _start(self) -> None:
        settings = load_settings()
        for delay in (1, 2, 5, 10, 30):
            try:
                self.client = zk_client.connect(settings.zookeeper)
                break
            except (ZooKeeperError, OSError) as exc:
                log.warning("%s: no ZooKeeper yet (%s); again in %ds", self.name, exc, delay)
                if self.stopped.wait(delay):
                    return
        else:
            log.error("%s: not started: ZooKeeper unreachable", self.name)
            return
        if self.stopped.is_set():
            return
        self.running = self.make_ticker(settings, self.client)
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
                log.debug("closing the %s's client", self.name, exc_info=True)
            self.client = None

    shutdown = stop
