"""The scheduler's per-process runtime: its ZooKeeper client, layouts, formats, reporters.

Built lazily in each worker process (after the fork) and kept for the life
of the process; the layouts validate themselves against ZooKeeper before
every use, so keeping them is safe (docs/architecture.md invariant 1).

:func:`runtime_settings` is the process's settings, read once (parsing
``sluice.yaml`` again for every task cost ~2 ms of CPU per build and per
merge): the scheduler, executor, merger and system tasks use it. A worker
picks up a changed ``sluice.yaml`` or environment when it restarts, as it
always did for the broker and ZooKeeper connections.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scheduler.config.model import Pipeline
from scheduler.drivers.reporter import DRIVERS, ForgeReporter, ReporterConfig
from scheduler.layouts import LayoutManagerSource, TenantLayouts
from scheduler.layouts.source import ProjectsNeeded
from scheduler.nudge import dispatch, task_names
from scheduler.processing.environment import Environment, ItemReporter, Nudge
from scheduler.processing.formats import WireFormats
from scheduler.processing.reporters import HistoryReporter
from scheduler.processlocal import ProcessLocal
from scheduler.reporting import LogReporter, ReporterSet, SqlReporter, open_database
from scheduler.reporting.estimates import JobEstimates
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings
from scheduler.stores.autoholds import AutoholdIndex
from scheduler.zk.client import process_client
from workers.merger.cache import RepoCache

# A process never uses a runtime built before its fork.
_runtimes: ProcessLocal[str, tuple[Environment, TenantLayouts]] = ProcessLocal("runtime")
_settings: ProcessLocal[str, Settings] = ProcessLocal("settings")


def _connection_of(layouts: TenantLayouts) -> Callable[[str, str], str]:
    def connection_of(tenant: str, project: str) -> str:
        for entry in layouts.get(tenant).tenant.projects:
            if entry.name == project:
                return entry.connection
        raise LookupError(f"tenant {tenant!r} has no project {project!r}")

    return connection_of


def _nudge(settings: Settings) -> Nudge:
    def nudge(task: str, args: Sequence[Any], queue: str | None, /, label: str = "") -> None:
        options = {"queue": queue} if queue else {}
        dispatch.send(task, *args, settings=settings, label=label, **options)

    return nudge


def _nudge_later(settings: Settings) -> Callable[[str, str, float], None]:
    def nudge_later(tenant: str, pipeline: str, delay: float) -> None:
        dispatch.send(
            task_names.PROCESS_PIPELINE, tenant, pipeline, settings=settings, countdown=delay
        )

    return nudge_later


def _reporter_config(layouts: TenantLayouts) -> ReporterConfig:
    def config(tenant: str, pipeline: str) -> Pipeline | None:
        return layouts.get(tenant).layout.pipelines.get(pipeline)

    return config


def build(settings: Settings) -> tuple[Environment, TenantLayouts]:
    client = process_client(settings.zookeeper)
    layouts = TenantLayouts(client)
    cache = RepoCache.from_settings(settings)
    engine = open_database(settings.database_url)
    forge: ForgeReporter | None = None
    if any(c.driver in DRIVERS for c in settings.connections.values()):
        forge = ForgeReporter(settings.connections, _reporter_config(layouts), settings.web.url)
    formats = WireFormats(
        _connection_of(layouts),
        lambda conn, project: str(cache.repo_path(conn, project)),
        ProjectsNeeded(layouts.get),
        lambda tenant, project, branch: layouts.get(tenant).layout.merge_mode(project, branch),
        AutoholdIndex(client).wants,
        estimate=JobEstimates(engine).of,
        before_merge=forge.before_merge if forge else None,
    )
    reporters: list[ItemReporter] = [
        HistoryReporter(ReporterSet([SqlReporter(engine), LogReporter()]))
    ]
    if forge is not None:
        reporters.append(forge)
    managers = LayoutManagerSource(layouts, nodes=bool(settings.nodes.providers))
    env = Environment(
        client, managers, formats, _nudge(settings), reporters, _nudge_later(settings)
    )
    return env, layouts


def runtime_settings() -> Settings:
    """This process's settings (read once per process)."""
    return _settings.get("settings", load_settings)


def runtime() -> tuple[Environment, TenantLayouts]:
    """This process's runtime (created on first use after a fork)."""
    return _runtimes.get("runtime", lambda: build(runtime_settings()))
