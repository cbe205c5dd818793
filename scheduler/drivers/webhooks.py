"""Webhooks, stored before anything else happens (seed 003: events are persisted first).

The web face checks a delivery's signature, then calls :func:`store`: the
raw event (driver, event type, delivery id, body) goes into the
connection's event queue together with a marker of its delivery id, in ONE
transaction. A forge that delivers the same id again (a retry, a replay)
finds the marker and nothing is stored twice. Only then does the web face
answer 2xx and nudge the connection hop, which turns the raw event into
trigger events (:func:`translate`, by driver).

A translation that fails because the forge was unavailable
(:func:`is_transient`: no answer, a 5xx, a rate limit still exhausted)
is tried again later, at most :attr:`DeliveryRetry.attempts` times with
exponential back-off (the connection's ``delivery_attempts`` and
``delivery_backoff`` options, :func:`retry_policy`); any other failure sets
the delivery aside with its reason (:mod:`scheduler.stores.deliveries`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.drivers import ForgeError
from scheduler.drivers.github import events as github
from scheduler.drivers.gitlab import events as gitlab
from scheduler.settings.sections import ConnectionSettings
from scheduler.stores import deliveries
from scheduler.wire.events import MalformedEventError, TriggerEvent
from scheduler.zk.client import ZooKeeperClient

WEBHOOK = "webhook"
TRANSLATORS = {"github": github.translate, "gitlab": gitlab.translate}
# Event types each driver stores; the others are acknowledged and ignored.
STORED = {"github": github.STORED, "gitlab": gitlab.STORED}


@dataclass(frozen=True)
class WebhookDelivery:
    driver: str
    event: str
    delivery: str
    body: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": WEBHOOK,
            "driver": self.driver,
            "event": self.event,
            "delivery": self.delivery,
            "received": time.time(),
            "body": dict(self.body),
        }


@dataclass(frozen=True)
class DeliveryRetry:
    """How many times a delivery whose forge was unavailable is translated, and how far apart.

    The n-th failed attempt waits ``backoff * 2**(n-1)`` seconds (at most
    ``cap``); the ``attempts``-th sets the delivery aside. The defaults try
    for about 36 minutes (5 s, 10 s, 20 s, ... 15 min): a blip costs seconds,
    an outage of half an hour loses nothing.
    """

    attempts: int = 10
    backoff: float = 5.0
    cap: float = 900.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.backoff * 2 ** max(0, attempt - 1)))


def retry_policy(connection: ConnectionSettings | None) -> DeliveryRetry:
    """The connection's ``delivery_attempts`` and ``delivery_backoff`` (defaults otherwise)."""
    default = DeliveryRetry()
    if connection is None:
        return default
    options = connection.options
    try:
        attempts = int(options.get("delivery_attempts", default.attempts))
        backoff = float(options.get("delivery_backoff", default.backoff))
    except (TypeError, ValueError):
        return default
    return DeliveryRetry(max(1, attempts), max(0.0, backoff), default.cap)


def is_transient(exc: BaseException) -> bool:
    """Whether a translation failed because the forge was unavailable (try again later).

    A :class:`ForgeError` without an answer (status 0: a timeout, a refused
    or reset connection), a 5xx, a 408 or 429, or a 403 that says a rate
    limit is exhausted. A status 0 that a local ``ValueError`` caused (a URL
    that cannot be sent, such as a name with a control character) is the
    delivery's fault, not the forge's: not transient.
    """
    if not isinstance(exc, ForgeError):
        return False
    cause = exc.__cause__ or exc.__context__
    if exc.status == 0 and isinstance(cause, ValueError) and not isinstance(cause, OSError):
        return False
    return exc.transient or exc.rate_limited or exc.status == 408


def store(client: ZooKeeperClient, connection: str, delivery: WebhookDelivery) -> bool:
    """Queue the delivery once; False if its id was stored before."""
    return deliveries.store_once(client, connection, delivery.delivery, delivery.to_dict())


def is_webhook(payload: Mapping[str, Any]) -> bool:
    return payload.get("type") == WEBHOOK


# whether some pipeline's trigger could match a trigger event, known before any API read
Wanted = Callable[[TriggerEvent], bool]


def translate(
    payload: Mapping[str, Any], api: Any = None, wanted: Wanted | None = None
) -> list[TriggerEvent]:
    """The trigger events of a stored webhook (none for what the driver ignores).

    With ``api`` (the connection's forge client), events about a pull or
    merge request carry its current state, as pipeline requirements need;
    with ``wanted``, the driver reads nothing for a comment, status or
    check run no trigger could match.
    """
    driver = str(payload.get("driver", ""))
    body = payload.get("body")
    if driver not in TRANSLATORS or not isinstance(body, Mapping):
        raise MalformedEventError(f"webhook of driver {driver!r} without a body")
    event = str(payload.get("event", ""))
    try:
        return TRANSLATORS[driver](event, body, api, wanted)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        if isinstance(exc, MalformedEventError):
            raise
        # a body of the right event type with fields of the wrong shape: refused,
        # so it is logged and acknowledged and never wedges the connection queue
        raise MalformedEventError(
            f"{driver} {event} webhook: {type(exc).__name__}: {exc}"
        ) from None


def translator(
    connection: ConnectionSettings | None, wanted: Wanted | None = None
) -> Callable[[Mapping[str, Any]], list[TriggerEvent]]:
    """:func:`translate` with the connection's API client when it has one configured."""
    api = forge_api(connection)
    return lambda payload: translate(payload, api, wanted)


def forge_api(connection: ConnectionSettings | None) -> Any:
    """The connection's forge client, if it has credentials; else None."""
    if connection is None:
        return None
    options = connection.options
    if connection.driver == "github" and (options.get("api_token") or options.get("app_id")):
        from scheduler.drivers.github.api import GitHubApi

        return GitHubApi(connection)
    if connection.driver == "gitlab" and options.get("api_token"):
        from scheduler.drivers.gitlab.api import GitLabApi

        return GitLabApi(connection)
    return None
