"""What a long benchmark samples while it runs: memory per component, ZooKeeper, Redis.

:class:`Sampler` is a thread that every ``interval`` seconds reads, for
each named component (a process tree), its memory (the proportional set
size from ``/proc/<pid>/smaps_rollup``, the resident size where that is
not readable), and the ZooKeeper server's ``mntr`` counters and Redis's
``used_memory``. :func:`fsync_ceiling` is the disk's bound on ZooKeeper's
transaction log: fsyncs per second of a small append loop in a folder.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis
from _system import Services, tree


def memory_kb(pid: int) -> int:
    """kB of ``pid``'s memory: its Pss, or its VmRSS if smaps_rollup cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_memory_kb(pid: int) -> int:
    return sum(memory_kb(p) for p in tree(pid))


@dataclass(frozen=True)
class Sample:
    at: float
    # component -> kB (Pss summed over its process tree)
    memory: dict[str, int]
    mntr: dict[str, float]
    redis_used: int


@dataclass
class Sampler:
    """Samples of ``components`` (name -> the root pids of its trees) and the services."""

    services: Services
    components: Callable[[], dict[str, list[int]]]
    interval: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        memory = {
            name: sum(tree_memory_kb(pid) for pid in pids)
            for name, pids in self.components().items()
        }
        try:
            mntr = self.services.mntr()
        except OSError:
            mntr = {}
        client = redis.Redis.from_url(self.services.redis.url)
        try:
            used = int(client.info("memory").get("used_memory", 0))
        except redis.RedisError:
            used = 0
        finally:
            client.close()
        self.samples.append(Sample(time.time(), memory, mntr, used))

    def within(self, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples if start <= s.at <= end]

    def peak(self, key: str) -> float:
        return max((s.mntr.get(key, 0.0) for s in self.samples), default=0.0)


def fsync_ceiling(folder: Path, seconds: float = 2.0) -> float:
    """fsyncs/s of 512-byte appends to a file in ``folder`` (a transaction log's pattern)."""
    path = folder / f"fsync-probe-{os.getpid()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    count = 0
    try:
        block = b"x" * 512
        end = time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < end:
            os.write(fd, block)
            os.fsync(fd)
            count += 1
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return count / elapsed
