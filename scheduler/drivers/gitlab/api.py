"""A small GitLab REST client (API v4): what the driver reads and writes.

Connection keys (Zuul's names)::

    gitlab:
      driver: gitlab
      server: gitlab.example.com    # https://<server>/api/v4, or Sluice's own api_url
      api_token: <token>            # sent as PRIVATE-TOKEN
      webhook_token: <secret>
      merge_method: merge           # ignored by GitLab's API: the project's setting applies

Rate limits: as the GitHub client (:mod:`scheduler.drivers.rest`). Lists
(a merge request's commits, the open merge requests) are read whole,
100 a page, following ``X-Next-Page``/``Link`` (:func:`rest.call_pages`).

Two answers are kept for the life of the process, because they cannot
change: the token's user (``GET /user``, to know Sluice's own notes), and
the commits of a merge request at a given head (keyed by that head's sha).
Every name that goes into a URL is quoted.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.drivers import ForgeError, rest
from scheduler.settings.sections import ConnectionSettings

log = logging.getLogger(__name__)

# Sluice's status words as GitLab's commit status states
STATES = {"success": "success", "failure": "failed", "error": "failed", "pending": "pending"}
PER_PAGE = 100
# merge requests (at one head each) whose commits a process remembers
KEPT_COMMITS = 1024


class GitLabError(ForgeError):
    """GitLab refused or failed a request."""


@dataclass(frozen=True)
class ApprovalState:
    """A merge request's approvals as GitLab judges them (``GET .../approvals``).

    ``approved`` is GitLab's own verdict (every approval rule met, none
    left), not "someone approved"; ``approvers`` are who did.
    """

    approved: bool
    approvers: tuple[str, ...]


def api_url(connection: ConnectionSettings) -> str:
    given = str(connection.options.get("api_url") or "")
    if given:
        return given.rstrip("/")
    return f"https://{connection.options.get('server') or 'gitlab.com'}/api/v4"


def quoted(name: object) -> str:
    """``name`` as one path segment of a URL."""
    return urllib.parse.quote(str(name), safe="")


class _Remembered:
    """What a process keeps of GitLab's answers that cannot change (bounded, thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users: dict[tuple[str, str], str] = {}
        self.commits: OrderedDict[tuple[str, str, int, str], list[Mapping[str, Any]]] = (
            OrderedDict()
        )

    def keep_commits(
        self, key: tuple[str, str, int, str], commits: list[Mapping[str, Any]]
    ) -> None:
        with self.lock:
            self.commits[key] = commits
            while len(self.commits) > KEPT_COMMITS:
                self.commits.popitem(last=False)


_remembered = _Remembered()


class GitLabApi:
    def __init__(
        self, connection: ConnectionSettings, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.connection = connection
        self.base = api_url(connection)
        self.sleep = sleep
        self.token = str(connection.options.get("api_token") or "")
        self.timeout = float(connection.options.get("api_timeout") or rest.TIMEOUT)

    def _project(self, project: str) -> str:
        return f"/projects/{quoted(project)}"

    def _mr(self, project: str, iid: int) -> str:
        return f"{self._project(project)}/merge_requests/{quoted(iid)}"

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["PRIVATE-TOKEN"] = self.token
        return headers

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return rest.call(
            "GitLab",
            GitLabError,
            self.base + path,
            method,
            headers=self._headers(),
            body=body,
            sleep=self.sleep,
            timeout=self.timeout,
        )

    def pages(self, path: str, query: Mapping[str, str] | None = None) -> list[Any]:
        """Every item of the list at ``path``, :data:`PER_PAGE` a page."""
        search = urllib.parse.urlencode({**(query or {}), "per_page": str(PER_PAGE)})
        return rest.call_pages(
            "GitLab",
            GitLabError,
            f"{self.base}{path}?{search}",
            headers=self._headers(),
            sleep=self.sleep,
            timeout=self.timeout,
        )

    def user(self) -> str:
        """The username the token belongs to (read once a process; "" if GitLab will not say)."""
        key = (self.base, self.token)
        if key not in _remembered.users:
            try:
                found = self.request("GET", "/user") or {}
            except GitLabError as exc:
                if not 400 <= exc.status < 500:
                    raise
                # a token without read_user: every note is read, none is lost
                log.warning("%s: own notes not recognised: %s", self.connection.name, exc)
                found = {}
            _remembered.users[key] = str(found.get("username") or "")
        return _remembered.users[key]

    def merge_request(self, project: str, iid: int) -> Mapping[str, Any]:
        found: Mapping[str, Any] = self.request("GET", self._mr(project, iid))
        return found

    def commits(self, project: str, iid: int, head: str) -> list[Mapping[str, Any]]:
        """The merge request's commits (``id``, ``message``) when its head is ``head``."""
        key = (self.base, project, iid, head)
        kept = _remembered.commits.get(key)
        if kept is None:
            kept = [c for c in self.pages(f"{self._mr(project, iid)}/commits") if c]
            _remembered.keep_commits(key, kept)
        return kept

    def open_merge_requests(self, project: str) -> list[Mapping[str, Any]]:
        return self.pages(f"{self._project(project)}/merge_requests", {"state": "opened"})

    def approvals(self, project: str, iid: int) -> ApprovalState:
        found = self.request("GET", f"{self._mr(project, iid)}/approvals") or {}
        approvers = sorted(
            str((a.get("user") or {}).get("username", "")) for a in found.get("approved_by") or []
        )
        return ApprovalState(bool(found.get("approved")), tuple(approvers))

    def set_status(
        self, project: str, sha: str, state: str, *, context: str, description: str, url: str = ""
    ) -> None:
        body = {"state": STATES.get(state, state), "name": context, "description": description}
        if url:
            body["target_url"] = url
        self.request("POST", f"{self._project(project)}/statuses/{quoted(sha)}", body)

    def comment(self, project: str, iid: int, text: str) -> None:
        self.request("POST", f"{self._mr(project, iid)}/notes", {"body": text})

    def label(self, project: str, iid: int, add: Sequence[str], remove: Sequence[str]) -> None:
        """Add and remove labels of a merge request (one update)."""
        body = {"add_labels": ",".join(add), "remove_labels": ",".join(remove)}
        self.request("PUT", self._mr(project, iid), body)

    def is_merged(self, project: str, iid: int, sha: str) -> bool:
        """Whether the merge request was merged with ``sha`` as its head."""
        mr = self.merge_request(project, iid)
        return mr.get("state") == "merged" and mr.get("sha") == sha

    def merge(self, project: str, iid: int, sha: str, method: str = "merge") -> None:
        """Merge at ``sha`` (GitLab: 409 if the head moved, 405 if a policy blocks it)."""
        self.request("PUT", f"{self._mr(project, iid)}/merge", {"sha": sha})
