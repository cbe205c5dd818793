"""The gatherers' bootstep: git pollers and the timer on a ``maintenance`` worker's thread.

The gatherers decide (:mod:`scheduler.drivers.gathering`); the ticker
thread and its start and stop with the worker are the hands'
(:class:`workers.ticker.TickerStep`). This step puts the two together.
"""

from __future__ import annotations

import time

from scheduler.drivers.gathering import TICK, Gatherers
from scheduler.settings.sections import Settings
from scheduler.zk.client import ZooKeeperClient
from workers.ticker import Ticker, TickerStep


class GatherersStep(TickerStep):
    """Git pollers and the timer generator, in workers that consume ``maintenance``.

    Its own ZooKeeper client's session holds the member nodes and the locks.
    """

    label = "Sluice gatherers"
    queue = "maintenance"
    name = "gatherers"

    def make_ticker(self, settings: Settings, client: ZooKeeperClient) -> Ticker:
        gatherers = Gatherers(settings, client)
        return Ticker(
            "gatherers", lambda: gatherers.tick(time.time()), TICK, closing=gatherers.close
        )
