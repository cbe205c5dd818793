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
asks the forge to merge the pull or merge request (``workers/merger/push.py``), before
the item is reported. The status's context is ``<tenant>/<pipeline>``, so a
repeated report (a retry) sets the same status again; a comment may be
repeated when a report is retried after a crash.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.drivers.webhooks import forge_api
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.settings import ConnectionSettings

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
    return "\n".join(lines)


class ForgeReporter:
    def __init__(
        self, connections: Mapping[str, ConnectionSettings], config: ReporterConfig
    ) -> None:
        self.connections = connections
        self.config = config
        self._apis: dict[str, Any] = {}

    def _api(self, connection: ConnectionSettings) -> Any:
        if connection.name not in self._apis:
            self._apis[connection.name] = forge_api(connection)
        return self._apis[connection.name]

    def report_start(self, tenant: str, pipeline: str, item: QueueItem) -> None:
        """The pipeline's ``start:`` (a pending status; a comment only if it asks)."""
        self._send(tenant, pipeline, item, "start", comment_default=False)

    def report(self, tenant: str, pipeline: str, item: QueueItem) -> None:
        self._send(tenant, pipeline, item, action_of(item), comment_default=True)

    def _send(
        self, tenant: str, pipeline: str, item: QueueItem, action: str, *, comment_default: bool
    ) -> None:
        change = item.change
        connection = self.connections.get(change.connection)
        if connection is None or connection.driver not in DRIVERS:
            return
        options = self.config(tenant, pipeline).get(action, {}).get(change.connection)
        if not isinstance(options, Mapping) or not change.commit:
            return
        api = self._api(connection)
        if api is None:
            log.warning("%s: no api_token configured: nothing reported", connection.name)
            return
        if action == "start":
            text = f"Testing started ({tenant}/{pipeline})."
        else:
            text = summary(item, tenant, pipeline)
        if options.get("status"):
            api.set_status(
                change.project,
                change.commit,
                str(options["status"]),
                context=f"{tenant}/{pipeline}",
                description=text.splitlines()[0],
            )
        if options.get("check") and action != "start" and hasattr(api, "set_check_run"):
            api.set_check_run(
                change.project,
                change.commit,
                str(options["check"]),
                name=f"{tenant}/{pipeline}",
                summary=text,
            )
        match = CHANGE_REF.match(change.ref)
        if match and options.get("comment", comment_default):
            api.comment(change.project, int(match[1]), text)
        log.info("reported %s of %s to %s", item.uuid, change.ref, connection.name)
