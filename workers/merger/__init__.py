"""The merger: speculative merges of queued changes, in git, on worker hosts.

This package is the git engine, plain Python with typed inputs and outputs
(no Celery), and the service that runs it for a merge request in ZooKeeper.
The jobs and results are the wire types of :mod:`scheduler.wire.merger`
(the scheduler builds the one and reads the other).

* :func:`run_merge_job` — apply changes in order with Zuul's merge modes;
  the repo state, the files of each change, the config files of the merged
  trees, or a conflict naming the change and the files.
* :func:`run_files_changes_job`, :func:`run_config_job`,
  :func:`run_branch_heads_job` — the scheduler's other git questions.
* :func:`checkout_workspace` — for executors: a working copy at a commit a
  merge produced on this host.
* :func:`run_job` — the same, by job kind, JSON params in and out;
  :func:`run_typed_job` for a decoded job of any kind.
* :mod:`workers.merger.service` — claim a merge request, run its job,
  complete it with the result (what the task ``sluice.merger.run`` calls).
* :class:`RepoCache` — one bare clone per project under
  ``<state_dir>/git``, locked per repo across processes, re-cloned when
  found broken.

See ``docs/merger.md`` for the design and its limits.
"""

from __future__ import annotations

from workers.merger.cache import RepoCache
from workers.merger.dispatch import JOB_KINDS, run_job, run_typed_job
from workers.merger.jobs import (
    delete_job_refs,
    prune_job_refs,
    run_branch_heads_job,
    run_config_job,
    run_files_changes_job,
)
from workers.merger.merge import run_merge_job
from workers.merger.workspace import checkout_workspace

__all__ = [
    "JOB_KINDS",
    "RepoCache",
    "checkout_workspace",
    "delete_job_refs",
    "prune_job_refs",
    "run_branch_heads_job",
    "run_config_job",
    "run_files_changes_job",
    "run_job",
    "run_merge_job",
    "run_typed_job",
]
