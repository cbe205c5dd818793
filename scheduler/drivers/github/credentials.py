"""Git credentials for a GitHub connection's private repositories.

GitHub serves a private repository over https to a git client that shows a
token as basic auth's password: a GitHub App's installation token as
``x-access-token:<token>`` (or the connection's ``api_token``). Every git
process that talks to such a connection's remote (the merger's fetches,
``sluice enqueue``'s ``ls-remote``) gets that header from
:func:`remote_env`: git's configuration passed in the environment
(``GIT_CONFIG_COUNT``, ``GIT_CONFIG_KEY_<n>``, ``GIT_CONFIG_VALUE_<n>``),
``http.<baseurl>/.extraHeader``, so the header goes to the connection's
``baseurl`` and nowhere else. Never on a command line (``ps`` shows those),
never in a repository's config (the cache is cloned into jobs' workspaces),
and gone with the process. Tokens come from the GitHub client's cache, so
a process asks GitHub for one an hour.

Only ``https`` remotes (and ``http`` on loopback, for tests) carry the
token. A token GitHub will not give (its API down) is logged, and git goes
on without it: a public repository is fetched all the same.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from urllib.parse import urlsplit

from scheduler.drivers import ForgeError
from scheduler.drivers.github.api import GitHubApi
from scheduler.settings.sections import ConnectionSettings

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _carries_token(baseurl: str) -> bool:
    parts = urlsplit(baseurl)
    return parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)


def remote_env(
    connection: ConnectionSettings | None, project: str, env: Mapping[str, str]
) -> dict[str, str]:
    """What to add to ``env`` (a git process's environment) to fetch ``project`` with a token.

    Nothing for a connection that is not GitHub's, has no credentials, or
    whose ``baseurl`` is not https. Configuration ``env`` already passes
    (``GIT_CONFIG_COUNT``) is kept: the header is one more entry.
    """
    if connection is None or connection.driver != "github":
        return {}
    options = connection.options
    if not (options.get("api_token") or options.get("app_id")):
        return {}
    if not _carries_token(connection.baseurl):
        return {}
    try:
        token = GitHubApi(connection).token(project)
    except ForgeError as exc:
        log.warning("%s/%s: no token for git (%s)", connection.name, project, exc)
        return {}
    if not token:
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    count = int(env.get("GIT_CONFIG_COUNT") or 0)
    return {
        "GIT_CONFIG_COUNT": str(count + 1),
        f"GIT_CONFIG_KEY_{count}": f"http.{connection.baseurl.rstrip('/')}/.extraHeader",
        f"GIT_CONFIG_VALUE_{count}": f"Authorization: Basic {basic}",
    }
