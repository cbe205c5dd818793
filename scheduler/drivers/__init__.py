"""Drivers: a forge's events turned into Sluice events, and reports back (docs/architecture.md).

Each driver receives events in a face (a webhook in ``web/``, a poller or a
timer in a worker), puts them into ZooKeeper first, and the scheduler
processes them from there: ``git`` (polling remotes), ``timer`` (periodic
pipelines), ``github`` and ``gitlab`` (webhooks).
"""

from collections.abc import Mapping
from typing import Any

from scheduler.errors import SluiceError
from scheduler.wire.events import MalformedEventError


class ForgeError(SluiceError):
    """A forge's API refused or failed a request.

    ``status`` is its HTTP status (0 if none came); ``reason`` the forge's
    own words for it (the ``message`` of its JSON answer), if it gave any.
    """

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    @property
    def transient(self) -> bool:
        """No answer, or the forge failed (5xx): the same call may succeed later."""
        return self.status == 0 or self.status >= 500

    @property
    def rate_limited(self) -> bool:
        """A 429, or a 403 whose message says a rate limit is exhausted (as GitHub's does)."""
        return self.status == 429 or (self.status == 403 and "rate limit" in str(self).lower())


def field(body: Mapping[str, Any], *keys: str) -> Any:
    """``body[k1][k2]...`` of a forge's JSON; :class:`MalformedEventError` naming the path."""
    value: Any = body
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise MalformedEventError(f"webhook body has no {'.'.join(keys)}")
        value = value[key]
    return value
