"""One entry point for the task adapter: a job kind and its JSON params in, a JSON result out.

The merge task reads a request's params from ZooKeeper, calls
:func:`run_job` and writes the returned dict as the request's result data.
Malformed params are a failed result (``invalid``), like every other
problem; only a bug raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from workers.merger.cache import RepoCache
from workers.merger.errors import InvalidJobError
from workers.merger.jobs import run_branch_heads_job, run_config_job, run_files_changes_job
from workers.merger.merge import failure_of, run_merge_job
from workers.merger.model import (
    BranchHeadsJob,
    BranchHeadsResult,
    ConfigJob,
    ConfigResult,
    FilesChangesJob,
    FilesChangesResult,
    MergeJob,
    MergeResult,
    Record,
    Status,
)

Runner = Callable[[Any, RepoCache], Record]

# kind -> (job class, function, result class)
JOB_KINDS: Mapping[str, tuple[type[Record], Runner, type[Record]]] = {
    "merge": (MergeJob, run_merge_job, MergeResult),
    "files-changes": (FilesChangesJob, run_files_changes_job, FilesChangesResult),
    "config": (ConfigJob, run_config_job, ConfigResult),
    "branch-heads": (BranchHeadsJob, run_branch_heads_job, BranchHeadsResult),
}


def run_job(kind: str, params: Mapping[str, Any], cache: RepoCache) -> dict[str, Any]:
    """Run the job of ``kind`` described by ``params`` (its ``to_dict()``); return the result's."""
    job_id = str(params.get("job_id", ""))
    entry = JOB_KINDS.get(kind)
    if entry is None:
        error = InvalidJobError(f"unknown merger job kind {kind!r}")
        return _invalid(MergeResult, job_id, error)
    job_class, function, result_class = entry
    try:
        job = job_class.from_dict(dict(params))
    except InvalidJobError as exc:
        return _invalid(result_class, job_id, exc)
    return function(job, cache).to_dict()


def _invalid(result_class: type[Record], job_id: str, exc: InvalidJobError) -> dict[str, Any]:
    return result_class.from_dict(
        {"job_id": job_id, "status": Status.FAILED.value, "failure": failure_of(exc).to_dict()}
    ).to_dict()
