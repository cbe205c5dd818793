"""One entry point for the task adapter: a job kind and its JSON params in, a JSON result out.

The merge service (:mod:`workers.merger.service`) reads a request's params
from ZooKeeper, calls :func:`run_job` and writes the returned dict as the
request's result data. Malformed params are a failed result (``invalid``),
like every other problem; only a bug raises.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scheduler.wire.merger import (
    KIND_CLASSES,
    InvalidRecordError,
    JobKind,
    MergeJob,
    MergeResult,
    MergerJob,
    MergerResult,
    Status,
    parse_kind,
)
from workers.merger.cache import RepoCache
from workers.merger.errors import InvalidJobError
from workers.merger.jobs import run_branch_heads_job, run_config_job, run_files_changes_job
from workers.merger.merge import failure_of, run_merge_job
from workers.merger.push import run_push_job
from workers.merger.waiting import NO_BATCH, Batch

Runner = Callable[[Any, RepoCache], MergerResult]

# kind -> the engine function that runs its job (job and result classes: KIND_CLASSES)
JOB_KINDS: Mapping[JobKind, Runner] = {
    JobKind.MERGE: run_merge_job,
    JobKind.FILES_CHANGES: run_files_changes_job,
    JobKind.CONFIG: run_config_job,
    JobKind.BRANCH_HEADS: run_branch_heads_job,
    JobKind.PUSH: run_push_job,
}


def run_typed_job(job: MergerJob, cache: RepoCache) -> MergerResult:
    """Run a decoded job of any kind."""
    for kind, (job_class, _) in KIND_CLASSES.items():
        if type(job) is job_class:
            return JOB_KINDS[kind](job, cache)
    raise InvalidJobError(f"not a merger job: {type(job).__name__}")


def run_job(
    kind: str, params: Mapping[str, Any], cache: RepoCache, batch: Batch = NO_BATCH
) -> dict[str, Any]:
    """Run the job of ``kind`` described by ``params`` (its ``to_dict()``); return the result's.

    ``batch``: the merge requests waiting in the queue (a merge job's fetch
    takes their changes along: :mod:`workers.merger.waiting`).
    """
    job_id = str(params.get("job_id", ""))
    try:
        job_kind = parse_kind(kind)
    except InvalidRecordError as exc:
        return _invalid(MergeResult, job_id, exc)
    job_class, result_class = KIND_CLASSES[job_kind]
    try:
        job = job_class.from_dict(dict(params))
    except InvalidRecordError as exc:
        return _invalid(result_class, job_id, exc)
    if isinstance(job, MergeJob):
        return run_merge_job(job, cache, batch).to_dict()
    return JOB_KINDS[job_kind](job, cache).to_dict()


def _invalid(
    result_class: type[MergerResult], job_id: str, exc: InvalidRecordError
) -> dict[str, Any]:
    error = exc if isinstance(exc, InvalidJobError) else InvalidJobError(str(exc))
    return result_class(job_id=job_id, status=Status.FAILED, failure=failure_of(error)).to_dict()
