"""The merger jobs of a reconfiguration, run in this process from its own repo cache.

A tenant's reconfiguration requests (:mod:`scheduler.reconfiguration`) are
applied by the ``sluice.merger.reconfigure`` task on the ``merger`` queue:
the worker that applies them holds a repo cache, so it reads branch heads
and config files itself instead of sending merger jobs and waiting for
another worker (a scheduler worker waiting on mergers could starve the very
workers it waits for).

This side only runs the jobs: :func:`local_runner` is a function from a
merger job to its result, in the formats of :mod:`scheduler.wire.merger`.
The task adapter (``tasks/merger.py``) puts it together with the brain's
reconfiguration (``apply_requests`` with ``fetch_with(local_runner(cache))``);
nothing here imports what decides.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduler.wire import merger as wire
from workers.merger.cache import RepoCache
from workers.merger.jobs import run_branch_heads_job, run_config_job


def local_runner(cache: RepoCache) -> Callable[[wire.MergerJob], wire.MergerResult]:
    """Run a reconfiguration's merger jobs (branch heads, config files) from ``cache``."""

    def run(job: wire.MergerJob) -> wire.MergerResult:
        if isinstance(job, wire.BranchHeadsJob):
            return run_branch_heads_job(job, cache)
        if isinstance(job, wire.ConfigJob):
            return run_config_job(job, cache)
        raise TypeError(f"a reconfiguration runs no {type(job).__name__}")

    return run
