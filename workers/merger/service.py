"""The merge task's ZooKeeper side: claim a merge request, run its job, store its result.

:func:`execute_merge_request` is what the Celery task ``sluice.merger.run``
(``tasks/merger.py``) calls; it is plain Python that tests drive against a
real ZooKeeper without a broker. One call:

1. **claim** the request on the merger queue: one transaction creates the
   ephemeral ``locks/<uuid>`` node, sets REQUESTED -> RUNNING and queues the
   ``request-started`` event. No claim (another delivery has it, or it is
   completed, on hold or gone) returns :attr:`Delivery.DUPLICATE` and
   changes nothing: a duplicate Celery delivery has no effect (docs/architecture.md
   invariant 4).
2. **read the params** ``{"kind": ..., "job": {...}}``
   (:func:`scheduler.wire.merger.request_params`); params that are not
   that complete the request with a failed result of kind ``invalid``.
3. **run** the job with this process's :class:`RepoCache` (created on
   first use in the process, so after the pool's fork). Errors are
   results: the engine turns git problems into failures, and anything else
   it raises (a bug, a full disk) becomes a failure of kind ``internal``,
   logged with its traceback.
4. **complete**: one fenced transaction stores the result data (the
   result's ``to_dict()`` plus ``kind``; sharded by the ZooKeeper layer
   when large), sets COMPLETED, queues ``request-completed`` in the
   request's result queue and deletes the lock.

A merge is short and deterministic, and the task is acknowledged late: a
worker killed mid-merge leaves its request RUNNING with a lock that
vanishes with its ZooKeeper session; the sweep completes it as lost and
the scheduler merges again. A redelivered message finds the request
claimed or completed and returns.

Session loss while merging: the completion is fenced by the lock node, so
a merger whose session expired cannot store its result
(:attr:`Delivery.LOCK_LOST`); its claim is released and the sweep
records the request as lost. ZooKeeper unavailable at completion: retried
a few times, then the claim is released (the request becomes lost rather
than RUNNING forever under a live session) and the error propagates (the
task retries; the retry finds nothing to claim).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler import logcontext
from scheduler.nudge.task_labels import outcome_label, request_label
from scheduler.processlocal import ProcessLocal
from scheduler.settings.sections import Settings
from scheduler.stores import timings
from scheduler.stores.job_requests import ClaimedRequest, JobRequestQueue
from scheduler.wire.merger import (
    Failure,
    InvalidRecordError,
    JobKind,
    PushJob,
    failed_result,
    parse_kind,
    read_params,
    result_data,
)
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import DecodeError, NoDataError
from workers import claims
from workers.claims import Delivery
from workers.merger import forges
from workers.merger.cache import RepoCache
from workers.merger.dispatch import run_job
from workers.merger.jobs import delete_job_refs
from workers.merger.replay import ReplayError, merge_again
from workers.merger.waiting import FetchBatch, process_memo
from workers.notify import Notify, no_notify, notify_safely

log = logging.getLogger(__name__)

# Attempts at the completion transaction while ZooKeeper is unavailable, and
# the pause before the first retry (doubled each time).

# Failure kind of an unexpected exception in the merger (a bug).
INTERNAL = "internal"


@dataclass(frozen=True)
class MergeReport:
    """The task's return value: small, JSON-friendly, for Flower and tests."""

    request_uuid: str
    outcome: Delivery
    kind: str = ""
    status: str = ""
    worker: str = ""
    # what the request is about (scheduler.nudge.task_labels), as the task's arguments say it
    about: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": outcome_label(self.outcome.value, self.about, self.status),
            "request": self.request_uuid,
            "outcome": self.outcome.value,
            "kind": self.kind,
            "status": self.status,
            "worker": self.worker,
        }


def worker_name(node: str | None = None) -> str:
    """How a claim names this process: the Celery node (or host) and the pid."""
    return f"{node or socket.gethostname()}:{os.getpid()}"


def open_queue(client: ZooKeeperClient) -> JobRequestQueue:
    """The merger's job request queue."""
    return JobRequestQueue(client, paths.merger_queue())


# ---------------------------------------------------------------- the repo cache of a process

# One repo cache per process (never inherited across a fork).
_caches: ProcessLocal[str, RepoCache] = ProcessLocal("repo cache")


def process_cache(settings: Settings) -> RepoCache:
    """This process's repo cache for ``settings``, created on first use (after any fork).

    One per process, so its per-process memo of changed files survives
    from one merge to the next; replaced if the state dir or the
    connections changed.
    """
    cache = _caches.get("cache", lambda: RepoCache.from_settings(settings))
    if cache.root != settings.state_dir / "git" or cache.connections != settings.connections:
        cache = _caches.put("cache", RepoCache.from_settings(settings))  # settings changed
        process_memo().forget()  # what was fetched from the old connections is not fresh
    return cache


# ---------------------------------------------------------------- one request

CacheSource = RepoCache | Callable[[], RepoCache]


def execute_merge_request(
    queue: JobRequestQueue,
    request_uuid: str,
    worker: str,
    cache: CacheSource,
    notify: Notify = no_notify,
) -> MergeReport:
    """Claim, run and complete one merge request; see the module docstring.

    ``cache`` is the repo cache, or a callable that makes it (called only
    once a request is claimed).
    """
    claimed = queue.claim(request_uuid, worker)
    if claimed is None:
        log.info("merge request %s: nothing to claim (duplicate delivery or done)", request_uuid)
        return MergeReport(request_uuid, Delivery.DUPLICATE, worker=worker)
    with logcontext.bound_to_request(claimed.request):
        return _execute_claimed(queue, claimed, worker, cache, notify)


def _execute_claimed(
    queue: JobRequestQueue,
    claimed: ClaimedRequest,
    worker: str,
    cache: CacheSource,
    notify: Notify,
) -> MergeReport:
    request_uuid = claimed.uuid
    about = request_label(claimed.request)
    log.info("merge request %s: claimed by %s (%s)", request_uuid, worker, about)
    try:
        kind, data = run_claimed(queue, claimed, cache)
        outcome = _complete(queue, claimed, data)
        if outcome is Delivery.COMPLETED:
            notify_safely(notify, claimed.request, "merge")
    except BaseException:
        # Never leave a RUNNING request locked by a live session: released,
        # it is found lost and recorded by the sweep.
        queue.release(claimed)
        raise
    if outcome is Delivery.LOCK_LOST:
        queue.release(claimed)
    status = str(data.get("status", ""))
    log.info("merge request %s: %s, %s %s", request_uuid, outcome.value, kind.value, status)
    return MergeReport(request_uuid, outcome, kind.value, status, worker, about)


def run_claimed(
    queue: JobRequestQueue, claimed: ClaimedRequest, cache: CacheSource
) -> tuple[JobKind, dict[str, Any]]:
    """The kind and the result data of a claimed request; never raises for a bad job."""
    fallback = _kind_of_request(claimed)
    try:
        kind, job = read_params(queue.params(claimed.request))
    except (InvalidRecordError, DecodeError, NoDataError) as exc:
        log.error("merge request %s: unusable params: %s", claimed.uuid, exc)
        failure = Failure("invalid", f"the merge request holds no valid job: {exc}")
        result = failed_result(fallback, claimed.request.job_name, failure)
        return fallback, result_data(fallback, result.to_dict())
    replayed: PushJob | None = None
    try:
        repos = cache if isinstance(cache, RepoCache) else cache()
        if kind is JobKind.PUSH:
            replayed = _commit_made_here(queue.client, repos, _push_job(job))
        batch = FetchBatch(queue, claimed.uuid, process_memo())
        result_dict = run_job(kind, job, repos, batch)
    except ReplayError as exc:
        log.warning("merge request %s: %s", claimed.uuid, exc)
        failure = Failure("unknown-ref", f"the tested commit is not on this merger: {exc}")
        job_id = str(job.get("job_id", claimed.request.job_name))
        result_dict = failed_result(kind, job_id, failure).to_dict()
    except Exception as exc:  # a process boundary: errors are results, never crashes
        log.exception("merge request %s: the merger failed", claimed.uuid)
        failure = Failure(INTERNAL, f"the merger failed: {type(exc).__name__}: {exc}")
        job_id = str(job.get("job_id", claimed.request.job_name))
        result_dict = failed_result(kind, job_id, failure).to_dict()
    finally:
        if replayed is not None:
            _forget_replay(repos, replayed)
    return kind, result_data(kind, result_dict)


def _commit_made_here(
    client: ZooKeeperClient, cache: RepoCache, job: PushJob | None
) -> PushJob | None:
    """Make the tested commit in this cache if another merger made it; the job if we did.

    Several mergers (on several hosts) share the merge queue: the one asked
    to push may not be the one that merged the item. It merges the item's
    changes again (:mod:`workers.merger.replay`), which must give the very
    commit that was tested.
    """
    if job is None:
        return None
    connection = cache.connections.get(job.connection)
    if connection is None or connection.driver in forges.installed().drivers:
        return None  # the engine says what is wrong, or the forge merges the change itself
    present = cache.run(job.connection, job.project, lambda repo: repo.commit_of(job.commit))
    if present is not None or not job.merge_request:
        return None
    merge_again(
        client,
        cache,
        request=job.merge_request,
        job_id=_replay_id(job),
        connections={job.project: job.connection},
        wanted={job.project: {job.branch: job.commit}},
    )
    return job


def _push_job(params: Mapping[str, Any]) -> PushJob | None:
    """The push job, None if malformed (the engine reports that as ``invalid``)."""
    try:
        return PushJob.from_dict(dict(params))
    except InvalidRecordError:
        return None


def _replay_id(job: PushJob) -> str:
    return f"push-{job.job_id}"


def _forget_replay(cache: RepoCache, job: PushJob) -> None:
    try:
        delete_job_refs(cache, job.connection, job.project, _replay_id(job))
    except Exception as exc:  # cleanup only: the refs go with the next prune
        log.warning("push %s: replay refs not dropped: %s", job.job_id, exc)


def _kind_of_request(claimed: ClaimedRequest) -> JobKind:
    try:
        return parse_kind(claimed.request.info.get("kind", JobKind.MERGE.value))
    except InvalidRecordError:
        return JobKind.MERGE


def _complete(queue: JobRequestQueue, claimed: ClaimedRequest, data: Mapping[str, Any]) -> Delivery:
    delivery = claims.complete(queue, claimed, data, "merge")
    if delivery is Delivery.COMPLETED and claimed.request.created:
        # from the request to its result, for the metrics (best-effort)
        waited = time.time() - claimed.request.created
        timings.buffered(queue.client).add(timings.MERGE, [waited])
    return delivery


def execute(
    settings: Settings,
    client: ZooKeeperClient,
    request_uuid: str,
    worker: str,
    *,
    notify: Notify = no_notify,
) -> MergeReport:
    """:func:`execute_merge_request` on the merger queue with this process's repo cache."""
    return execute_merge_request(
        open_queue(client), request_uuid, worker, lambda: process_cache(settings), notify
    )
