"""Zuul's vocabulary of build and buildset results, as a ``str`` Enum.

The values are stored in the database and printed by ``sluice builds
--json``; they are a stable interface. New values may be added, existing
ones are never renamed. The column is a plain string (not a native database
enum), so adding a value needs no migration.
"""

from __future__ import annotations

from enum import StrEnum


class BuildResult(StrEnum):
    """The outcome of a build attempt or of a whole buildset."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    TIMED_OUT = "TIMED_OUT"
    ABORTED = "ABORTED"
    # This attempt failed in a way worth retrying; another attempt follows.
    RETRY = "RETRY"
    # The last allowed attempt also asked for a retry.
    RETRY_LIMIT = "RETRY_LIMIT"
    POST_FAILURE = "POST_FAILURE"
    MERGE_CONFLICT = "MERGE_CONFLICT"
    CONFIG_ERROR = "CONFIG_ERROR"
    # Not run: a hard dependency failed, or the job did not match.
    SKIPPED = "SKIPPED"
    # The item left the pipeline before the build ended.
    DEQUEUED = "DEQUEUED"
    NODE_FAILURE = "NODE_FAILURE"
    ERROR = "ERROR"

    @property
    def is_success(self) -> bool:
        return self is BuildResult.SUCCESS

    @property
    def is_final(self) -> bool:
        """False only for an attempt that another attempt replaces."""
        return self is not BuildResult.RETRY


# Longest value, with room to grow; the width of the result columns.
RESULT_LENGTH = 32
