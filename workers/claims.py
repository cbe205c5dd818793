"""Completing a claimed request: one fenced write, retried through brief outages.

Shared by the merger and the executor. The completion (state COMPLETED, the
result, the request-completed event, the lock deleted) is one transaction
fenced by the claim (:meth:`JobRequestQueue.complete`). It is retried with
back-off when ZooKeeper is unavailable, and also when the write was refused
only because the connection is SUSPENDED for less than the watchdog's
bound: the session, and with it the claim, may well survive (an ensemble
election suspends every client for about a second). A retry after an
unanswered attempt first checks whether that attempt did commit this very
result. Only a claim really lost (session expired or replaced) gives up:
the sweep then records the request as lost.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from scheduler.zk.client import WATCHDOG_FRACTION, ConnectionState, ZooKeeperClient
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError
from scheduler.zk.job_requests import ClaimedRequest, JobRequestQueue

log = logging.getLogger(__name__)

COMPLETE_ATTEMPTS = 4
COMPLETE_BACKOFF = 0.5


class Completion(enum.StrEnum):
    COMPLETED = "completed"  # the result is stored
    REMOVED = "removed"  # the submitter removed the request meanwhile; nothing stored
    LOCK_LOST = "lock-lost"  # the claim is gone; the sweep records the request as lost


def briefly_suspended(client: ZooKeeperClient, claimed: ClaimedRequest) -> bool:
    """Suspended, same session, and silent for less than the watchdog's bound."""
    return (
        client.state == ConnectionState.SUSPENDED
        and client.session_generation == claimed.context.generation
        and client.silent_for() < WATCHDOG_FRACTION * client.session_timeout
    )


def _stored_before(queue: JobRequestQueue, claimed: ClaimedRequest, data: Any) -> bool:
    """Did an earlier, unanswered completion commit this very result?"""
    try:
        stored = queue.get_result(claimed.uuid)
    except ZooKeeperUnavailableError:
        return False  # unknown; either way safe (completed stays completed, lost is recorded)
    return stored is not None and not stored.lost and stored.result == data


def complete(
    queue: JobRequestQueue, claimed: ClaimedRequest, result: Mapping[str, Any], what: str
) -> Completion:
    """Store ``result`` for ``claimed``; ``what`` (merge, build) names it in logs."""
    normal = json.loads(json.dumps(result))  # as it reads back from ZooKeeper
    delay = COMPLETE_BACKOFF
    for attempt in range(1, COMPLETE_ATTEMPTS + 1):
        try:
            try:
                stored = queue.complete(claimed, result)
            except LockLostError as exc:
                if not briefly_suspended(queue.client, claimed):
                    raise
                raise ZooKeeperUnavailableError(str(exc)) from exc  # retry like an outage
        except LockLostError as exc:
            if attempt > 1 and _stored_before(queue, claimed, normal):
                return Completion.COMPLETED
            log.warning("%s request %s: result not stored, claim lost: %s", what, claimed.uuid, exc)
            return Completion.LOCK_LOST
        except ZooKeeperUnavailableError as exc:
            if attempt == COMPLETE_ATTEMPTS:
                raise
            log.warning(
                "%s request %s: completing failed (%s), attempt %d of %d",
                what,
                claimed.uuid,
                exc,
                attempt,
                COMPLETE_ATTEMPTS,
            )
            time.sleep(delay)  # back-off before a retry, not synchronization
            delay *= 2
            continue
        return Completion.COMPLETED if stored else Completion.REMOVED
    raise AssertionError("unreachable")
