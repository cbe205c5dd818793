"""A small GitHub REST client: what the driver reads and writes, nothing more.

Connection keys (Zuul's names where Zuul has them)::

    github:
      driver: github
      server: github.com            # GitHub Enterprise: its host name
      api_url: https://...          # Sluice's own: the API root, if not derived from server
      api_token: <token>            # a personal or bot token, or:
      app_id: 12345                 # a GitHub App: its id and private key (PEM file);
      app_key: /etc/sluice/app.pem  # installation tokens are fetched and renewed
      webhook_token: <secret>

Rate limits are respected (:mod:`scheduler.drivers.rest`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from scheduler.drivers import ForgeError, rest
from scheduler.settings import ConnectionSettings

log = logging.getLogger(__name__)


class GitHubError(ForgeError):
    """GitHub refused or failed a request."""


# (connection name, credential) -> True once GitHub refused that connection's check runs
_CHECKS_REFUSED: dict[tuple[str, str], bool] = {}


def api_url(connection: ConnectionSettings) -> str:
    given = str(connection.options.get("api_url") or "")
    if given:
        return given.rstrip("/")
    server = str(connection.options.get("server") or "github.com")
    return "https://api.github.com" if server == "github.com" else f"https://{server}/api/v3"


class GitHubApi:
    """One connection's client; thread-safe (tokens are kept under a lock)."""

    def __init__(
        self, connection: ConnectionSettings, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.connection = connection
        self.base = api_url(connection)
        self.sleep = sleep
        self._lock = threading.Lock()
        self._installation_tokens: dict[str, tuple[str, float]] = {}

    @property
    def _identity(self) -> tuple[str, str]:
        """The connection and who it is to GitHub (an App's id, or a token's user)."""
        options = self.connection.options
        who = "token" if options.get("api_token") else f"app:{options.get('app_id')}"
        return self.connection.name, who

    # -- authentication ---------------------------------------------------------

    def _app_jwt(self) -> str:
        import jwt

        key = Path(str(self.connection.options["app_key"])).read_text()
        now = int(time.time())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(self.connection.options["app_id"])}
        return jwt.encode(claims, key, algorithm="RS256")

    def _token_for(self, project: str) -> str:
        options = self.connection.options
        if options.get("api_token"):
            return f"token {options['api_token']}"
        if not options.get("app_id"):
            return ""
        with self._lock:
            cached = self._installation_tokens.get(project)
            if cached and cached[1] > time.time() + 60:
                return f"token {cached[0]}"
        bearer = f"Bearer {self._app_jwt()}"
        installation = self._call("GET", f"/repos/{project}/installation", auth=bearer)
        answer = self._call(
            "POST", f"/app/installations/{installation['id']}/access_tokens", auth=bearer
        )
        expires = time.time() + 3000  # GitHub's tokens last an hour
        with self._lock:
            self._installation_tokens[project] = (str(answer["token"]), expires)
        return f"token {answer['token']}"

    # -- calls --------------------------------------------------------------------

    def request(self, method: str, path: str, project: str, body: Any = None) -> Any:
        return self._call(method, path, body, auth=self._token_for(project))

    def _call(self, method: str, path: str, body: Any = None, *, auth: str = "") -> Any:
        headers = {"Accept": "application/vnd.github+json"}
        if auth:
            headers["Authorization"] = auth
        return rest.call(
            "GitHub",
            GitHubError,
            self.base + path,
            method,
            headers=headers,
            body=body,
            sleep=self.sleep,
            timeout=float(self.connection.options.get("api_timeout") or rest.TIMEOUT),
        )

    # -- what the driver uses -------------------------------------------------------

    def pull(self, project: str, number: int) -> Mapping[str, Any]:
        found: Mapping[str, Any] = self.request("GET", f"/repos/{project}/pulls/{number}", project)
        return found

    def reviews(self, project: str, number: int) -> list[Mapping[str, Any]]:
        found = self.request("GET", f"/repos/{project}/pulls/{number}/reviews", project)
        return list(found or [])

    def pulls_of_commit(self, project: str, sha: str) -> list[Mapping[str, Any]]:
        """The pull requests whose head (or history) holds ``sha``."""
        return list(self.request("GET", f"/repos/{project}/commits/{sha}/pulls", project) or [])

    def commit_messages(self, project: str, number: int) -> list[str]:
        """The messages of the pull request's commits (the first 100)."""
        path = f"/repos/{project}/pulls/{number}/commits?per_page=100"
        found = self.request("GET", path, project) or []
        return [str((c.get("commit") or {}).get("message", "")) for c in found]

    def open_pulls(self, project: str) -> list[Mapping[str, Any]]:
        """The repository's open pull requests (the first 100)."""
        found = self.request("GET", f"/repos/{project}/pulls?state=open&per_page=100", project)
        return list(found or [])

    def commits_between(self, project: str, base: str, head: str) -> list[str]:
        """The commits on ``head`` that ``base`` does not have (GitHub's compare)."""
        found = self.request("GET", f"/repos/{project}/compare/{base}...{head}", project)
        return [str(c.get("sha", "")) for c in (found or {}).get("commits") or []]

    def statuses(self, project: str, sha: str) -> list[str]:
        """The commit's latest status per context, as ``<context>:<state>``."""
        found = self.request("GET", f"/repos/{project}/commits/{sha}/statuses", project)
        latest: dict[str, str] = {}
        for status in reversed(list(found or [])):  # GitHub lists the newest first
            latest[str(status.get("context", ""))] = str(status.get("state", ""))
        return sorted(f"{context}:{state}" for context, state in latest.items())

    def set_status(
        self, project: str, sha: str, state: str, *, context: str, description: str, url: str = ""
    ) -> None:
        body = {"state": state, "context": context, "description": description[:140]}
        if url:
            body["target_url"] = url
        self.request("POST", f"/repos/{project}/statuses/{sha}", project, body)

    def set_check_run(
        self, project: str, sha: str, conclusion: str, *, name: str, summary: str
    ) -> None:
        """A completed check run named ``name`` on ``sha`` (GitHub Apps only, as Zuul's).

        GitHub refuses check runs (403) to whatever is not an App's
        installation token with the ``checks`` permission: that is said once
        per connection and process, and the connection's check runs are
        skipped from then on (the status and the comment carry the report).
        """
        refused = _CHECKS_REFUSED.get(self._identity)
        if refused:
            return
        body = {
            "name": name,
            "head_sha": sha,
            "status": "completed",
            "conclusion": conclusion,
            "output": {"title": summary.splitlines()[0], "summary": summary[:60000]},
        }
        try:
            self.request("POST", f"/repos/{project}/check-runs", project, body)
        except GitHubError as exc:
            if exc.status != 403:
                raise
            _CHECKS_REFUSED[self._identity] = True
            log.warning(
                "%s: GitHub refuses check runs (%s); statuses and comments only from now on "
                "(check runs need a GitHub App with the checks permission)",
                self.connection.name,
                exc,
            )

    def comment(self, project: str, number: int, text: str) -> None:
        path = f"/repos/{project}/issues/{number}/comments"
        self.request("POST", path, project, {"body": text})

    def is_merged(self, project: str, number: int, sha: str) -> bool:
        """Whether the pull request was merged with ``sha`` as its head."""
        pull = self.pull(project, number)
        return bool(pull.get("merged")) and (pull.get("head") or {}).get("sha") == sha

    def merge(self, project: str, number: int, sha: str, method: str = "merge") -> None:
        body = {"sha": sha, "merge_method": method}
        self.request("PUT", f"/repos/{project}/pulls/{number}/merge", project, body)
