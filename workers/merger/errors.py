"""Errors of the merger's git engine.

Every one derives from :class:`scheduler.errors.SluiceError`. Inside the
engine they travel as exceptions; at the job boundary (``run_merge_job`` and
the other job functions) each becomes a :class:`~scheduler.wire.merger.Failure`
in the result, so a caller never sees a git problem as a crash.
"""

from __future__ import annotations

from scheduler.errors import SluiceError
from scheduler.wire.merger import InvalidRecordError


class MergerError(SluiceError):
    """Base of the merger's errors; ``kind`` names the failure in results."""

    kind = "error"
    # Context filled in where it is known, for the failure result.
    ref: str = ""
    change_index: int | None = None

    def at(self, ref: str = "", change_index: int | None = None) -> MergerError:
        """This error with the ref (and change) it concerns; returns self."""
        self.ref = ref or self.ref
        self.change_index = self.change_index if change_index is None else change_index
        return self


class InvalidJobError(MergerError, InvalidRecordError):
    """A job's input is malformed (unknown connection, bad name, bad mode).

    Also an :class:`~scheduler.wire.merger.InvalidRecordError`, which is what
    decoding a malformed record raises: one ``except`` catches both.
    """

    kind = "invalid"


class GitCommandError(MergerError):
    """A git command exited non-zero; carries the command and its stderr."""

    kind = "git-error"

    def __init__(self, args: list[str], returncode: int, stderr: str) -> None:
        self.command = args
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {' '.join(args)} exited {returncode}: {stderr.strip()}")


class UnreachableRemoteError(MergerError):
    """The remote of a project cannot be cloned or fetched from."""

    kind = "unreachable"


class UnknownRefError(MergerError):
    """A ref or commit named by a job does not exist in the remote."""

    kind = "unknown-ref"


class CorruptRepoError(MergerError):
    """A repository (the cache or the remote) is missing or has bad objects."""

    kind = "corrupt"


class MergeConflictError(MergerError):
    """A change does not apply on top of the changes ahead of it."""

    kind = "conflict"

    def __init__(self, message: str, files: list[str]) -> None:
        super().__init__(message)
        self.files = files


class StaleGitLockError(MergerError):
    """A git ``*.lock`` file left by a killed git process blocks an update."""

    kind = "stale-lock"


class RepoLockTimeoutError(MergerError):
    """Another process held a repository's lock for longer than allowed."""

    kind = "lock-timeout"
