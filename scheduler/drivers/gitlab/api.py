"""A small GitLab REST client (API v4): what the driver reads and writes.

Connection keys (Zuul's names)::

    gitlab:
      driver: gitlab
      server: gitlab.example.com    # https://<server>/api/v4, or Sluice's own api_url
      api_token: <token>            # sent as PRIVATE-TOKEN
      webhook_token: <secret>
      merge_method: merge           # ignored by GitLab's API: the project's setting applies

Rate limits: as the GitHub client (:mod:`scheduler.drivers.rest`).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.drivers import ForgeError, rest
from scheduler.settings import ConnectionSettings

log = logging.getLogger(__name__)

# Sluice's status words as GitLab's commit status states
STATES = {"success": "success", "failure": "failed", "error": "failed", "pending": "pending"}


class GitLabError(ForgeError):
    """GitLab refused or failed a request."""


def api_url(connection: ConnectionSettings) -> str:
    given = str(connection.options.get("api_url") or "")
    if given:
        return given.rstrip("/")
    return f"https://{connection.options.get('server') or 'gitlab.com'}/api/v4"


class GitLabApi:
    def __init__(
        self, connection: ConnectionSettings, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.connection = connection
        self.base = api_url(connection)
        self.sleep = sleep

    def _project(self, project: str) -> str:
        return urllib.parse.quote(project, safe="")

    def request(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"Accept": "application/json"}
        token = str(self.connection.options.get("api_token") or "")
        if token:
            headers["PRIVATE-TOKEN"] = token
        return rest.call(
            "GitLab",
            GitLabError,
            self.base + path,
            method,
            headers=headers,
            body=body,
            sleep=self.sleep,
            timeout=float(self.connection.options.get("api_timeout") or rest.TIMEOUT),
        )

    def merge_request(self, project: str, iid: int) -> Mapping[str, Any]:
        found: Mapping[str, Any] = self.request(
            "GET", f"/projects/{self._project(project)}/merge_requests/{iid}"
        )
        return found

    def commit_messages(self, project: str, iid: int) -> list[str]:
        """The messages of the merge request's commits."""
        path = f"/projects/{self._project(project)}/merge_requests/{iid}/commits?per_page=100"
        return [str(c.get("message", "")) for c in self.request("GET", path) or []]

    def open_merge_requests(self, project: str) -> list[Mapping[str, Any]]:
        path = f"/projects/{self._project(project)}/merge_requests?state=opened&per_page=100"
        return list(self.request("GET", path) or [])

    def commits_between(self, project: str, base: str, head: str) -> list[str]:
        """The commits on ``head`` that ``base`` does not have (GitLab's compare)."""
        query = urllib.parse.urlencode({"from": base, "to": head})
        found = self.request(
            "GET", f"/projects/{self._project(project)}/repository/compare?{query}"
        )
        return [str(c.get("id", "")) for c in (found or {}).get("commits") or []]

    def approvals(self, project: str, iid: int) -> list[str]:
        found = self.request(
            "GET", f"/projects/{self._project(project)}/merge_requests/{iid}/approvals"
        )
        return sorted(
            str((a.get("user") or {}).get("username", "")) for a in found.get("approved_by") or []
        )

    def set_status(
        self, project: str, sha: str, state: str, *, context: str, description: str, url: str = ""
    ) -> None:
        body = {"state": STATES.get(state, state), "name": context, "description": description}
        if url:
            body["target_url"] = url
        self.request("POST", f"/projects/{self._project(project)}/statuses/{sha}", body)

    def comment(self, project: str, iid: int, text: str) -> None:
        path = f"/projects/{self._project(project)}/merge_requests/{iid}/notes"
        self.request("POST", path, {"body": text})

    def is_merged(self, project: str, iid: int, sha: str) -> bool:
        """Whether the merge request was merged with ``sha`` as its head."""
        mr = self.merge_request(project, iid)
        return mr.get("state") == "merged" and mr.get("sha") == sha

    def merge(self, project: str, iid: int, sha: str, method: str = "merge") -> None:
        path = f"/projects/{self._project(project)}/merge_requests/{iid}/merge"
        self.request("PUT", path, {"sha": sha})
