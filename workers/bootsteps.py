"""Celery worker bootsteps: the worker's place in the component registry, its resources.

Two steps join the worker's blueprint (``tasks/app.py``), in the manner of
Celery's own ``heart`` step:

* :class:`Registration` registers the worker in ZooKeeper's component
  registry (``/components/<kind>/<host>-<sequence>``, ephemeral) with its
  host, pid, node name, queues, version, state and start time, and
  refreshes it every :data:`REFRESH` seconds from the worker's timer (a
  registration lost with its session is made again). Registering never
  holds up the worker: it happens on a thread, and a ZooKeeper that cannot
  be reached is tried again at the next refresh. On a clean stop the state
  becomes ``stopping`` and the node is removed; a killed worker's node
  vanishes with its session, within the session timeout.
* :class:`Resources` closes the worker's per-process resources when it
  stops: ZooKeeper clients and SQL engines. They are created lazily in the
  process that uses them (after a prefork child's fork, never inherited:
  ``tasks/app.py`` drops inherited clients in ``worker_process_init``).

The kind of a worker is that of its queues: ``scheduler``, ``merger``,
``executor`` (any ``executor.<zone>`` too), ``maintenance``, ``builder``,
``launcher``; a worker that consumes several kinds of queue registers as ``worker`` (its queues say
which).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from importlib import metadata
from typing import Any

from celery import bootsteps

from scheduler import processlocal
from scheduler.settings.load import load_settings
from scheduler.stores.components import Component, register
from scheduler.zk import client as zk_client
from scheduler.zk.errors import ZooKeeperError

log = logging.getLogger(__name__)

# Seconds between refreshes of the registration (and retries after a failure).
REFRESH = 10.0


def version() -> str:
    try:
        return metadata.version("sluice")
    except metadata.PackageNotFoundError:
        return "unknown"


def kind_of(queues: list[str]) -> str:
    """The component kind of a worker consuming ``queues``."""
    kinds = {"executor" if q.startswith("executor") else q for q in queues}
    known = kinds & {"scheduler", "merger", "executor", "maintenance", "builder", "launcher"}
    if len(known) == 1 and known == kinds:
        return known.pop()
    return "worker"


def _queues(worker: Any) -> list[str]:
    consumer = getattr(worker, "consumer", None)
    task_consumer = getattr(consumer, "task_consumer", None)
    names = [q.name for q in getattr(task_consumer, "queues", ())]
    if not names:
        names = list(getattr(worker.app.amqp.queues, "consume_from", None) or {})
    return sorted(names)


def worker_queues(worker: Any) -> list[str]:
    """The queues ``worker`` consumes (for steps that run only in some workers)."""
    return _queues(worker)


class Registration(bootsteps.StartStopStep):
    """The worker's entry in the component registry."""

    # after the pool: its children are forked before this step's client exists
    requires = ("celery.worker.components:Timer", "celery.worker.components:Pool")
    label = "Sluice registration"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.component: Component | None = None
        self.client: zk_client.ZooKeeperClient | None = None
        self.timer_ref: Any = None
        self.since = time.time()
        self.lock = threading.Lock()

    def start(self, worker: Any) -> None:
        self.since = time.time()
        threading.Thread(
            target=self.refresh, args=(worker,), name="sluice-registration", daemon=True
        ).start()
        self.timer_ref = worker.timer.call_repeatedly(REFRESH, self.refresh, (worker,))

    def refresh(self, worker: Any) -> None:
        """Register, or write the registration again (new node after a lost session)."""
        with self.lock:
            try:
                if self.component is None:
                    self.client = zk_client.connect(load_settings().zookeeper)
                    queues = _queues(worker)
                    self.component = register(
                        self.client,
                        kind_of(queues),
                        version=version(),
                        handles=tuple(queues),
                        node=str(getattr(worker, "hostname", socket.gethostname())),
                        queues=queues,
                        since=self.since,
                    )
                    log.info("registered as %s", self.component.path)
                else:
                    self.component.update(state="running")
            except (ZooKeeperError, OSError) as exc:
                log.warning(
                    "component registration failed (tried again in %.0fs): %s", REFRESH, exc
                )
                self._close()

    def stop(self, worker: Any) -> None:
        if self.timer_ref is not None:
            self.timer_ref.cancel()
            self.timer_ref = None
        with self.lock:
            if self.component is not None:
                try:
                    self.component.update(state="stopping")
                    self.component.unregister()
                except (ZooKeeperError, OSError) as exc:
                    log.warning("could not unregister (the session's end removes it): %s", exc)
            self._close()

    shutdown = stop

    def _close(self) -> None:
        client, self.client, self.component = self.client, None, None
        if client is not None:
            try:
                client.stop()
                client.close()
            except Exception:
                log.debug("closing the registration client", exc_info=True)


class Resources(bootsteps.StartStopStep):
    """Closes the worker process's own resources when it stops.

    Its ZooKeeper clients, SQL engines, runtime and repo cache are
    :class:`~scheduler.processlocal.ProcessLocal` values: made on first use,
    forgotten in a forked pool child, closed here.
    """

    label = "Sluice resources"

    def stop(self, worker: Any) -> None:
        processlocal.close_all()

    shutdown = stop
