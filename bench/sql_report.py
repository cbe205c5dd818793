"""CPU per finished item reported to SQL: the four moments one by one beside ``record_item``.

Records ``--items`` finished items of three builds each (a buildset's start,
each build's start and end, the buildset's end: what the scheduler reports
when an item leaves its pipeline) into a fresh database, in alternating
rounds of each way:

* per event: ``record_buildset_start``, ``record_build_start`` and
  ``record_build_end`` for each build, ``record_buildset_end``; a
  transaction each (what a reporter without ``record_item`` gets);
* ``record_item``: the item's whole report in one transaction, as the
  scheduler writes it (``scheduler/reporting/sql.py``).

Prints the median over the rounds of this process's CPU per item (its
process time: on SQLite that includes the database's own work), the wall
time, the statements sent per item, and those compiled afresh after a
warm-up (statements SQLAlchemy could not take from its cache: 0 when every
statement is cached). With ``--url`` of a PostgreSQL database, the
rows go to a schema of their own in it (dropped afterwards) and the
server's CPU per item is printed too (its backend's ``/proc`` stat, 10 ms
ticks: hence many items a round).

Run by hand (``.venv/bin/python bench/sql_report.py [--url postgresql+psycopg://...]``);
``--smoke`` runs it small, as ``tests/bench/test_smoke.py`` does in CI. To
set an older ``record_item`` beside today's, run this file in a worktree of
that commit (``git worktree add``): it calls only the public functions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import CacheStats
from sqlalchemy.pool import NullPool

from bench._system import cpu_seconds
from scheduler.model.results import Result
from scheduler.reporting import (
    BuildEnd,
    BuildInfo,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
    ItemReport,
    RefInfo,
    create_database_engine,
    ensure_schema,
    record_build_end,
    record_build_start,
    record_buildset_end,
    record_buildset_start,
)
from scheduler.reporting.sql import record_item

JOBS = ("lint", "unit", "docs")
T0 = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def item_report(prefix: str, n: int) -> ItemReport:
    """A finished item of three builds, as the scheduler's ``HistoryReporter`` makes it."""
    name = f"{prefix}-{n}"
    info = BuildsetInfo(
        uuid=uuid.uuid4().hex,
        tenant="demo",
        pipeline="check",
        ref=RefInfo("org/app", "main", f"refs/heads/{name}", f"refs/heads/{name}", newrev="a" * 40),
        event_id=uuid.uuid4().hex,
    )
    started = T0 + timedelta(seconds=n)
    builds = []
    for i, job in enumerate(JOBS):
        build = BuildInfo(uuid.uuid4().hex, job)
        begun, done = started + timedelta(seconds=1 + i), started + timedelta(seconds=9 + i)
        builds.append(
            (
                BuildStart(info, build, begun, executor="executor-1"),
                BuildEnd(
                    info,
                    build,
                    Result.SUCCESS,
                    done,
                    start_time=begun,
                    log_url=f"https://logs.example/{build.uuid}/",
                    result_data={"zuul": {"log_url": f"https://logs.example/{build.uuid}/"}},
                ),
            )
        )
    end = BuildsetEnd(info, Result.SUCCESS, "Build succeeded.", started + timedelta(seconds=20))
    return ItemReport(BuildsetStart(info, started), tuple(builds), end)


def per_event(engine: Engine, report: ItemReport) -> None:
    record_buildset_start(engine, report.start)
    for start, end in report.builds:
        if start is not None:
            record_build_start(engine, start)
        record_build_end(engine, end)
    record_buildset_end(engine, report.end)


WAYS: dict[str, Callable[[Engine, ItemReport], None]] = {
    "per event": per_event,
    "record_item": record_item,
}


@dataclass
class Round:
    cpu_ms: float  # this process, per item
    wall_ms: float
    server_ms: float | None  # the PostgreSQL backend, per item
    statements: float  # per item
    compiled: int  # statements compiled afresh (not taken from the cache)


class Statements:
    """Counts the statements an engine sends, and those it had to compile."""

    def __init__(self, engine: Engine) -> None:
        self.sent = self.compiled = 0
        event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        _params, context, _many = rest
        if context is None or context.compiled is None:
            return  # the driver's own SQL (SQLite's BEGIN IMMEDIATE)
        self.sent += 1
        if context.cache_hit is not CacheStats.CACHE_HIT:
            self.compiled += 1


def backend_pid(engine: Engine) -> int | None:
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


def measure(
    way: Callable[[Engine, ItemReport], None],
    engine: Engine,
    reports: list[ItemReport],
    statements: Statements,
    server: int | None,
) -> Round:
    sent, compiled = statements.sent, statements.compiled
    server_before = cpu_seconds([server]) if server else 0.0
    cpu, wall = time.process_time(), time.perf_counter()
    for report in reports:
        way(engine, report)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    per_item = 1000 / len(reports)
    return Round(
        cpu * per_item,
        wall * per_item,
        (cpu_seconds([server]) - server_before) * per_item if server else None,
        (statements.sent - sent) / len(reports),
        statements.compiled - compiled,
    )


@contextmanager
def fresh_database(url: str | None) -> Iterator[Engine]:
    """An engine on an empty database at the schema's head: a SQLite file, or a
    schema of its own in the PostgreSQL database of ``url``."""
    if url is None:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-sql-") as base:
            engine = create_database_engine(f"sqlite:///{base}/sluice.db")
            yield _migrated(engine)
            engine.dispose()
        return
    schema = f"sluice_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(url, poolclass=NullPool)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        scoped = admin.url.update_query_dict({"options": f"-csearch_path={schema}"})
        engine = create_database_engine(scoped.render_as_string(hide_password=False))
        yield _migrated(engine)
        engine.dispose()
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def _migrated(engine: Engine) -> Engine:
    ensure_schema(engine.url.render_as_string(hide_password=False), engine=engine)
    return engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=500, help="items a round and a way")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--url", help="a PostgreSQL database (default: a fresh SQLite file)")
    parser.add_argument("--smoke", action="store_true", help="20 items, 2 rounds (CI)")
    args = parser.parse_args()
    if args.url and make_url(args.url).get_backend_name() != "postgresql":
        parser.error("--url: a PostgreSQL database (SQLite is the default)")
    items, rounds = (20, 2) if args.smoke else (args.items, args.rounds)
    figures: dict[str, list[Round]] = {name: [] for name in WAYS}
    with fresh_database(args.url) as engine:
        statements = Statements(engine)
        server = backend_pid(engine)
        for name, way in WAYS.items():  # warm: statements compiled, connection open
            for n in range(5):
                way(engine, item_report(f"warm-{name}", n))
        for r in range(rounds):
            for name, way in WAYS.items():
                reports = [item_report(f"{name}-{r}", n) for n in range(items)]
                figures[name].append(measure(way, engine, reports, statements, server))
        backend = engine.dialect.name
    medians = {
        name: Round(
            statistics.median(f.cpu_ms for f in got),
            statistics.median(f.wall_ms for f in got),
            statistics.median(f.server_ms or 0.0 for f in got) if server else None,
            statistics.median(f.statements for f in got),
            sum(f.compiled for f in got),
        )
        for name, got in figures.items()
    }
    ours = medians["record_item"]
    print(f"{backend}: an item of {len(JOBS)} builds, {items} a round, median of {rounds} rounds")
    server_head = f" {'server ms':>9} {'x item':>7}" if server else ""
    print(
        f"  {'':12} {'CPU ms':>7} {'x item':>7} {'wall ms':>8}{server_head}"
        f" {'statements':>10} {'compiled':>8}"
    )
    for name, got in medians.items():
        line = f"  {name:12} {got.cpu_ms:7.3f} {got.cpu_ms / ours.cpu_ms:7.2f} {got.wall_ms:8.3f}"
        if got.server_ms is not None and ours.server_ms:
            line += f" {got.server_ms:9.3f} {got.server_ms / ours.server_ms:7.2f}"
        elif server:
            line += f" {got.server_ms or 0.0:9.3f} {'-':>7}"
        print(f"{line} {got.statements:10.1f} {got.compiled:8d}")


if __name__ == "__main__":
    main()
