"""The forge drivers as the merger uses them: a private repository's git credentials, a forge merge.

:class:`DriverForges` implements :class:`workers.merger.forges.Forges`; the
Celery app installs it in every worker process. A gate on a forge ends with
:func:`forge_merge`: the merger tells the forge the gate's success (status,
check run, comment: a protected branch that requires them is then
satisfied) and asks it to merge the pull or merge request at the tested
head.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.drivers import ForgeError
from scheduler.drivers.github.credentials import remote_env
from scheduler.drivers.reporter import CHANGE_REF, send
from scheduler.drivers.webhooks import forge_api
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import NOT_FAST_FORWARD, Failure, PushJob, PushResult, Status

log = logging.getLogger(__name__)

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


class DriverForges:
    """GitHub's and GitLab's drivers, for the merger."""

    drivers = frozenset(FORGES)

    def git_env(
        self, connection: ConnectionSettings | None, project: str, env: Mapping[str, str]
    ) -> Mapping[str, str]:
        return remote_env(connection, project, env)

    def merge(self, job: PushJob, connection: ConnectionSettings) -> PushResult:
        return forge_merge(job, connection)
