"""The merge queue's last step: push a tested commit to the target branch.

Used by gating pipelines whose success action merges (``merge: true`` on a
git connection): the item's speculative merge, tested by its jobs, becomes
the branch. The push is a plain fast-forward: if the branch moved outside
Sluice meanwhile, git refuses it and the result says so
(``not-fast-forward``), so the pipeline fails the item and resets the items
behind it. A branch already at the commit is a success (a repeated push).
On a forge (GitHub, GitLab) the forge merges instead (:func:`forge_merge`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from scheduler.drivers import ForgeError
from scheduler.drivers.reporter import CHANGE_REF, send
from scheduler.drivers.webhooks import forge_api
from scheduler.settings.sections import ConnectionSettings
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
# a forge's merge answers: the head moved (409), or the forge will not merge
# it as it stands (405: a protected branch's requirement, a draft, approvals
# missing, GitLab's "pipelines must succeed"; 422: GitHub's validation)
HEAD_MOVED = (409,)
NOT_MERGEABLE = "not-mergeable"
# tries of a call the forge failed (5xx, no answer), and the first back-off
FORGE_TRIES = 3
FORGE_BACKOFF = 1.0


def forge_merge(
    job: PushJob, connection: ConnectionSettings, sleep: Callable[[float], None] = time.sleep
) -> PushResult:
    """Tell the forge the gate's success, then ask it to merge the pull or merge request.

    The head must still be what was tested (``change_commit``). A call the
    forge fails (5xx, no answer) is tried again; a merge the forge refuses
    fails the item with the forge's reason.
    """
    match = CHANGE_REF.match(job.change_ref)
    api = forge_api(connection)
    if match is None or api is None:
        why = "no api_token configured" if match else f"{job.change_ref!r} is no forge change"
        return PushResult(job.job_id, Status.FAILED, failure=Failure("invalid", why))
    method = str(connection.options.get("merge_method") or "merge")
    number = int(match[1])
    label = f"{connection.name} {job.project}#{number}"
    try:
        if job.report is not None:
            report = job.report
            _retrying(
                sleep, lambda: send(api, job.project, job.change_ref, job.change_commit, report)
            )
        _retrying(sleep, lambda: api.merge(job.project, number, job.change_commit, method))
    except ForgeError as exc:
        # The merge may have happened all the same: an answer lost to a timeout,
        # or a repeated push job after a crash. Merged as tested is a success.
        if _merged(api, job.project, number, job.change_commit):
            log.info("%s: already merged (%s)", label, exc)
            return PushResult(job.job_id, Status.OK)
        return PushResult(job.job_id, Status.FAILED, failure=_merge_failure(label, exc))
    return PushResult(job.job_id, Status.OK)


def _merge_failure(label: str, exc: ForgeError) -> Failure:
    reason = exc.reason or str(exc)
    if exc.status in HEAD_MOVED:
        return Failure(NOT_FAST_FORWARD, f"{label}: the head moved since it was tested: {reason}")
    if exc.status in (405, 422):
        return Failure(NOT_MERGEABLE, f"{label}: the forge will not merge it: {reason}")
    if exc.transient:
        return Failure("forge", f"{label}: the forge did not answer ({FORGE_TRIES} tries): {exc}")
    return Failure("forge", f"{label}: {reason}")


def _retrying(sleep: Callable[[float], None], call: Callable[[], object]) -> None:
    """``call()``, tried again after a back-off while the forge fails (5xx, no answer)."""
    for attempt in range(1, FORGE_TRIES + 1):
        try:
            call()
            return
        except ForgeError as exc:
            if not exc.transient or attempt == FORGE_TRIES:
                raise
            log.warning("forge call failed (try %d of %d): %s", attempt, FORGE_TRIES, exc)
            sleep(FORGE_BACKOFF * 2 ** (attempt - 1))


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
