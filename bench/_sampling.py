"""What a long benchmark samples while it runs: memory per component, ZooKeeper, Redis.

:class:`Sampler` is a thread that every ``interval`` seconds reads, for
each named component (a process tree), its memory (the proportional set
size from ``/proc/<pid>/smaps_rollup``, the resident size where that is
not readable) and its CPU time so far, the builds finished so far (when
given a count), and the ZooKeeper server's ``mntr`` counters and Redis's
``used_memory``. :func:`fsync_ceiling` is the disk's bound on ZooKeeper's
transaction log: fsyncs per second of a small append loop in a folder.
:func:`print_memory`, :func:`print_cpu` and :func:`print_zookeeper` print
what the samples say: each component's peak memory and its means in the
first and last fifth of a window, builds/s and each component's CPU per
build in each fifth, ZooKeeper's writes per second and its tree at the
peak and the end.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import redis
from _system import Services, cpu_seconds, tree
from throughput import FSYNCS, WRITES

ZNODES = "zk_znode_count"
DATA_SIZE = "zk_approximate_data_size"


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
    # component -> CPU seconds so far (its trees, reaped children included)
    cpu: dict[str, float] = field(default_factory=dict)
    builds: int = 0  # finished so far (the ``builds`` count given to the sampler)


@dataclass
class Sampler:
    """Samples of ``components`` (name -> the root pids of its trees) and the services."""

    services: Services
    components: Callable[[], dict[str, list[int]]]
    interval: float = 1.0
    builds: Callable[[], int] | None = None
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
        trees = self.components()
        memory = {name: sum(tree_memory_kb(pid) for pid in pids) for name, pids in trees.items()}
        cpu = {name: cpu_seconds(pids) for name, pids in trees.items()}
        try:
            builds = self.builds() if self.builds is not None else 0
        except Exception:  # a database being written: the previous count stands
            builds = self.samples[-1].builds if self.samples else 0
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
        self.samples.append(Sample(time.time(), memory, mntr, used, cpu, builds))

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


def print_memory(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    """Peak and each fifth's mean per component; the ratio of the last fifth's to the first's.

    The fifths between show whether a growth is a warm-up that levels off
    (bounded caches, a JVM heap sizing itself) or goes on with the day.
    """
    edges = [start + (end - start) * i / 5 for i in range(6)]
    fifths = [[s for s in samples if a <= s.at <= b] for a, b in itertools.pairwise(edges)]
    names = sorted({k for s in samples for k in s.memory})
    print("memory (MB, Pss summed over each process tree; each fifth of the day: its mean):")
    heads = " ".join(f"{f'{i + 1}/5':>7}" for i in range(5))
    print(f"  {'component':10} {'peak':>7} {heads} {'last/first':>11}")
    ratios = {}
    for name in names:
        peak = max(s.memory.get(name, 0) for s in samples) / 1024
        means = [_mean([s.memory.get(name, 0) for s in part]) / 1024 for part in fifths]
        ratios[name] = means[-1] / means[0] if means[0] else float("nan")
        cells = " ".join(f"{m:7.1f}" for m in means)
        print(f"  {name:10} {peak:7.1f} {cells} {ratios[name]:>10.2f}x")
    return ratios


def print_cpu(samples: list[Sample], start: float, end: float) -> None:
    """Builds/s and each component's CPU ms per build finished, in each fifth of the window.

    A cost per build that grows from the first fifth to the last is work
    that grows with what the system holds (queues, history, trees), not with
    what arrives.
    """
    inside = [s for s in samples if start <= s.at <= end]
    if len(inside) < 6:
        return
    names = sorted({k for s in inside for k in s.cpu})
    edges = [start + (end - start) * i / 5 for i in range(6)]
    marks = [_nearest(inside, at) for at in edges]
    print("CPU per build finished, by fifth of the day (ms; builds/s in the fifth):")
    print(f"  {'component':10} " + " ".join(f"{f'{i + 1}/5':>8}" for i in range(5)))
    fifths = list(itertools.pairwise(marks))
    rates = [(b.builds - a.builds) / max(b.at - a.at, 1e-9) for a, b in fifths]
    print(f"  {'builds/s':10} " + " ".join(f"{r:8.1f}" for r in rates))
    for name in [*names, "all"]:
        cells = []
        for a, b in fifths:
            done = b.builds - a.builds
            if name == "all":
                used = sum(b.cpu.get(n, 0.0) - a.cpu.get(n, 0.0) for n in names)
            else:
                used = b.cpu.get(name, 0.0) - a.cpu.get(name, 0.0)
            cells.append(f"{used * 1000 / done:8.1f}" if done > 0 else f"{'-':>8}")
        print(f"  {name:10} " + " ".join(cells))


def _nearest(samples: list[Sample], at: float) -> Sample:
    return min(samples, key=lambda s: abs(s.at - at))


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def print_zookeeper(
    sampler: Sampler, before: Mapping[str, float], after: Mapping[str, float], wall: float
) -> None:
    writes = after.get(WRITES, 0.0) - before.get(WRITES, 0.0)
    fsyncs = after.get(FSYNCS, 0.0) - before.get(FSYNCS, 0.0)
    window = [s for s in sampler.samples if WRITES in s.mntr]
    peak = 0.0
    for i, a in enumerate(window):  # each 10 s (or more) between two samples
        b = next((b for b in window[i:] if b.at - a.at >= 10), None)
        if b is not None:
            peak = max(peak, (b.mntr[WRITES] - a.mntr[WRITES]) / (b.at - a.at))
    print(
        f"ZooKeeper: {writes / wall:.1f} writes/s mean ({writes:.0f}),"
        f" peak over 10 s {f'{peak:.1f}' if peak else 'n/a (a shorter run)'};"
        f" {fsyncs / wall:.1f} fsyncs/s"
    )
    for label, sample in (
        ("at the peak", max(sampler.samples, key=lambda s: s.mntr.get(ZNODES, 0.0))),
        ("at the end", sampler.samples[-1]),
    ):
        print(
            f"ZooKeeper {label}: {sample.mntr.get(ZNODES, 0):.0f} znodes,"
            f" {sample.mntr.get(DATA_SIZE, 0) / 1024:.0f} kB of data (what a snapshot holds)"
        )
