"""Job ``attempts``, Zuul's rules, on the scheduler's side (no I/O).

What the executor says of an attempt decides: ``RETRY`` (a pre-run failure,
a host unreachable, a workspace that could not be made) and ``LOST`` (the
executor died) run the job again while attempts remain, then the job is
``RETRY_LIMIT``; any other result is the job's at once. The SQL history
records a replaced attempt as ``RETRY``.
"""

from __future__ import annotations

import pytest

from scheduler.model.build import Build, BuildState, JobInfo, JobState
from scheduler.model.results import Result
from scheduler.processing.reporters import attempt_result


def job_with(*results: Result, attempts: int = 3) -> JobState:
    job = JobState(JobInfo("unit", attempts=attempts))
    for n, result in enumerate(results, start=1):
        job.builds.append(Build(f"b{n}", "unit", n, BuildState.COMPLETED, result))
    return job


@pytest.mark.parametrize("retried", [Result.RETRY, Result.LOST])
def test_a_retryable_attempt_runs_again_until_the_limit(retried: Result) -> None:
    job = job_with(retried, attempts=2)
    assert job.needs_retry and job.result is None
    job = job_with(retried, retried, attempts=2)
    assert not job.needs_retry and job.result is Result.RETRY_LIMIT
    first, last = job.builds
    assert (attempt_result(job, first), attempt_result(job, last)) == (
        Result.RETRY,
        Result.RETRY_LIMIT,
    )


@pytest.mark.parametrize(
    "final",
    [
        Result.FAILURE,
        Result.POST_FAILURE,
        Result.TIMED_OUT,
        Result.NODE_FAILURE,
        Result.ERROR,
        Result.SUCCESS,
    ],
)
def test_any_other_result_is_the_jobs_at_once(final: Result) -> None:
    job = job_with(final)
    assert not job.needs_retry and job.result is final


def test_a_success_after_a_retry_is_the_jobs_result() -> None:
    job = job_with(Result.RETRY, Result.SUCCESS)
    assert job.result is Result.SUCCESS
    assert [attempt_result(job, b) for b in job.builds] == [Result.RETRY, Result.SUCCESS]
