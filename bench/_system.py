"""What bench/throughput.py needs around a whole Sluice: services, counters, SQL.

The end-to-end system itself is the tests' :class:`tests.e2e.system.SluiceSystem`
(real git repositories, real ``celery worker`` processes); this module adds
what a benchmark needs around it: a ZooKeeper and a Redis of its own on free
ports, a fresh chroot and state dir per phase, the server's ``mntr``
counters, the CPU time of process trees, and the SQL rows of a run with
their full timestamps (the CLI prints them to the second).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import create_engine, select
from sqlalchemy.exc import OperationalError

from cli.stack import process
from cli.stack.process import start_on_free_port
from cli.stack.redis import RedisServer
from cli.stack.zookeeper import ZooKeeperServer, four_letter
from scheduler.reporting.models import BuildRow, BuildsetRow
from tests.e2e.system import SluiceSystem
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.workers import (
    PASSED_THROUGH,
    ServiceEnvironment,
    WorkerFactory,
    WorkerProcess,
)

# A benchmark killed from outside leaves no ZooKeeper or Redis behind.
process.children_die_with_parent()

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Services:
    """A ZooKeeper and a Redis server under ``base``, started and stopped together."""

    def __init__(self, base: Path) -> None:
        self.base = base
        # Not started: start() makes the servers that run, each on a port free
        # at the time; these let stop() run whatever start() got to.
        self.zookeeper = ZooKeeperServer(data_dir=base / "zookeeper", port=0)
        self.redis = RedisServer(data_dir=base / "redis", port=0)

    def start(self) -> None:
        base = self.base
        self.zookeeper = start_on_free_port(
            lambda port: ZooKeeperServer(data_dir=base / "zookeeper", port=port), timeout=60
        )
        self.redis = start_on_free_port(
            lambda port: RedisServer(data_dir=base / "redis", port=port), timeout=30
        )

    def stop(self) -> None:
        self.redis.stop()
        self.zookeeper.stop()

    def pids(self) -> list[int]:
        return [p for p in (self.zookeeper.proc_pid, self.redis.proc_pid) if p is not None]

    def mntr(self) -> dict[str, float]:
        """The ZooKeeper server's numeric ``mntr`` counters."""
        text = four_letter(self.zookeeper.host, self.zookeeper.port, "mntr")
        counters: dict[str, float] = {}
        for line in text.splitlines():
            key, _, value = line.partition("\t")
            try:
                counters[key.strip()] = float(value)
            except ValueError:
                continue
        return counters

    def written(self, counters: dict[str, float]) -> float:
        """Bytes of znode data written, by the server's per-namespace counters."""
        return sum(
            v
            for k, v in counters.items()
            if k.startswith("zk_sum_") and k.endswith("_write_per_namespace")
        )

    def system(self, tag: str, session_timeout: float = 10.0) -> Phase:
        """A fresh chroot, state dir and flushed broker for one phase of the bench."""
        root = self.base / tag
        state = root / "state"
        state.mkdir(parents=True)
        client = redis.Redis.from_url(self.redis.url)
        client.flushall()
        client.close()
        target = ZooKeeperTarget(server=self.zookeeper, root=f"/bench-{uuid.uuid4().hex[:8]}")
        environment = ServiceEnvironment(
            zookeeper=target,
            redis_url=self.redis.url,
            state_dir=state,
            session_timeout=session_timeout,
        )
        factory = WorkerFactory(environment)
        return Phase(SluiceSystem(environment, factory, root), factory)


@dataclass
class Phase:
    system: SluiceSystem
    factory: WorkerFactory

    def stop(self) -> None:
        self.factory.stop_all()

    def use_environment(self) -> None:
        """Point this process's settings (``load_settings``, dispatch) at the phase."""
        for key in [k for k in os.environ if k.startswith("SLUICE_")]:
            if key not in PASSED_THROUGH:  # a trace or profile folder is kept
                del os.environ[key]
        os.environ.update(self.system.env())

    @property
    def database(self) -> Path:
        return self.system.environment.state_dir / "sluice.db"

    def reported(self, refs: Iterable[str]) -> int:
        """How many of ``refs`` have a reported buildset: one cheap query.

        The benchmarks poll this while they measure, so it must not take the
        CPU the system under test needs: plain sqlite3, read-only, one
        count, where :meth:`rows` builds an engine and decodes every row.
        """
        wanted = sorted(set(refs))
        if not self.database.exists() or not wanted:
            return 0
        marks = ", ".join("?" * len(wanted))
        query = (
            f"SELECT COUNT(DISTINCT ref) FROM {BuildsetRow.__tablename__}"
            f" WHERE result IS NOT NULL AND ref IN ({marks})"
        )
        try:
            conn = sqlite3.connect(f"{self.database.as_uri()}?mode=ro", uri=True)
            try:
                return int(conn.execute(query, wanted).fetchone()[0])
            finally:
                conn.close()
        except sqlite3.OperationalError:  # no tables yet, or the file is being made
            return 0

    def rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every build and buildset reported so far (empty before the first report)."""
        if not self.database.exists():
            return [], []
        engine = create_engine(f"sqlite:///{self.database}")
        try:
            with engine.connect() as conn:
                builds = [dict(r) for r in conn.execute(select(BuildRow.__table__)).mappings()]
                sets = [dict(r) for r in conn.execute(select(BuildsetRow.__table__)).mappings()]
        except OperationalError:  # the reporter has not created its tables yet
            return [], []
        finally:
            engine.dispose()
        return builds, sets


def epoch(value: datetime | str | None) -> float | None:
    """Seconds since the epoch of a SQL timestamp (stored as UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    found = [pid]
    for child in _children(pid):
        found += tree(child)
    return found


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in threads:
        try:
            kids += [int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return kids


def cpu_seconds(roots: Iterable[int]) -> float:
    """CPU time (user+system, with reaped children's) of the trees under ``roots``."""
    ticks = 0
    for root in roots:
        for pid in tree(root):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            # utime stime cutime cstime: fields 14-17 of stat(5), 12-15 after the name
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLOCK_TICKS


def worker_pids(workers: Iterable[WorkerProcess]) -> list[int]:
    return [w.pid for w in workers if process.is_alive(w.pid)]
