"""Durations many processes observe, kept as histograms in ZooKeeper for metrics.

Work runs in many worker processes, so a duration (how long an event waited
before a pipeline pass applied it; how long a merge took) is added to a
small document under ``/stats/timings/<name>`` with compare-and-set: a
count, a sum and cumulative bucket counts, which the metrics collector
turns into a Prometheus histogram. Recording is best-effort: a failure is
logged and the work that was measured is never held up by it.

The hot paths (every pipeline pass, every merge) do not write at once:
:func:`buffered` keeps one :class:`TimingsBuffer` per client (per process),
which flushes every :data:`FLUSH_SECONDS` from a timer thread, so a busy
worker pays one read and one compare-and-set per name every few seconds
instead of two requests per pass (issue 17: ZooKeeper requests per build).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ZooKeeperError
from scheduler.zk.retry import CONFLICT

log = logging.getLogger(__name__)

# Upper bounds in seconds (+Inf is implied).
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
EVENT_PROCESSING = "event-processing"
MERGE = "merge"
# How long a sample may wait in a process's buffer before it is written.
FLUSH_SECONDS = 2.0


@dataclass(frozen=True)
class Histogram:
    count: int
    total: float
    # cumulative counts, one per bound of BUCKETS
    buckets: tuple[int, ...]

    def with_samples(self, samples: Sequence[float]) -> Histogram:
        buckets = list(self.buckets)
        for value in samples:
            for index, bound in enumerate(BUCKETS):
                if value <= bound:
                    buckets[index] += 1
        return Histogram(self.count + len(samples), self.total + sum(samples), tuple(buckets))

    def to_dict(self) -> dict[str, object]:
        return {"count": self.count, "sum": self.total, "buckets": list(self.buckets)}

    @classmethod
    def empty(cls) -> Histogram:
        return cls(0, 0.0, (0,) * len(BUCKETS))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        buckets = [int(b) for b in data.get("buckets") or []]
        if len(buckets) != len(BUCKETS):  # written with other bounds: start again
            return cls.empty()
        return cls(int(data.get("count", 0)), float(data.get("sum", 0.0)), tuple(buckets))


def _path(name: str) -> str:
    return paths.join(paths.timings_root(), name)


def read(client: ZooKeeperClient, name: str) -> Histogram:
    try:
        raw, _ = client.get(_path(name))
    except NoNodeError:
        return Histogram.empty()
    return Histogram.from_dict(stored.decode(raw, _path(name)))


def names(client: ZooKeeperClient) -> list[str]:
    try:
        return sorted(client.get_children(paths.timings_root()))
    except NoNodeError:
        return []


def observe(client: ZooKeeperClient, name: str, samples: Sequence[float]) -> None:
    """Add ``samples`` (seconds) to histogram ``name``; never raises."""
    if not samples:
        return
    path = _path(name)
    try:
        for _ in CONFLICT.tries():
            try:
                raw, stat = client.get(path)
                current, version = Histogram.from_dict(stored.decode(raw, path)), stat.version
            except NoNodeError:
                current, version = Histogram.empty(), -1
            data = stored.encode(current.with_samples(samples).to_dict())
            try:
                if version < 0:
                    client.create(path, data, makepath=True)
                else:
                    client.set(path, data, version=version)
                return
            except (BadVersionError, NodeExistsError):
                continue  # another process recorded first: read again
        log.info("timings %s: too much contention; %d samples not recorded", name, len(samples))
    except (ZooKeeperError, KazooException, ValueError) as exc:
        log.warning("timings %s: %d samples not recorded: %s", name, len(samples), exc)


class TimingsBuffer:
    """Samples of one process, written by a timer at most every ``interval`` seconds."""

    def __init__(self, client: ZooKeeperClient, interval: float = FLUSH_SECONDS) -> None:
        self.client = client
        self.interval = interval
        self._lock = threading.Lock()
        self._pending: dict[str, list[float]] = {}
        self._timer: threading.Timer | None = None

    def add(self, name: str, samples: Sequence[float]) -> None:
        """Keep ``samples``; the timer (started by the first) writes them."""
        if not samples:
            return
        with self._lock:
            self._pending.setdefault(name, []).extend(samples)
            if self._timer is None:
                self._timer = threading.Timer(self.interval, self.flush)
                self._timer.daemon = True
                self._timer.name = "timings-flush"
                self._timer.start()

    def flush(self) -> None:
        """Write what is pending now (also called by the timer); never raises."""
        with self._lock:
            pending, self._pending = self._pending, {}
            self._timer = None
        for name, samples in pending.items():
            observe(self.client, name, samples)


_buffers: weakref.WeakKeyDictionary[ZooKeeperClient, TimingsBuffer] = weakref.WeakKeyDictionary()
_buffers_lock = threading.Lock()


def flush_all() -> None:
    """Write every buffer of this process now (a worker process's shutdown).

    Called before the process's clients close: a sample still waiting for
    the timer would otherwise be lost with the client (and the timer would
    log its failure).
    """
    with _buffers_lock:
        buffers = list(_buffers.values())
    for buffer in buffers:
        buffer.flush()


def buffered(client: ZooKeeperClient) -> TimingsBuffer:
    """The process's buffer for ``client`` (one per client, created on first use)."""
    with _buffers_lock:
        found = _buffers.get(client)
        if found is None:
            found = _buffers[client] = TimingsBuffer(client)
        return found
