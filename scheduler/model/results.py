"""Zuul's result vocabulary, shared by builds, buildsets, the scheduler and SQL.

The values are stored in the database and printed by ``sluice builds
--json``: a stable interface. New values may be added, existing ones are
never renamed (the SQL column is a plain string, so adding one needs no
migration).
"""

from __future__ import annotations

import enum


class Result(enum.StrEnum):
    """The outcome of a build attempt, a job, an item or a buildset."""

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
    # The worker running the attempt died (the scheduler retries it; SQL records RETRY).
    LOST = "LOST"

    @property
    def is_success(self) -> bool:
        return self is Result.SUCCESS

    @property
    def is_final(self) -> bool:
        """False only for an attempt that another attempt replaces."""
        return self not in RETRYABLE


# A build that ended with one of these is run again while attempts remain.
RETRYABLE = frozenset({Result.RETRY, Result.LOST})
