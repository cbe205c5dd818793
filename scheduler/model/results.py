"""Zuul's result vocabulary, shared by builds, buildsets and reporters."""

from __future__ import annotations

import enum


class Result(enum.StrEnum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    TIMED_OUT = "TIMED_OUT"
    ABORTED = "ABORTED"
    RETRY = "RETRY"
    RETRY_LIMIT = "RETRY_LIMIT"
    POST_FAILURE = "POST_FAILURE"
    MERGE_CONFLICT = "MERGE_CONFLICT"
    CONFIG_ERROR = "CONFIG_ERROR"
    SKIPPED = "SKIPPED"
    DEQUEUED = "DEQUEUED"
    NODE_FAILURE = "NODE_FAILURE"
    ERROR = "ERROR"
    LOST = "LOST"


# A build that ended with one of these is run again while attempts remain.
RETRYABLE = frozenset({Result.RETRY, Result.LOST})
