"""The scheduler's per-process runtime: its ZooKeeper client, layouts, formats, reporters.

Built lazily in each worker process (after the fork) and kept for the life
of the process; the layouts validate themselves against ZooKeeper before
every use, so keeping them is safe (DESIGN.md invariant 1).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from scheduler import dispatch
from scheduler.layouts import LayoutManagerSource, TenantLayouts
from scheduler.layouts.source import ProjectsNeeded
from scheduler.processing.environment import Environment, Nudge
from scheduler.processing.formats import WireFormats
from scheduler.processing.reporters import HistoryReporter
from scheduler.reporting import LogReporter, ReporterSet, SqlReporter, open_database
from scheduler.settings import Settings, load_settings
from scheduler.zk.client import process_client
from workers.merger.cache import RepoCache

# pid -> runtime: a process never uses a runtime built before its fork
_runtimes: dict[int, tuple[Environment, TenantLayouts]] = {}
_settings: dict[int, Settings] = {}


def _connection_of(layouts: TenantLayouts) -> Callable[[str, str], str]:
    def connection_of(tenant: str, project: str) -> str:
        for entry in layouts.get(tenant).tenant.projects:
            if entry.name == project:
                return entry.connection
        raise LookupError(f"tenant {tenant!r} has no project {project!r}")

    return connection_of


def _nudge(settings: Settings) -> Nudge:
    def nudge(task: str, args: Sequence[Any], queue: str | None) -> None:
        options = {"queue": queue} if queue else {}
        dispatch.send(task, *args, settings=settings, **options)

    return nudge


def build(settings: Settings) -> tuple[Environment, TenantLayouts]:
    client = process_client(settings.zookeeper)
    layouts = TenantLayouts(client)
    cache = RepoCache.from_settings(settings)
    formats = WireFormats(
        _connection_of(layouts),
        lambda conn, project: str(cache.repo_path(conn, project)),
        ProjectsNeeded(layouts.get),
        lambda tenant, project, branch: layouts.get(tenant).layout.merge_mode(project, branch),
    )
    engine = open_database(settings.database_url)
    reporters = [HistoryReporter(ReporterSet([SqlReporter(engine), LogReporter()]))]
    env = Environment(client, LayoutManagerSource(layouts), formats, _nudge(settings), reporters)
    return env, layouts


def runtime_settings() -> Settings:
    """This process's settings (read once per process)."""
    pid = os.getpid()
    if pid not in _settings:
        _settings.clear()
        _settings[pid] = load_settings()
    return _settings[pid]


def runtime() -> tuple[Environment, TenantLayouts]:
    """This process's runtime (created on first use after a fork)."""
    pid = os.getpid()
    if pid not in _runtimes:
        _runtimes.clear()
        _runtimes[pid] = build(runtime_settings())
    return _runtimes[pid]
