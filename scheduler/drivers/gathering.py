"""Active event gathering in maintenance workers: git pollers and the timer generator.

Polling needs what a Celery task cannot keep: a session that lives as long
as the worker, an ephemeral membership node and partition locks held
between polls. So every worker that consumes the ``maintenance`` queue
runs one :class:`Gatherers`, ticked every :data:`TICK` seconds on a thread
beside its Celery consumer (``tasks/gathering.py``, a worker bootstep):

* **pollers** (seed 002, qdo): for every git connection with a
  ``poll_delay``, the worker is a member under
  ``/connections/<c>/pollers/members/``; once the member list has been stable
  for a few seconds it computes its share of the connection's
  ``poll_partitions``, gives up the partitions no longer its own, takes the
  lock of each new one (never polling a partition whose lock it does not
  hold), and announces what it handles in its member node. Each held
  partition is polled every ``poll_delay`` seconds
  (:mod:`scheduler.drivers.git.poller`). A killed member's locks go with its
  session; the others rebalance and continue from the stored offsets.
* **timer**: the worker that holds ``/timer/lock`` (an election: whoever
  takes the lock) fires periodic pipelines (:mod:`scheduler.drivers.timer`).

Events go to ZooKeeper first; only then is the scheduler nudged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.drivers import timer
from scheduler.drivers.git import poller
from scheduler.layouts import TenantLayout, TenantLayouts
from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import ConnectionSettings, Settings
from scheduler.zk import locks, members, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ZooKeeperError
from scheduler.zk.locks import HeldLock

log = logging.getLogger(__name__)

# Seconds between two looks at membership, locks and timers.
TICK = 1.0


def polled(settings: Settings) -> list[ConnectionSettings]:
    """The git connections that poll (``poll_delay`` > 0)."""
    return [
        c
        for _, c in sorted(settings.connections.items())
        if c.driver == "git" and float(c.options.get("poll_delay", 0)) > 0
    ]


@dataclass
class ConnectionPoller:
    """This worker's share of one connection's polling."""

    client: ZooKeeperClient
    connection: ConnectionSettings
    layouts: TenantLayouts
    nudge: Callable[[str], None]
    membership: members.Membership = field(init=False)
    held: dict[int, HeldLock] = field(default_factory=dict)
    last_poll: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        root = paths.poller_members(self.connection.name)
        self.membership = members.Membership(self.client, root)
        self.membership.register()

    @property
    def partitions(self) -> int:
        return int(self.connection.options.get("poll_partitions", 1))

    @property
    def delay(self) -> float:
        return float(self.connection.options.get("poll_delay", 0))

    def tick(self, now: float) -> None:
        self._drop_lost()
        self.membership.ensure(sorted(self.held))
        stable = self.membership.stable_members()
        if stable is not None:
            self._rebalance(members.assigned(stable, self.membership.name, self.partitions))
        for partition in sorted(self.held):
            if now - self.last_poll.get(partition, 0.0) >= self.delay:
                self.last_poll[partition] = now
                self._poll(partition)

    def _drop_lost(self) -> None:
        # A lock goes with its session; a connection only suspended keeps it
        # (polls fail meanwhile: their writes are fenced).
        for partition, held in list(self.held.items()):
            if held.context.generation != self.client.session_generation:
                log.warning(
                    "poller %s/%d: lock lost with the session", self.connection.name, partition
                )
                del self.held[partition]

    def _rebalance(self, mine: list[int]) -> None:
        for partition in [p for p in self.held if p not in mine]:
            self.held.pop(partition).release()
            log.info("poller %s: gave up partition %d", self.connection.name, partition)
        for partition in (p for p in mine if p not in self.held):
            path = paths.poller_partition_lock(self.connection.name, partition)
            held = locks.acquire(self.client, path, blocking=False, identifier=self.membership.name)
            if held is not None:  # else its old owner still has it: try at the next tick
                self.held[partition] = held
                log.info("poller %s: took partition %d", self.connection.name, partition)
        self.membership.announce(sorted(self.held))

    def _poll(self, partition: int) -> None:
        states = self.layouts.all_states()
        projects = [
            p
            for p in poller.projects_of(states, self.connection.name)
            if poller.partition_of(p, self.partitions) == partition
        ]
        result = poller.poll_partition(
            self.client, self.held[partition], self.connection, partition, projects
        )
        if result.events:
            self.nudge(self.connection.name)

    def close(self) -> None:
        for held in self.held.values():
            held.release()
        self.held.clear()
        self.membership.leave()


class Gatherers:
    """This worker's pollers and its part in the timer election, ticked every second."""

    def __init__(self, settings: Settings, client: ZooKeeperClient) -> None:
        self.settings = settings
        self.client = client
        self.layouts = TenantLayouts(client)
        self.pollers: list[ConnectionPoller] = []
        self.timer_lock: HeldLock | None = None
        # the layout states the timer last looked at, and their layouts
        self._seen_layouts: tuple[tuple[tuple[str, str, int], ...], list[TenantLayout]] = ((), [])

    def tick(self, now: float) -> None:
        if not self.pollers:
            self.pollers = [
                ConnectionPoller(self.client, c, self.layouts, self._nudge_connection)
                for c in polled(self.settings)
            ]
        for connection in self.pollers:
            connection.tick(now)
        self._timer(now)

    def _timer(self, now: float) -> None:
        held = self.timer_lock
        if held is not None and held.context.generation != self.client.session_generation:
            self.timer_lock = None
        if self.timer_lock is None:
            self.timer_lock = locks.acquire(self.client, paths.timer_lock(), blocking=False)
            if self.timer_lock is None:
                return
            log.info("timer: this worker generates periodic events now")
        timer.fire_due(self.timer_lock, self._layouts(), self._nudge_pipeline, now)

    def _layouts(self) -> list[TenantLayout]:
        """Every tenant's layout, rebuilt only when a layout state changed (one read a tick)."""
        states = self.layouts.all_states()
        key = tuple((s.name, s.uuid, s.mzxid) for s in states)
        if key == self._seen_layouts[0]:
            return self._seen_layouts[1]
        found = []
        for state in states:
            try:
                found.append(self.layouts.get(state.name))
            except Exception as exc:  # one broken tenant never stops the others' timers
                log.warning("timer: tenant %s skipped: %s", state.name, exc)
        self._seen_layouts = (key, found)
        return found

    def _nudge_connection(self, connection: str) -> None:
        dispatch.send(task_names.FORWARD_CONNECTION_EVENTS, connection, settings=self.settings)

    def _nudge_pipeline(self, tenant: str, pipeline: str) -> None:
        dispatch.send(task_names.PROCESS_PIPELINE, tenant, pipeline, settings=self.settings)

    def close(self) -> None:
        for connection in self.pollers:
            with contextlib.suppress(ZooKeeperError, OSError):
                connection.close()
        if self.timer_lock is not None:
            with contextlib.suppress(ZooKeeperError, OSError):
                self.timer_lock.release()
