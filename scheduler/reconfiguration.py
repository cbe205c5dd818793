"""Reconfiguring tenants with the config files mergers read at branch heads.

:func:`merger_fetch` is the ``fetch`` of :func:`scheduler.layouts.reconfigure_tenant`
for a real system: per project one branch-heads job and one config job,
run by merger workers (the scheduler never clones a repository itself).
:func:`reconfigure` does every tenant of ``main.yaml`` (or one).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

from scheduler import dispatch, tasknames
from scheduler.config import Layout, parse_tenant_config
from scheduler.errors import SluiceError
from scheduler.layouts import reconfigure_tenant
from scheduler.layouts.reconfigure import Fetch, FetchedBranches, ReconfigureResult
from scheduler.settings import Settings
from scheduler.wire import merger as wire
from scheduler.wire.merge_requests import merge_and_wait
from scheduler.zk import flags, inventory, paths
from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)


class ReconfigurationError(SluiceError):
    """The configuration could not be read (no merger answered, a merge job failed)."""


# runs one merger job and returns its result (through the queue, or in-process)
RunJob = Callable[[wire.MergerJob], "wire.MergerResult | None"]


def merger_fetch(client: ZooKeeperClient, settings: Settings, timeout: float = 120.0) -> Fetch:
    """Read config files at every branch head of a project through merger jobs."""

    def run(job: wire.MergerJob) -> wire.MergerResult | None:
        return merge_and_wait(client, job, timeout, settings=settings)

    return fetch_with(run, f"no merger answered within {timeout:.0f}s; is a merger worker running?")


def fetch_with(run_job: RunJob, unanswered: str = "the merger job was not answered") -> Fetch:
    """A fetch that runs a branch-heads job, then a config job, with ``run_job``."""

    def run(job: wire.MergerJob) -> wire.MergerResult:
        result = run_job(job)
        if result is None:
            raise ReconfigurationError(unanswered)
        if result.failure is not None:
            failure = result.failure
            raise ReconfigurationError(f"{failure.project} {failure.ref}: {failure.message}")
        return result

    def fetch(connection: str, project: str) -> dict[str, dict[str, str]]:
        heads = run(wire.BranchHeadsJob(uuid.uuid4().hex, connection, project))
        assert isinstance(heads, wire.BranchHeadsResult)
        branches = tuple(sorted(heads.state.branches)) if heads.state else ()
        if not branches:
            return {}
        config = run(wire.ConfigJob(uuid.uuid4().hex, connection, project, branches))
        assert isinstance(config, wire.ConfigResult)
        found: dict[str, dict[str, str]] = {branch: {} for branch in branches}
        found.update({c.branch: dict(c.files) for c in config.config})
        return FetchedBranches(found, heads.default_branch)

    return fetch


def tenant_names(settings: Settings) -> list[str]:
    path = Path(settings.tenant_config)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReconfigurationError(f"{path}: cannot read the tenant config: {exc}") from None
    config = parse_tenant_config(text, path.name, settings.connections)
    for error in config.errors:
        log.error("%s", error)
    return [tenant.name for tenant in config.tenants]


def reconfigure(
    client: ZooKeeperClient, settings: Settings, fetch: Fetch, tenant: str | None = None
) -> dict[str, ReconfigureResult]:
    """Reconfigure one tenant or all of ``main.yaml``; results by tenant name."""
    names = [tenant] if tenant else tenant_names(settings)
    results = {}
    for name in names:
        results[name] = result = reconfigure_tenant(client, settings, name, fetch)
        retire_removed_pipelines(client, settings, name, result.layout)
    return results


def retire_removed_pipelines(
    client: ZooKeeperClient, settings: Settings, tenant: str, layout: Layout
) -> list[str]:
    """Nudge the pipelines a reconfiguration removed: their items are dequeued and reported.

    Their dirty flag is raised first, so the sweep nudges them if this
    nudge is lost (the pass itself is the retiring manager's).
    """
    removed = [p for p in inventory.pipelines(client, tenant) if p not in layout.pipelines]
    for pipeline in removed:
        flags.raise_flag(client, paths.pipeline_dirty(tenant, pipeline))
        dispatch.send(tasknames.PROCESS_PIPELINE, tenant, pipeline, settings=settings)
    if removed:
        log.info("tenant %s: pipelines removed: %s", tenant, ", ".join(removed))
    return removed
