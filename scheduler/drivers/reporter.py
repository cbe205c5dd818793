"""Reporting to a forge (GitHub, GitLab): a commit status and a comment when an item is reported.

The pipeline's reporter configuration is Zuul's::

    - pipeline:
        name: check
        success:
          github:
            status: success          # the commit status set on the head
            check: success           # GitHub: a check run with this conclusion
            comment: true            # a comment with the jobs' results (default true)
        failure:
          github:
            status: failure

GitLab's are the same under a gitlab connection (the comment is a note on
the merge request; ``failure`` is GitLab's ``failed`` state).
``merge: true`` (a gate's success) is not a report: the item's push step
asks the forge to merge the pull or merge request (``workers/merger/push.py``).
As in Zuul, the forge hears the success first (status, check run, comment:
the :class:`~scheduler.wire.merger.ForgeReport` the push job carries, from
:meth:`ForgeReporter.before_merge`), then the merge is asked, so a branch
protected by a required status merges; a merged item is not reported to
its forge again, and a refused merge is reported as a failure with the
forge's reason. The status's context is ``<tenant>/<pipeline>`` and it
links to the buildset's page on the web (``web.public_url``), so a repeated
report (a retry) sets the same status again; a comment may be repeated
when a report is retried after a crash.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.drivers.webhooks import forge_api
from scheduler.model.item import PushState, QueueItem
from scheduler.model.reasons import describe_waste
from scheduler.model.results import Result
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import ForgeReport

log = logging.getLogger(__name__)

# the change ref of a pull request (GitHub) or merge request (GitLab): its number
CHANGE_REF = re.compile(r"^refs/(?:pull|merge-requests)/(\d+)/head$")
DRIVERS = ("github", "gitlab")
# tenant, pipeline -> the pipeline's reporter config {action: {connection: options}}
ReporterConfig = Callable[[str, str], Mapping[str, Mapping[str, Any]]]


def action_of(item: QueueItem) -> str:
    if item.dequeued and item.result in (None, Result.DEQUEUED):
        return "dequeue"
    return "success" if item.result is Result.SUCCESS else "failure"


def summary(item: QueueItem, tenant: str, pipeline: str) -> str:
    result = item.result.value if item.result else "UNKNOWN"
    lines = [f"Build {'succeeded' if result == 'SUCCESS' else 'failed'} ({tenant}/{pipeline}).", ""]
    for job in item.buildset.graph:
        outcome = job.result.value if job.result else "NOT RUN"
        voting = "" if job.info.voting else " (non-voting)"
        lines.append(f"- {job.name}: {outcome}{voting}")
    if item.message:
        lines += ["", item.message]
    lines += reason_lines(item)
    return "\n".join(lines)


def reason_lines(item: QueueItem) -> list[str]:
    """Why the item failed or left, and what resets cost (for report texts)."""
    lines: list[str] = []
    reason = item.reason
    if reason is not None and item.result is not Result.SUCCESS:
        why = f"Reason: {reason.kind}"
        if reason.message and reason.message != item.message:
            why += f" ({reason.message})"
        if reason.verdict:
            why += f"; verdict: {reason.verdict}"
        lines += ["", why]
    if item.reset_cost:
        cost = item.reset_cost
        items = "1 item" if cost.resets == 1 else f"{cost.resets} items"
        lines += [
            "",
            f"This {'failure' if item.result is not Result.DEQUEUED else 'dequeue'} reset"
            f" {items} behind it: {describe_waste(cost)} thrown away.",
        ]
    if item.resets.total:
        cause = item.resets.cause
        last = f"; the last by {cause.ref} ({cause.kind})" if cause and cause.ref else ""
        times = "once" if item.resets.total.resets == 1 else f"{item.resets.total.resets} times"
        lost = describe_waste(item.resets.total)
        lines += ["", f"It was reset {times} ({lost} thrown away){last}."]
    return lines


def send(api: Any, project: str, ref: str, commit: str, report: ForgeReport) -> None:
    """Tell the forge ``report`` about the change at ``ref``/``commit``: status, check, comment."""
    if report.status:
        api.set_status(
            project,
            commit,
            report.status,
            context=report.context,
            description=report.text.splitlines()[0],
            url=report.url,
        )
    if report.check and hasattr(api, "set_check_run"):
        api.set_check_run(project, commit, report.check, name=report.context, summary=report.text)
    match = CHANGE_REF.match(ref)
    if match and report.comment:
        api.comment(project, int(match[1]), report.text)


class ForgeReporter:
    def __init__(
        self,
        connections: Mapping[str, ConnectionSettings],
        config: ReporterConfig,
        web_url: str = "",
    ) -> None:
        self.connections = connections
        self.config = config
        self.web_url = web_url.rstrip("/")
        self._apis: dict[str, Any] = {}

    def _api(self, connection: ConnectionSettings) -> Any:
        if connection.name not in self._apis:
            self._apis[connection.name] = forge_api(connection)
        return self._apis[connection.name]

    def report_start(self, tenant: str, pipeline: str, item: QueueItem) -> None:
        """The pipeline's ``start:`` (a pending status; a comment only if it asks)."""
        self._send(tenant, pipeline, item, "start")

    def report(self, tenant: str, pipeline: str, item: QueueItem) -> None:
        if item.push is PushState.PUSHED and item.result is Result.SUCCESS:
            return  # the forge merged it, told of its success first (before_merge)
        # (a merged change of a dependency cycle whose next merge was refused is
        # told that the cycle failed: scheduler/manager/cycles.py)
        self._send(tenant, pipeline, item, action_of(item))

    def before_merge(self, tenant: str, pipeline: str, item: QueueItem) -> ForgeReport | None:
        """The success report a forge gets before it merges ``item`` (None: nothing to tell)."""
        if self._connection(item) is None:
            return None
        return self._report(tenant, pipeline, item, "success")

    def _connection(self, item: QueueItem) -> ConnectionSettings | None:
        connection = self.connections.get(item.change.connection)
        if connection is None or connection.driver not in DRIVERS or not item.change.commit:
            return None
        return connection

    def _report(
        self, tenant: str, pipeline: str, item: QueueItem, action: str
    ) -> ForgeReport | None:
        options = self.config(tenant, pipeline).get(action, {}).get(item.change.connection)
        if not isinstance(options, Mapping):
            return None
        if action == "start":
            text = f"Testing started ({tenant}/{pipeline})."
        else:
            text = summary(item, tenant, pipeline)
        url = f"{self.web_url}/t/{tenant}/buildset/{item.buildset.uuid}" if self.web_url else ""
        return ForgeReport(
            context=f"{tenant}/{pipeline}",
            text=text,
            status=str(options.get("status") or ""),
            check="" if action == "start" else str(options.get("check") or ""),
            comment=bool(options.get("comment", action != "start")),
            url=url,
        )

    def _send(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        connection = self._connection(item)
        if connection is None:
            return
        report = self._report(tenant, pipeline, item, action)
        if report is None:
            return
        api = self._api(connection)
        if api is None:
            log.warning("%s: no api_token configured: nothing reported", connection.name)
            return
        change = item.change
        send(api, change.project, change.ref, change.commit, report)
        log.info("reported %s of %s to %s", item.uuid, change.ref, connection.name)
