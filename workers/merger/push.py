"""The merge queue's last step: push a tested commit to the target branch.

Used by gating pipelines whose success action merges (``merge: true`` on a
git connection): the item's speculative merge, tested by its jobs, becomes
the branch. The push is a plain fast-forward: if the branch moved outside
Sluice meanwhile, git refuses it and the result says so
(``not-fast-forward``), so the pipeline fails the item and resets the items
behind it. A branch already at the commit is a success (a repeated push).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from scheduler.drivers import ForgeError
from scheduler.drivers.reporter import CHANGE_REF
from scheduler.drivers.webhooks import forge_api
from scheduler.settings import ConnectionSettings
from scheduler.wire.merger import NOT_FAST_FORWARD, Failure, PushJob, PushResult, Status
from workers.merger.cache import RepoCache
from workers.merger.errors import GitCommandError, MergerError, UnknownRefError
from workers.merger.merge import failure_of
from workers.merger.names import check_commit, check_job_id, check_ref_name
from workers.merger.repo import Repo

log = logging.getLogger(__name__)

_REJECTED = re.compile(r"non-fast-forward|fetch first|\[rejected\]|stale info", re.IGNORECASE)


class NotFastForwardError(MergerError):
    """The target branch moved: pushing the tested commit would not fast-forward it."""

    kind = NOT_FAST_FORWARD


def push(repo: Repo, commit: str, branch: str, label: str) -> None:
    if repo.commit_of(commit) is None:
        raise UnknownRefError(f"{label}: commit {commit} is not in this merger's cache").at(commit)
    try:
        repo.git.run(["push", "--quiet", "origin", f"{commit}:refs/heads/{branch}"], repo.path)
    except GitCommandError as exc:
        if _REJECTED.search(exc.stderr):
            raise NotFastForwardError(
                f"{label}: branch {branch} moved outside Sluice; "
                f"{commit[:12]} no longer fast-forwards it"
            ).at(f"refs/heads/{branch}") from None
        raise


FORGES = ("github", "gitlab")


def forge_merge(job: PushJob, connection: ConnectionSettings) -> PushResult:
    """Ask the forge to merge the pull or merge request (its head must be what was tested)."""
    match = CHANGE_REF.match(job.change_ref)
    api = forge_api(connection)
    if match is None or api is None:
        why = "no api_token configured" if match else f"{job.change_ref!r} is no forge change"
        return PushResult(job.job_id, Status.FAILED, failure=Failure("invalid", why))
    method = str(connection.options.get("merge_method") or "merge")
    number = int(match[1])
    try:
        api.merge(job.project, number, job.change_commit, method)
    except ForgeError as exc:
        # The merge may have happened all the same: an answer lost to a timeout,
        # or a repeated push job after a crash. Merged as tested is a success.
        if _merged(api, job.project, number, job.change_commit):
            log.info("%s#%d: already merged (%s)", job.project, number, exc)
            return PushResult(job.job_id, Status.OK)
        kind = NOT_FAST_FORWARD if exc.status in (405, 409) else "forge"
        return PushResult(job.job_id, Status.FAILED, failure=Failure(kind, str(exc)))
    return PushResult(job.job_id, Status.OK)


def _merged(api: Any, project: str, number: int, sha: str) -> bool:
    try:
        return bool(api.is_merged(project, number, sha))
    except ForgeError:
        return False


def run_push_job(job: PushJob, cache: RepoCache) -> PushResult:
    """Push ``job.commit`` to ``job.branch`` of the project's repository."""
    label = f"{job.connection}/{job.project}"
    connection = cache.connections.get(job.connection)
    if connection is not None and connection.driver in FORGES:
        return forge_merge(job, connection)
    try:
        check_job_id(job.job_id)
        check_commit(job.commit)
        check_ref_name(job.branch, "branch")
        cache.run(
            job.connection, job.project, lambda repo: push(repo, job.commit, job.branch, label)
        )
    except MergerError as exc:
        failure = failure_of(exc, job.connection, job.project)
        return PushResult(job.job_id, Status.FAILED, failure=failure)
    return PushResult(job.job_id, Status.OK)
