"""Reconfiguring a tenant on a merger worker, with the config read from its own repo cache.

The reconfiguration requests of a tenant (:mod:`scheduler.reconfiguration`)
are applied by the ``sluice.merger.reconfigure`` task on the ``merger``
queue: the worker that applies them holds a repo cache, so it reads branch
heads and config files itself instead of sending merger jobs and waiting
for another worker (a scheduler worker waiting on mergers could starve the
very workers it waits for).
"""

from __future__ import annotations

from scheduler.layouts.reconfigure import Fetch
from scheduler.reconfiguration import apply_requests, fetch_with
from scheduler.settings.sections import Settings
from scheduler.wire import merger as wire
from scheduler.zk.client import ZooKeeperClient
from workers.merger.cache import RepoCache
from workers.merger.jobs import run_branch_heads_job, run_config_job


def local_fetch(cache: RepoCache) -> Fetch:
    """Branch heads and config files of a project, read from ``cache`` in this process."""

    def run(job: wire.MergerJob) -> wire.MergerResult:
        if isinstance(job, wire.BranchHeadsJob):
            return run_branch_heads_job(job, cache)
        if isinstance(job, wire.ConfigJob):
            return run_config_job(job, cache)
        raise TypeError(f"a reconfiguration runs no {type(job).__name__}")

    return fetch_with(run)


def reconfigure_tenant_here(
    client: ZooKeeperClient, settings: Settings, cache: RepoCache, tenant: str
) -> bool:
    """Apply ``tenant``'s reconfiguration requests; True if there were any."""
    return apply_requests(client, settings, tenant, local_fetch(cache))
