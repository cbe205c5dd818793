"""A small GitHub REST client: what the driver reads and writes, nothing more.

Connection keys (Zuul's names where Zuul has them)::

    github:
      driver: github
      server: github.com            # GitHub Enterprise: its host name
      api_url: https://...          # Sluice's own: the API root, if not derived from server
      api_token: <token>            # a personal or bot token, or:
      app_id: 12345                 # a GitHub App: its id and private key (PEM file,
      app_key: keys/app.pem         # relative to sluice.yaml's folder)
      webhook_token: <secret>

A status links to its buildset's page on the web: ``target_url`` is
``<web.public_url>/t/<tenant>/buildset/<uuid>`` (the reporter gives it;
without ``public_url``, the web's listen address). Zuul's ``status_url``
is ``web.public_url`` here.

**Names.** Every name that goes into a URL is quoted (``project``'s two
parts, branches, shas); a project that is no GitHub repository name
(``owner/name`` of letters, digits, ``-``, ``_``, ``.``; not ``.`` or
``..``) is refused before any call (:func:`is_repository`).

**Lists** are read whole, 100 a page, following GitHub's ``Link``
(:func:`scheduler.drivers.rest.call_pages`).

**Installation tokens** (a GitHub App) are kept per installation until
five minutes before the ``expires_at`` GitHub gave them, in one cache per
connection and App per process (:class:`InstallationTokens`), shared by
every client of that connection: a process asks GitHub for one token an
hour, whatever the number of clients it makes. A token GitHub refuses
(401) is dropped and fetched again, once.

**Check runs** are for GitHub Apps: GitHub answers 403 to a personal token
(or an App without the ``checks`` permission). The first refusal is
logged and the connection's check runs are left out in this process from
then on; the status and the comment still carry the report.

Rate limits are respected (:mod:`scheduler.drivers.rest`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from scheduler.drivers import ForgeError, rest
from scheduler.settings.sections import ConnectionSettings

log = logging.getLogger(__name__)

# items a page when a list is read (GitHub's most)
PER_PAGE = 100
# an installation token is renewed this many seconds before it expires
TOKEN_MARGIN = 300.0
# how long a token lasts when GitHub's answer does not say (GitHub's: an hour)
TOKEN_LIFETIME = 3600.0

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")


class GitHubError(ForgeError):
    """GitHub refused or failed a request."""


def is_repository(name: str) -> bool:
    """Whether ``name`` could be a GitHub repository's ``owner/name``."""
    parts = name.split("/")
    return len(parts) == 2 and all(
        _NAME.fullmatch(part) is not None and part not in (".", "..") for part in parts
    )


def repo_path(project: str) -> str:
    """``/repos/<owner>/<name>``, quoted; :class:`GitHubError` for a name GitHub cannot have."""
    if not is_repository(project):
        message = f"{project!r} is not a GitHub repository name"
        raise GitHubError(message) from ValueError(message)  # the caller's fault, not GitHub's
    return "/repos/" + "/".join(quote(part, safe="") for part in project.split("/"))


def api_url(connection: ConnectionSettings) -> str:
    given = str(connection.options.get("api_url") or "")
    if given:
        return given.rstrip("/")
    server = str(connection.options.get("server") or "github.com")
    return "https://api.github.com" if server == "github.com" else f"https://{server}/api/v3"


@dataclass
class InstallationTokens:
    """A GitHub App's installation tokens in this process: one per installation.

    ``installations`` maps a repository to its installation, ``tokens`` an
    installation to its token and the time to renew it. One lock: two
    threads that need the same token fetch it once.
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    installations: dict[str, int] = field(default_factory=dict)
    tokens: dict[int, tuple[str, float]] = field(default_factory=dict)

    def forget(self, project: str) -> None:
        with self.lock:
            installation = self.installations.pop(project, None)
            if installation is not None:
                self.tokens.pop(installation, None)


# (connection name, API root, App id) -> that App's tokens in this process
_APPS: dict[tuple[str, str, str], InstallationTokens] = {}
_CACHES_LOCK = threading.Lock()
# (connection, API root, project, number, head) -> that head's commits, the oldest dropped first
_COMMITS: dict[tuple[str, str, str, int, str], list[tuple[str, str]]] = {}
KEPT_COMMIT_LISTS = 1000
# (connection name, API root, credential) -> True once GitHub refused their check runs
_CHECKS_REFUSED: dict[tuple[str, str, str], bool] = {}
# (connection name, API root, credential) -> the login GitHub knows them by
_LOGINS: dict[tuple[str, str, str], str] = {}


def app_tokens(connection: ConnectionSettings) -> InstallationTokens:
    """The process's token cache of the connection's App (made on first use)."""
    key = (connection.name, api_url(connection), str(connection.options.get("app_id") or ""))
    with _CACHES_LOCK:
        return _APPS.setdefault(key, InstallationTokens())


def renew_time(answer: Mapping[str, Any], now: float) -> float:
    """When to renew a token GitHub just gave: :data:`TOKEN_MARGIN` before its ``expires_at``.

    A token that lives less than twice the margin is renewed halfway.
    """
    try:
        stamp = str(answer["expires_at"]).replace("Z", "+00:00")
        expires = datetime.fromisoformat(stamp).timestamp()
    except (KeyError, ValueError):
        expires = now + TOKEN_LIFETIME
    return expires - min(TOKEN_MARGIN, max(0.0, expires - now) / 2)


class GitHubApi:
    """One connection's client; thread-safe (tokens are kept under a lock)."""

    def __init__(
        self, connection: ConnectionSettings, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.connection = connection
        self.base = api_url(connection)
        self.sleep = sleep
        self.timeout = float(connection.options.get("api_timeout") or rest.TIMEOUT)
        self._app = app_tokens(connection) if self._uses_app else None

    @property
    def _uses_app(self) -> bool:
        options = self.connection.options
        return not options.get("api_token") and bool(options.get("app_id"))

    @property
    def _identity(self) -> tuple[str, str, str]:
        """The connection, its GitHub and who it is there (an App's id, or a token's user)."""
        who = f"app:{self.connection.options['app_id']}" if self._uses_app else "token"
        return self.connection.name, self.base, who

    # -- authentication ---------------------------------------------------------

    def _app_jwt(self) -> str:
        import jwt

        key = Path(str(self.connection.options["app_key"])).read_text()
        now = int(time.time())
        claims = {"iat": now - 60, "exp": now + 540, "iss": str(self.connection.options["app_id"])}
        return jwt.encode(claims, key, algorithm="RS256")

    def token(self, project: str) -> str:
        """The credential for ``project``: the token, or the App's installation token ("": none)."""
        options = self.connection.options
        if not self._uses_app:
            return str(options.get("api_token") or "")
        app = self._app
        assert app is not None
        with app.lock:  # held while fetching: one fetch per installation, not one per thread
            installation = app.installations.get(project)
            cached = app.tokens.get(installation) if installation is not None else None
            if cached and cached[1] > time.time():
                return cached[0]
            bearer = f"Bearer {self._app_jwt()}"
            if installation is None:
                found = self._call("GET", f"{repo_path(project)}/installation", auth=bearer)
                installation = app.installations[project] = int(found["id"])
            answer = self._call(
                "POST", f"/app/installations/{installation}/access_tokens", auth=bearer
            )
            token = str(answer["token"])
            app.tokens[installation] = (token, renew_time(answer, time.time()))
        log.info("%s: installation token for %s fetched", self.connection.name, project)
        return token

    def _authorized(self, project: str, call: Callable[[str], Any]) -> Any:
        """``call(authorization)``; an installation token GitHub refuses is renewed once."""
        token = self.token(project)
        try:
            return call(f"token {token}" if token else "")
        except GitHubError as exc:
            if exc.status != 401 or self._app is None:
                raise
            log.warning("%s: installation token refused, fetching another", self.connection.name)
            self._app.forget(project)
            return call(f"token {self.token(project)}")

    # -- calls --------------------------------------------------------------------

    def request(self, method: str, path: str, project: str, body: Any = None) -> Any:
        return self._authorized(project, lambda auth: self._call(method, path, body, auth=auth))

    def listing(self, path: str, project: str, **query: str) -> list[Any]:
        """Every item of the list at ``path`` (all its pages)."""
        url = f"{self.base}{path}?{urlencode({**query, 'per_page': str(PER_PAGE)})}"
        return list(
            self._authorized(
                project,
                lambda auth: rest.call_pages(
                    "GitHub",
                    GitHubError,
                    url,
                    headers=self._headers(auth),
                    sleep=self.sleep,
                    timeout=self.timeout,
                ),
            )
        )

    def _headers(self, auth: str) -> dict[str, str]:
        headers = {"Accept": "application/vnd.github+json"}
        if auth:
            headers["Authorization"] = auth
        return headers

    def _call(self, method: str, path: str, body: Any = None, *, auth: str = "") -> Any:
        return rest.call(
            "GitHub",
            GitHubError,
            self.base + path,
            method,
            headers=self._headers(auth),
            body=body,
            sleep=self.sleep,
            timeout=self.timeout,
        )

    # -- what the driver uses -------------------------------------------------------

    def login(self) -> str:
        """Who this connection writes as on GitHub, asked once a process.

        A token's user (``GET /user``), or an App's bot, ``<slug>[bot]``
        (``GET /app``). "" when GitHub does not say (asked again next time).
        """
        key = self._identity
        known = _LOGINS.get(key)
        if known is not None:
            return known
        try:
            if self._uses_app:
                app = self._call("GET", "/app", auth=f"Bearer {self._app_jwt()}")
                found = f"{app['slug']}[bot]"
            else:
                found = str(self.request("GET", "/user", "")["login"])
        except (GitHubError, KeyError, TypeError) as exc:
            log.warning("%s: who the connection is on GitHub is unknown: %s", key[0], exc)
            return ""
        _LOGINS[key] = found
        return found

    def pull(self, project: str, number: int) -> Mapping[str, Any]:
        found: Mapping[str, Any] = self.request(
            "GET", f"{repo_path(project)}/pulls/{int(number)}", project
        )
        return found

    def reviews(self, project: str, number: int) -> list[Mapping[str, Any]]:
        return self.listing(f"{repo_path(project)}/pulls/{int(number)}/reviews", project)

    def pulls_of_commit(self, project: str, sha: str) -> list[Mapping[str, Any]]:
        """The pull requests whose head (or history) holds ``sha``."""
        return self.listing(f"{repo_path(project)}/commits/{_quoted(sha)}/pulls", project)

    def pull_commits(self, project: str, number: int, head: str = "") -> list[tuple[str, str]]:
        """``(sha, message)`` of the pull request's commits (GitHub lists at most 250).

        Given the ``head`` they were read for, they are kept in the process
        (:data:`KEPT_COMMIT_LISTS` lists): a head's commits do not change.
        """
        key = (self.connection.name, self.base, project, int(number), head)
        kept = _COMMITS.get(key) if head else None
        if kept is not None:
            return kept
        found = self.listing(f"{repo_path(project)}/pulls/{int(number)}/commits", project)
        commits = [
            (str(c.get("sha", "")), str((c.get("commit") or {}).get("message", ""))) for c in found
        ]
        if head and commits and commits[-1][0] == head:  # GitHub lists the head last
            with _CACHES_LOCK:
                _COMMITS[key] = commits
                while len(_COMMITS) > KEPT_COMMIT_LISTS:
                    del _COMMITS[next(iter(_COMMITS))]
        return commits

    def commit_messages(self, project: str, number: int) -> list[str]:
        """The messages of the pull request's commits."""
        return [message for _, message in self.pull_commits(project, number)]

    def open_pulls(self, project: str) -> list[Mapping[str, Any]]:
        """The repository's open pull requests, newest first."""
        return self.listing(f"{repo_path(project)}/pulls", project, state="open")

    def commits_between(self, project: str, base: str, head: str) -> list[str]:
        """The commits on ``head`` that ``base`` does not have (GitHub's compare)."""
        path = f"{repo_path(project)}/compare/{quote(base, safe='/')}...{_quoted(head)}"
        found = self.request("GET", path, project)
        return [str(c.get("sha", "")) for c in (found or {}).get("commits") or []]

    def statuses(self, project: str, sha: str) -> list[str]:
        """The commit's latest status per context, as ``<context>:<state>``."""
        found = self.listing(f"{repo_path(project)}/commits/{_quoted(sha)}/statuses", project)
        latest: dict[str, str] = {}
        for status in reversed(found):  # GitHub lists the newest first
            latest[str(status.get("context", ""))] = str(status.get("state", ""))
        return sorted(f"{context}:{state}" for context, state in latest.items())

    def set_status(
        self, project: str, sha: str, state: str, *, context: str, description: str, url: str = ""
    ) -> None:
        body = {"state": state, "context": context, "description": description[:140]}
        if url:
            body["target_url"] = url
        self.request("POST", f"{repo_path(project)}/statuses/{_quoted(sha)}", project, body)

    def set_check_run(
        self, project: str, sha: str, conclusion: str, *, name: str, summary: str
    ) -> None:
        """A completed check run named ``name`` on ``sha`` (GitHub Apps only, as Zuul's).

        GitHub refuses check runs (403) to whatever is not an App's
        installation token with the ``checks`` permission: that is said once
        per connection and process, and the connection's check runs are
        skipped from then on (the status and the comment carry the report).
        """
        if _CHECKS_REFUSED.get(self._identity):
            return
        body = {
            "name": name,
            "head_sha": sha,
            "status": "completed",
            "conclusion": conclusion,
            "output": {"title": summary.splitlines()[0], "summary": summary[:60000]},
        }
        try:
            self.request("POST", f"{repo_path(project)}/check-runs", project, body)
        except GitHubError as exc:
            if exc.status != 403 or exc.rate_limited:
                raise
            _CHECKS_REFUSED[self._identity] = True
            log.warning(
                "%s: GitHub refuses check runs (%s); statuses and comments only from now on "
                "(check runs need a GitHub App with the checks permission)",
                self.connection.name,
                exc.reason or exc,
            )

    def comment(self, project: str, number: int, text: str) -> None:
        path = f"{repo_path(project)}/issues/{int(number)}/comments"
        self.request("POST", path, project, {"body": text})

    def label(self, project: str, number: int, add: Sequence[str], remove: Sequence[str]) -> None:
        """Add and remove labels of a pull request (a label it lacks is not removed)."""
        path = f"{repo_path(project)}/issues/{int(number)}/labels"
        if add:
            self.request("POST", path, project, {"labels": list(add)})
        for name in remove:
            try:
                self.request("DELETE", f"{path}/{_quoted(name)}", project)
            except GitHubError as exc:
                if exc.status != HTTPStatus.NOT_FOUND:
                    raise

    def is_merged(self, project: str, number: int, sha: str) -> bool:
        """Whether the pull request was merged with ``sha`` as its head."""
        pull = self.pull(project, number)
        return bool(pull.get("merged")) and (pull.get("head") or {}).get("sha") == sha

    def merge(self, project: str, number: int, sha: str, method: str = "merge") -> None:
        body = {"sha": sha, "merge_method": method}
        self.request("PUT", f"{repo_path(project)}/pulls/{int(number)}/merge", project, body)


def _quoted(name: str) -> str:
    """A sha or ref as one path segment."""
    return quote(name, safe="")
