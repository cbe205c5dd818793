"""Reporting to a forge (GitHub, GitLab): a commit status and a comment when an item is reported.

Every reporter action of Zuul is told: ``enqueue`` and ``start`` as they
happen (:meth:`ForgeReporter.announce`), and an item's final action
(``success``, ``failure``, ``merge-conflict``, ``config-error``,
``no-jobs``, ``dequeue`` or ``disabled``, chosen by
:mod:`scheduler.manager.actions`) when it is reported. The text is the
pipeline's ``*-message`` for what happened to the item (Zuul's defaults
otherwise), the jobs' results, why it failed, and ``footer-message``.

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

from scheduler.config.model import Pipeline
from scheduler.drivers.webhooks import forge_api
from scheduler.manager.actions import item_action
from scheduler.model.item import PushState, QueueItem
from scheduler.model.reasons import describe_waste
from scheduler.model.results import Result
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import ForgeReport

log = logging.getLogger(__name__)

# the change ref of a pull request (GitHub) or merge request (GitLab): its number
CHANGE_REF = re.compile(r"^refs/(?:pull|merge-requests)/(\d+)/head$")
DRIVERS = ("github", "gitlab")
# tenant, pipeline -> the pipeline (its reporters and messages), None if it is gone
ReporterConfig = Callable[[str, str], Pipeline | None]
# the longest commit status description GitHub accepts
DESCRIPTION_MAX = 140
# the actions told as they happen (a status, a comment only if asked)
ANNOUNCED = ("enqueue", "start")
# Zuul's introductory texts where the pipeline sets none ("" : none)
MERGE_CONFLICT_TEXT = (
    "Merge Failed.\n\nThis change or one of its cross-repo dependencies was unable to be"
    " automatically merged with the current state of its repository. Please rebase the"
    " change and upload a new patchset."
)
START_TEXT = "Starting {pipeline.name} jobs."
DEQUEUE_TEXT = "Build canceled."
# the fields a start-message may name (Zuul formats it; only these are replaced)
START_FIELDS = re.compile(r"\{(pipeline\.name|status_url|change\.project|change\.ref)\}")


def intro(kind: str, tenant: str, pipeline: str, messages: Mapping[str, str]) -> str:
    """The first words of a report about an item whose report is ``kind``."""
    if kind == "success":
        return messages.get("success-message") or f"Build succeeded ({tenant}/{pipeline})."
    if kind == "merge-conflict":
        return messages.get("merge-conflict-message") or MERGE_CONFLICT_TEXT
    if kind == "dequeue":
        return messages.get("dequeue-message") or DEQUEUE_TEXT
    if kind == "no-jobs":
        return messages.get("no-jobs-message", "")
    return messages.get("failure-message") or f"Build failed ({tenant}/{pipeline})."


def announcement(
    action: str, item: QueueItem, pipeline: str, messages: Mapping[str, str], url: str
) -> str:
    """The text of an ``enqueue`` or ``start`` report (``start-message`` is formatted)."""
    if action == "enqueue":
        return messages.get("enqueue-message", "")
    values = {
        "pipeline.name": pipeline,
        "status_url": url,
        "change.project": item.change.project,
        "change.ref": item.change.ref,
    }
    template = messages.get("start-message") or START_TEXT
    return START_FIELDS.sub(lambda m: values[m[1]], template)


def summary(
    item: QueueItem, tenant: str, pipeline: str, messages: Mapping[str, str] | None = None
) -> str:
    """A final report's text: the intro, the jobs' results, why, and the footer."""
    messages = messages or {}
    lines = [intro(item_action(item), tenant, pipeline, messages), ""]
    for job in item.buildset.graph:
        outcome = job.result.value if job.result else "NOT RUN"
        voting = "" if job.info.voting else " (non-voting)"
        lines.append(f"- {job.name}: {outcome}{voting}")
    if item.message:
        lines += ["", item.message]
    lines += reason_lines(item)
    if messages.get("footer-message"):
        lines += ["", messages["footer-message"]]
    return "\n".join(lines).strip("\n")


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


def _names(value: Any) -> tuple[str, ...]:
    """Label names as the config gives them: one name or a list."""
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value or ())


def send(api: Any, project: str, ref: str, commit: str, report: ForgeReport) -> None:
    """Tell the forge ``report`` about the change at ``ref``/``commit``: status, check, comment."""
    if report.status:
        api.set_status(
            project,
            commit,
            report.status,
            context=report.context,
            description=(report.text.splitlines() or [""])[0][:DESCRIPTION_MAX],
            url=report.url,
        )
    if report.check and hasattr(api, "set_check_run"):
        api.set_check_run(project, commit, report.check, name=report.context, summary=report.text)
    match = CHANGE_REF.match(ref)
    if match and report.comment and report.text:
        api.comment(project, int(match[1]), report.text)
    if match and (report.labels or report.unlabels):
        api.label(project, int(match[1]), report.labels, report.unlabels)


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

    def announce(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        """The pipeline's ``enqueue:`` or ``start:`` (a status; a comment only if it asks)."""
        self._send(tenant, pipeline, item, action)

    def report(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        """The item's final ``action`` (``""``: nothing is told)."""
        if (item.push is PushState.PUSHED and item.result is Result.SUCCESS) or not action:
            return  # the forge merged it, told of its success first (before_merge)
        # (a merged change of a dependency cycle whose next merge was refused is
        # told that the cycle failed: scheduler/manager/cycles.py)
        self._send(tenant, pipeline, item, action)

    def before_merge(
        self, tenant: str, pipeline: str, item: QueueItem, action: str = "success"
    ) -> ForgeReport | None:
        """The report (``success``, or ``disabled``) a forge gets before it merges ``item``
        (None: nothing to tell)."""
        if self._connection(item) is None:
            return None
        return self._report(tenant, pipeline, item, action)

    def _connection(self, item: QueueItem) -> ConnectionSettings | None:
        connection = self.connections.get(item.change.connection)
        if connection is None or connection.driver not in DRIVERS or not item.change.commit:
            return None
        return connection

    def _report(
        self, tenant: str, pipeline: str, item: QueueItem, action: str
    ) -> ForgeReport | None:
        config = self.config(tenant, pipeline)
        if config is None:
            return None
        options = config.reporters.get(action, {}).get(item.change.connection)
        if not isinstance(options, Mapping):
            return None
        url = f"{self.web_url}/t/{tenant}/buildset/{item.buildset.uuid}" if self.web_url else ""
        announced = action in ANNOUNCED
        if announced:
            text = announcement(action, item, pipeline, config.messages, url)
        else:
            text = summary(item, tenant, pipeline, config.messages)
        return ForgeReport(
            context=f"{tenant}/{pipeline}",
            text=text,
            status=str(options.get("status") or ""),
            check="" if announced else str(options.get("check") or ""),
            comment=bool(options.get("comment", not announced)),
            url=url,
            labels=_names(options.get("label")),
            unlabels=_names(options.get("unlabel")),
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
