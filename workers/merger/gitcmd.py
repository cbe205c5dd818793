"""Running the ``git`` command line with a clean, predictable environment.

Every git process of the merger runs through :class:`Git`: no system or user
configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null`` and a
``HOME`` of the merger's own), C locale so messages can be classified, never
a credential prompt, and a time limit. Output is bytes; callers decode what
they know to be text. Errors raise :class:`GitCommandError` with stderr, and
:func:`classify` turns that stderr into the engine's error kinds.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from workers.merger.errors import (
    CorruptRepoError,
    GitCommandError,
    MergerError,
    StaleGitLockError,
    UnknownRefError,
    UnreachableRemoteError,
)

# Environment variables passed through from the worker's environment: what
# git needs to find itself and to reach remotes (ssh agent, proxies).
_PASSTHROUGH = (
    "PATH",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
)

# stderr fragments (C locale) that mean a repository has missing or bad objects.
_CORRUPT = re.compile(
    r"bad object|is corrupt|object file .* is empty|missing (blob|tree|commit|object)"
    r"|unable to read|not a git repository|did not receive expected object"
    r"|invalid index-pack output|possible repository corruption|packfile .* cannot be accessed"
    r"|bad (tree|commit) object|broken link|loose object",
    re.IGNORECASE,
)
_UNKNOWN_REF = re.compile(
    r"couldn't find remote ref|not our ref|unknown revision|invalid refspec"
    r"|no such ref|Needed a single revision|upload-pack: not our ref|unadvertised object",
    re.IGNORECASE,
)
_STALE_LOCK = re.compile(r"Unable to create '[^']*\.lock': File exists", re.IGNORECASE)
_UNREACHABLE = re.compile(
    r"does not appear to be a git repository|Could not read from remote|does not exist"
    r"|Could not resolve host|Connection refused|unable to access|Connection timed out"
    r"|repository .* not found|Authentication failed|Permission denied|Host key verification",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` without a password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def clean_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of every merger git process (see the module docstring)."""
    env = {name: os.environ[name] for name in _PASSTHROUGH if name in os.environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(home),
        LANG="C",
        LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_ASKPASS="true",
    )
    # ssh must never wait for a human either.
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class Git:
    """A git runner bound to an environment and a time limit."""

    env: Mapping[str, str]
    timeout: float = 300.0
    # Extra variables per call site (identity and dates for commits).
    overrides: Mapping[str, str] = field(default_factory=dict)

    def with_env(self, **values: str) -> Git:
        return Git(self.env, self.timeout, {**self.overrides, **values})

    def run(
        self,
        args: Sequence[str],
        cwd: Path | None = None,
        check: bool = True,
        stdin: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``git <args>``; raise :class:`GitCommandError` if ``check`` and it fails."""
        argv = ["git", *args]
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env={**self.env, **self.overrides},
                input=stdin,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            stderr = (exc.stderr or b"").decode("utf-8", "replace")
            message = f"timed out after {self.timeout}s\n{stderr}"
            raise GitCommandError(list(args), -9, message) from None
        if check and proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace")
            raise GitCommandError(list(args), proc.returncode, stderr)
        return proc

    def popen(
        self, args: Sequence[str], cwd: Path, stderr: bool = False
    ) -> subprocess.Popen[bytes]:
        """Start ``git <args>`` with pipes to its stdin, stdout and (``stderr``) stderr.

        For a process driven interactively (:mod:`workers.merger.gitproc`);
        the caller enforces the time limit and reaps it. Without ``stderr``,
        git's messages are discarded.
        """
        return subprocess.Popen(
            ["git", *args],
            cwd=cwd,
            env={**self.env, **self.overrides},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
        )

    def text(self, args: Sequence[str], cwd: Path | None = None) -> str:
        """stdout of ``git <args>`` as text, trailing newline removed."""
        return self.run(args, cwd).stdout.decode("utf-8", "replace").rstrip("\n")

    def ok(self, args: Sequence[str], cwd: Path | None = None) -> bool:
        """Whether ``git <args>`` succeeds (for questions such as ``cat-file -e``)."""
        return self.run(args, cwd, check=False).returncode == 0


def classify(exc: GitCommandError, what: str) -> MergerError:
    """Map a failed git command to the error kind a result reports; ``what`` names it."""
    detail = _last_lines(exc.stderr)
    if _STALE_LOCK.search(exc.stderr):
        return StaleGitLockError(f"{what}: a killed git left a lock file: {detail}")
    if _UNKNOWN_REF.search(exc.stderr):
        return UnknownRefError(f"{what}: unknown ref: {detail}")
    if _CORRUPT.search(exc.stderr):
        return CorruptRepoError(f"{what}: corrupt repository: {detail}")
    if _UNREACHABLE.search(exc.stderr) or exc.returncode == -9:
        return UnreachableRemoteError(f"{what}: remote unreachable: {detail}")
    return MergerError(f"{what}: {exc}")


def _last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:]) if lines else "(no message)"
