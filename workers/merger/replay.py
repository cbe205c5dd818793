"""Merging an item's changes again on a host whose repo cache did not make them.

An item's speculative state lives in the repo cache of the merger that
merged it. Another host (an executor elsewhere, or another merger asked
to push the tested commit) makes the same state again from what ZooKeeper
keeps of the item's merge request: its job (the changes, in order) and its
result (every branch head the merger started from, and the base of each
branch the changes moved), kept in the merger queue while an item in some
pipeline names the request (``scheduler.sweep.referenced_merges``).

Merges are deterministic (fixed identity, the changes' own dates), so the
replay, with every branch pinned where the merger found it, makes the very
same commits; :func:`merge_again` checks that and refuses any difference.
The caller drops the replay's refs (:func:`workers.merger.jobs.delete_job_refs`)
when it no longer needs them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

from scheduler.stores.job_requests import JobRequestQueue
from scheduler.wire import merger as wire
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import DecodeError, NoDataError
from workers.merger.cache import RepoCache
from workers.merger.merge import run_merge_job

log = logging.getLogger(__name__)

Branches = dict[str, str]


class ReplayError(Exception):
    """The item's state cannot be made again here (says why)."""


def recorded_merge(client: ZooKeeperClient, request: str) -> tuple[wire.MergeJob, wire.MergeResult]:
    """The job and the result of merge request ``request``, as ZooKeeper keeps them."""
    queue = JobRequestQueue(client, paths.merger_queue())
    try:
        job = wire.read_job(queue.params(request))
        stored = queue.get_result(request)
    except (NoDataError, DecodeError, wire.InvalidRecordError) as exc:
        raise ReplayError(f"merge request {request} is no longer readable: {exc}") from None
    if stored is None or not isinstance(job, wire.MergeJob):
        raise ReplayError(f"merge request {request} has no merge result to merge again")
    result = wire.decode_result(stored.result, lost=stored.lost, kind=wire.JobKind.MERGE)
    if not isinstance(result, wire.MergeResult) or not result.ok:
        raise ReplayError(f"merge request {request} did not merge")
    return job, result


def replay_job(
    job_id: str,
    projects: Sequence[str],
    connections: Mapping[str, str],
    job: wire.MergeJob,
    result: wire.MergeResult,
) -> wire.MergeJob:
    """``job`` for ``projects`` only, every branch pinned where the merger found it."""
    heads = {state.project: dict(state.branches) for state in result.repo_state}
    bases = {state.project: dict(state.branches) for state in result.bases}
    pins = tuple(
        wire.ProjectState(connections[p], p, {**heads.get(p, {}), **bases.get(p, {})})
        for p in projects
    )
    changes = tuple(c for c in job.changes if c.project in projects)
    changed = {c.project for c in changes}
    required = tuple(wire.ProjectRef(connections[p], p) for p in projects if p not in changed)
    return wire.MergeJob(
        job_id=job_id,
        changes=changes,
        required=required,
        base_state=pins,
        timestamp=job.timestamp,
        read_config=False,
    )


def merge_again(
    client: ZooKeeperClient,
    cache: RepoCache,
    *,
    request: str,
    job_id: str,
    connections: Mapping[str, str],
    wanted: Mapping[str, Mapping[str, str]],
) -> None:
    """Make ``wanted`` (project -> branch -> commit) in ``cache`` from merge ``request``.

    Raises :class:`ReplayError` when the request is gone, the merge fails,
    or it makes other commits than ``wanted``.
    """
    projects = sorted(wanted)
    unknown = [p for p in projects if p not in connections]
    if not request or unknown:
        raise ReplayError(
            f"the speculative state of {', '.join(projects)} is not on this host and nothing "
            "says how to make it (no merge request, or no connection for a project)"
        )
    job, result = recorded_merge(client, request)
    began = time.monotonic()
    outcome = run_merge_job(replay_job(job_id, projects, connections, job, result), cache)
    if not outcome.ok:
        failure = outcome.failure.message if outcome.failure else outcome.status
        raise ReplayError(f"merging the item's changes again here failed: {failure}")
    made = {state.project: dict(state.branches) for state in outcome.repo_state}
    for project in projects:
        differs = sorted(b for b, c in wanted[project].items() if made.get(project, {}).get(b) != c)
        if differs:
            raise ReplayError(
                f"{project}: merging again here made other commits than the merger for "
                f"{', '.join(differs)}; not using another state than the one tested"
            )
    log.info(
        "%s: speculative state of %s merged again here in %.2fs (merge request %s)",
        job_id,
        ", ".join(projects),
        time.monotonic() - began,
        request,
    )
