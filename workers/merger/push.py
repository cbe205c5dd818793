"""The merge queue's last step: push a tested commit to the target branch.

Used by gating pipelines whose success action merges (``merge: true`` on a
git connection): the item's speculative merge, tested by its jobs, becomes
the branch. The push is a plain fast-forward: if the branch moved outside
Sluice meanwhile, git refuses it and the result says so
(``not-fast-forward``), so the pipeline fails the item and resets the items
behind it. A branch already at the commit is a success (a repeated push).
On a forge (GitHub, GitLab) the forge merges instead: the forge drivers do
it through the merger's :class:`~workers.merger.forges.Forges`.
"""

from __future__ import annotations

import logging
import re

from scheduler.wire.merger import NOT_FAST_FORWARD, PushJob, PushResult, Status
from workers.merger import forges
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


def run_push_job(job: PushJob, cache: RepoCache) -> PushResult:
    """Push ``job.commit`` to ``job.branch`` of the project's repository."""
    label = f"{job.connection}/{job.project}"
    connection = cache.connections.get(job.connection)
    installed = forges.installed()
    if connection is not None and connection.driver in installed.drivers:
        return installed.merge(job, connection)
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
