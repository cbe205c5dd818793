"""Resolving refs of a connection's repositories (``git ls-remote``).

The git driver's poller lists them; ``sluice enqueue`` checks that the ref
and target branch exist before it enqueues anything, so a typo is an error
at once rather than a merge failure later. Works for every baseurl kind (local path, file://, ssh,
https) because ``ls-remote`` does.
"""

from __future__ import annotations

import os
import re
import subprocess

from scheduler.drivers.github.credentials import remote_env
from scheduler.errors import SluiceError
from scheduler.settings.sections import ConnectionSettings

SHA = re.compile(r"^[0-9a-f]{40}$")


class RefError(SluiceError):
    """A ref could not be resolved (unknown, or the repository is unreachable)."""


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1")
    return env


def list_refs(
    connection: ConnectionSettings, project: str, timeout: float = 30.0
) -> dict[str, str]:
    """Every ref of the project's repository and its commit.

    A GitHub connection's private repository is asked with the connection's
    token (:func:`scheduler.drivers.github.credentials.remote_env`).
    """
    url = connection.project_url(project)
    env = _git_env()
    env.update(remote_env(connection, project, env))
    try:
        done = subprocess.run(
            ["git", "ls-remote", "--", url],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RefError(f"{connection.name}/{project}: no answer within {timeout:.0f}s") from None
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()[-1:] or ["git ls-remote failed"]
        raise RefError(f"{connection.name}/{project}: repository unreachable: {detail[0]}")
    refs: dict[str, str] = {}
    for line in done.stdout.splitlines():
        sha, _, name = line.partition("\t")
        refs[name] = sha
    return refs


def resolve(
    refs: dict[str, str], ref: str, connection: ConnectionSettings | None = None, project: str = ""
) -> str | None:
    """The commit ``ref`` names: a full ref, a branch or tag name, or a commit.

    A commit that is no ref's tip can only be checked in a local repository
    (``connection`` and ``project`` given); elsewhere it is not found.
    """
    for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}"):
        if name in refs:
            return refs[name]
    if not SHA.match(ref):
        return None
    if ref in refs.values():
        return ref
    if connection is not None and "://" not in connection.baseurl:
        done = subprocess.run(
            [
                "git",
                "--git-dir",
                connection.project_url(project),
                "cat-file",
                "-e",
                f"{ref}^{{commit}}",
            ],
            capture_output=True,
            timeout=30,
            env=_git_env(),
            check=False,
        )
        if done.returncode == 0:
            return ref
    return None
