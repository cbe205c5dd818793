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
from collections.abc import Mapping
from typing import Any

from scheduler.stores.job_requests import ClaimedRequest, JobRequestQueue
from scheduler.zk.client import WATCHDOG_FRACTION, ConnectionState, ZooKeeperClient
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError
from scheduler.zk.retry import OUTAGE

log = logging.getLogger(__name__)


class Delivery(enum.StrEnum):
    """What one delivery of a worker task (a merge, a build) did: one vocabulary for both."""

    COMPLETED = "completed"  # ran (or was refused) and its result is stored
    DUPLICATE = "duplicate"  # nothing to claim: another delivery has it, or it is done
    REMOVED = "removed"  # the submitter removed the request while it ran; nothing stored
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
) -> Delivery:
    """Store ``result`` for ``claimed``; ``what`` (merge, build) names it in logs.

    Retried through outages by the :data:`~scheduler.zk.retry.OUTAGE` policy;
    when it runs out, the outage propagates (the task retries it in turn).
    """
    normal = json.loads(json.dumps(result))  # as it reads back from ZooKeeper
    attempts = 0

    def attempt() -> Delivery:
        nonlocal attempts
        attempts += 1
        try:
            stored = queue.complete(claimed, result)
        except LockLostError as exc:
            if briefly_suspended(queue.client, claimed):
                raise ZooKeeperUnavailableError(str(exc)) from exc  # retry like an outage
            if attempts > 1 and _stored_before(queue, claimed, normal):
                return Delivery.COMPLETED
            log.warning("%s request %s: result not stored, claim lost: %s", what, claimed.uuid, exc)
            return Delivery.LOCK_LOST
        return Delivery.COMPLETED if stored else Delivery.REMOVED

    def retrying(number: int, exc: BaseException) -> None:
        log.warning(
            "%s request %s: completing failed (%s), attempt %d of %s",
            what,
            claimed.uuid,
            exc,
            number,
            OUTAGE.max_tries,
        )

    return OUTAGE(attempt, on_retry=retrying)
