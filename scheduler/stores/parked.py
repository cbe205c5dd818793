"""Parked changes: a tenant's changes waiting for a dependency to enter a pipeline.

One znode per change under ``/events/tenant/<t>/parked/<change key>``
holding ``{key, event, pipelines, since}`` (a stored object:
:mod:`scheduler.zk.stored`'s schema-versioned JSON): the change's latest trigger
event and the pipelines it waits for. What parks a change, and what lets it
in, is :mod:`scheduler.processing.behind`'s; this is only where it is kept.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import DecodeError

log = logging.getLogger(__name__)

# seconds a change stays parked without news from its forge
RETENTION = 14 * 86400.0


@dataclass
class Park:
    """One parked change: its key, latest trigger event and the pipelines it waits for."""

    key: str
    event: dict[str, Any]
    pipelines: list[str]
    since: float = field(default_factory=time.time)

    def to_bytes(self) -> bytes:
        data = {"key": self.key, "event": self.event, "pipelines": self.pipelines}
        return stored.encode({**data, "since": self.since})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Park | None:
        try:
            data = stored.decode(raw)
            pipelines = [str(p) for p in data["pipelines"]]
            return cls(str(data["key"]), dict(data["event"]), pipelines, float(data["since"]))
        except (DecodeError, KeyError, TypeError, ValueError):
            return None


class Parked:
    """A tenant's parked changes, read once per hop (on first use)."""

    def __init__(self, client: ZooKeeperClient, tenant: str) -> None:
        self.client = client
        self.tenant = tenant
        self.root = paths.tenant_parked_changes(tenant)
        self._parks: dict[str, Park] | None = None

    def _path(self, key: str) -> str:
        return paths.join(self.root, paths.segment(key))

    @property
    def parks(self) -> dict[str, Park]:
        """Every parked change, by key."""
        if self._parks is None:
            self._parks = {}
            try:
                children = self.client.get_children(self.root)
            except NoNodeError:
                children = []
            found = self.client.get_each([paths.join(self.root, c) for c in children])
            for answer in found:
                park = Park.from_bytes(answer[0]) if answer else None
                if park is not None:
                    self._parks[park.key] = park
        return self._parks

    def park(self, key: str, event: Mapping[str, Any], pipelines: Iterable[str]) -> None:
        """Park change ``key`` with ``event`` for ``pipelines`` (none: it waits no more)."""
        path = self._path(key)
        waits = sorted(set(pipelines))
        if not waits:
            if self.parks.pop(key, None) is not None:
                with contextlib.suppress(NoNodeError):
                    self.client.delete(path)
            return
        park = Park(key, dict(event), waits)
        self.parks[key] = park
        try:
            self.client.set(path, park.to_bytes())
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.client.create(path, park.to_bytes(), makepath=True)
        log.info("%s: %s waits for its dependencies in %s", self.tenant, key, waits)


def prune(client: ZooKeeperClient, tenants: Iterable[str], now: float | None = None) -> list[str]:
    """Forget parks older than :data:`RETENTION`; the ones removed (``tenant/change``)."""
    now = time.time() if now is None else now
    removed = []
    for tenant in tenants:
        root = paths.tenant_parked_changes(tenant)
        try:
            children = client.get_children(root)
        except NoNodeError:
            continue
        for child in children:
            path = paths.join(root, child)
            try:
                raw, _ = client.get(path)
            except NoNodeError:
                continue
            park = Park.from_bytes(raw)
            if park is None or now - park.since > RETENTION:
                with contextlib.suppress(NoNodeError):
                    client.delete(path)
                removed.append(f"{tenant}/{paths.unsegment(child)}")
    return removed
