"""The submitter's side of the merger queue: build a merge request, submit it, wait for its result.

The worker's side is ``workers/merger/service.py`` (run by the task
``sluice.merger.run``); between the two, ZooKeeper's merger queue
(:func:`scheduler.zk.paths.merger_queue`, a
:class:`~scheduler.stores.job_requests.JobRequestQueue`) holds the request,
its params and its result in the formats of :mod:`scheduler.wire.merger`.

Two kinds of submitter:

* **a pipeline pass** creates its merge requests in its own fenced
  transaction: :func:`new_request` gives the
  :class:`~scheduler.stores.request_records.JobRequest` and the params for
  :meth:`~scheduler.stores.job_requests.JobRequestQueue.submit_ops`; after the
  commit it sends ``sluice.merger.run`` with the request's uuid, and the
  ``request-completed`` event in its result queue tells it when to read the
  result (:func:`read_result`);
* **a blocking caller** (reconfiguration reading config at branch heads)
  uses :func:`submit_merge_job` with ``wait=True``, nudges a merger
  (:func:`scheduler.nudge.dispatch.send_merge`), then
  :func:`wait_for_merge_result`, woken by a watch on the request's
  ``results/<uuid>`` marker (no polling); the reconfiguration's
  ``merge_and_wait`` (:mod:`scheduler.reconfiguration`) does the three.
  Sending the task is the caller's: a store does not nudge.

A request whose merger died is completed as lost by the sweep; its result
reads as ``failed`` with a failure of kind ``lost``, and the submitter
merges again (a new request: merges are deterministic, so the redo gives
the same commits).

Session loss: a submitter whose session expires while it waits loses its
``waiters/<uuid>`` node and its watch; :func:`wait_for_merge_result` then
returns what is there when its timeout ends (the result or None). The
request itself is unaffected.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.request_records import JobRequest
from scheduler.wire.events import JobResult
from scheduler.wire.merger import (
    InvalidRecordError,
    JobKind,
    MergerJob,
    MergerResult,
    decode_result,
    job_kind,
    parse_kind,
    request_params,
)
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient

# Merges run ahead of builds when both wait (lower runs first).
MERGE_PRECEDENCE = 100


def merger_queue(client: ZooKeeperClient) -> JobRequestQueue:
    """The merger's job request queue."""
    return JobRequestQueue(client, paths.merger_queue())


def new_request(
    job: MergerJob,
    *,
    tenant: str = "",
    pipeline: str = "",
    buildset: str = "",
    result_queue: str = "",
    event_id: str = "",
    precedence: int = MERGE_PRECEDENCE,
    request_uuid: str | None = None,
    about: Mapping[str, Any] | None = None,
) -> tuple[JobRequest, dict[str, Any]]:
    """The request node and the params of a merge request for ``job`` (nothing is written).

    ``job_name`` is the job's ``job_id`` (the result event names it) and
    ``info["kind"]`` its kind, beside ``about`` (project, change: for
    people); ``result_queue`` is the event queue that gets
    the ``request-started`` and ``request-completed`` events ("" for none).
    """
    kind = job_kind(job)
    request = JobRequest(
        uuid=request_uuid or uuid_module.uuid4().hex,
        precedence=precedence,
        tenant=tenant,
        pipeline=pipeline,
        buildset_uuid=buildset,
        job_name=job.job_id,
        event_id=event_id,
        result_queue=result_queue,
        info={**(about or {}), "kind": kind.value},
    )
    return request, request_params(job)


def submit_merge_job(
    client: ZooKeeperClient,
    kind: JobKind | str,
    job: MergerJob,
    *,
    tenant: str = "",
    pipeline: str = "",
    buildset: str = "",
    result_queue: str = "",
    wait: bool = False,
    event_id: str = "",
    precedence: int = MERGE_PRECEDENCE,
) -> JobRequest:
    """Create a merge request for ``job`` (one transaction); send its task next.

    ``kind`` must be the kind of ``job``'s class (:class:`InvalidRecordError`
    otherwise). ``wait`` registers this session as a waiter, so the sweep's
    cleanup keeps the result until it is read.
    """
    if parse_kind(kind) is not job_kind(job):
        raise InvalidRecordError(f"a {type(job).__name__} is not a {kind} job")
    request, params = new_request(
        job,
        tenant=tenant,
        pipeline=pipeline,
        buildset=buildset,
        result_queue=result_queue,
        event_id=event_id,
        precedence=precedence,
    )
    return merger_queue(client).submit(request, params, wait=wait)


def read_result(
    result: JobResult, request: JobRequest | None = None, kind: JobKind | str | None = None
) -> MergerResult:
    """The typed result of a completed merge request (a lost one: failure kind ``lost``).

    ``request`` (or ``kind``) says what a lost request was: its stored
    result names neither kind nor job.
    """
    if request is not None:
        kind = kind or str(request.info.get("kind", "")) or None
        job_id = request.job_name
    else:
        job_id = ""
    return decode_result(result.result, lost=result.lost, kind=kind, job_id=job_id)


def wait_for_merge_result(
    client: ZooKeeperClient,
    request_uuid: str,
    timeout: float,
    *,
    kind: JobKind | str | None = None,
    remove: bool = False,
) -> MergerResult | None:
    """Block until the request completed (a watch wakes us) or ``timeout``; None on timeout.

    ``remove`` deletes the request once its result is read (a blocking
    caller that is done with it).
    """
    queue = merger_queue(client)
    result = queue.wait_for_result(request_uuid, timeout)
    if result is None:
        return None
    request = queue.get(request_uuid) if result.lost else None
    typed = read_result(result, request, kind)
    if remove:
        queue.remove(request_uuid)
    return typed
