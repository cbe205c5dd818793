"""Errors of the ZooKeeper layer, all rooted in :class:`scheduler.errors.SluiceError`.

Callers outside ``scheduler/zk`` never see a kazoo exception for the failures
named here: the layer translates them, so a task can map them to a Celery
retry (``ZooKeeperUnavailableError``, ``CallTimeoutError``) or to "someone
else owns this now" (``LockLostError``, ``FencedWriteError``).
"""

from __future__ import annotations

from scheduler.errors import SluiceError


class ZooKeeperError(SluiceError):
    """Base of every error raised deliberately by ``scheduler.zk``."""


class ZooKeeperUnavailableError(ZooKeeperError):
    """No connection to ZooKeeper (connection loss, no quorum); retry later."""


class CallTimeoutError(ZooKeeperUnavailableError):
    """A ZooKeeper call did not answer within its deadline."""


class AccessDeniedError(ZooKeeperError):
    """ZooKeeper refused access (ACL or authentication); not retryable."""


class InvalidNameError(ZooKeeperError, ValueError):
    """A name cannot become a path segment (it is empty)."""


class LockLostError(ZooKeeperError):
    """The lock this context relied on is no longer held (or no longer provably held).

    Raised before a write when the session was LOST, replaced, or when
    ZooKeeper has not answered for two thirds of the session timeout.
    """


class FencedWriteError(LockLostError):
    """ZooKeeper refused a fenced transaction: the holder's lock node is gone."""


class TransactionFailedError(ZooKeeperError):
    """A transaction was rejected; ``index`` and ``cause`` name the failing operation."""

    def __init__(self, message: str, index: int, cause: Exception) -> None:
        super().__init__(message)
        self.index = index
        self.cause = cause


class DataTooLargeError(ZooKeeperError):
    """Data that can never be stored: more than the configured maximum, even sharded."""


class DecodeError(ZooKeeperError):
    """Stored bytes that are not a valid Sluice object (corrupt, foreign or future schema)."""


class NewerSchemaError(DecodeError):
    """Data written with a newer schema than this Sluice reads (a rolling upgrade)."""


class NoDataError(ZooKeeperError):
    """The object does not exist (or is still being written)."""


class ConflictError(ZooKeeperError):
    """A compare-and-set lost a race (the node changed since it was read)."""
