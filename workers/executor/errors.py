"""Errors of the executor's job runner (``BuildSpecError`` comes with the spec format).

Each one is a known, explained failure: the runner turns them into a build
result with a readable message (a refusal gives ``ERROR``, a broken
workspace gives ``RETRY``); none of them escapes :func:`run_build`.
"""

from __future__ import annotations

from scheduler.errors import SluiceError
from scheduler.wire.build_spec import BuildSpecError


class ExecutorError(SluiceError):
    """Base of the executor's errors."""


class RefusedError(ExecutorError):
    """The job asks for something the runner will not do.

    A playbook while playbooks are not supported, a path that leaves the
    project checkout, a missing or non-executable file. Retrying cannot
    help, so the build ends with ``ERROR``.
    """


class WorkspaceError(ExecutorError):
    """The workspace could not be prepared (git failed, a commit is missing).

    Usually a matter of infrastructure, so the build ends with ``RETRY``.
    """


class ObjectReadError(ExecutorError):
    """A git object could not be read in-process (missing, corrupt, a bad delta).

    Never the build's result: the in-process checkout that reads objects
    (:mod:`workers.executor.treecheckout`) catches it and leaves the
    checkout to git, which either reads the object or explains.
    """


class BuildCancelledError(ExecutorError):
    """The build was cancelled before its first step (the result is ``ABORTED``)."""


class ResultDataError(ExecutorError):
    """The job's result data file is not a JSON object of acceptable size."""


class ProcessCleanupError(ExecutorError):
    """Processes of a job survived SIGKILL (should not happen; logged loudly)."""


__all__ = [
    "BuildCancelledError",
    "BuildSpecError",
    "ExecutorError",
    "ObjectReadError",
    "ProcessCleanupError",
    "RefusedError",
    "ResultDataError",
    "WorkspaceError",
]
