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

from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import Settings
from scheduler.zk.client import ZooKeeperClient
from workers.launcher.launcher import Launcher, RequestNudges
from workers.ticker import Ticker, TickerStep

log = logging.getLogger(__name__)

LAUNCHER_QUEUE = "launcher"


class LauncherStep(TickerStep):
    """The launcher's tick (:meth:`Launcher.check`), in workers that consume ``launcher``."""

    label = "Sluice launcher"
    queue = LAUNCHER_QUEUE
    name = "launcher"

    def make_ticker(self, settings: Settings, client: ZooKeeperClient) -> Ticker:
        launcher = Launcher(settings, client)
        interval = settings.nodes.check_interval
        nudges = RequestNudges(every=max(2.0, 3 * interval))

        def nudge(request_id: str) -> None:
            dispatch.send(task_names.LAUNCH, request_id, settings=settings, queue=LAUNCHER_QUEUE)

        log.info("launcher %s: checking every %.0fs", launcher.id, interval)
        return Ticker("launcher", lambda: launcher.check(nudge, nudges), interval)
