"""Drivers: a forge's events turned into Sluice events, and reports back (DESIGN.md).

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
    """A forge's API refused or failed a request (``status``: its HTTP status, 0 if none)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def field(body: Mapping[str, Any], *keys: str) -> Any:
    """``body[k1][k2]...`` of a forge's JSON; :class:`MalformedEventError` naming the path."""
    value: Any = body
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            raise MalformedEventError(f"webhook body has no {'.'.join(keys)}")
        value = value[key]
    return value
