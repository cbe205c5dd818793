"""Group membership for partitioned work (qdo's worker registry, seed 002).

Each member has an ephemeral node ``<root>/<host>-<pid>-<n>`` whose data
lists the partitions it handles now. Members wait until the member list
has been stable for :data:`STABLE` seconds before they rebalance (a burst of
starts or deaths moves partitions once), and take a partition only after
acquiring its lock, so two members never handle one partition at once,
even while one of them still believes it is assigned.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient

STABLE = 3.0


def assigned(members: Sequence[str], me: str, count: int) -> list[int]:
    """The partitions ``me`` should handle: round robin over the sorted members."""
    ordered = sorted(members)
    if me not in ordered:
        return []
    index = ordered.index(me)
    return [p for p in range(count) if p % len(ordered) == index]


@dataclass
class Membership:
    client: ZooKeeperClient
    root: str
    name: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    _seen: tuple[str, ...] = ()
    _since: float = 0.0
    _registered_generation: int = -1

    @property
    def path(self) -> str:
        return paths.join(self.root, paths.segment(self.name))

    def register(self, partitions: Sequence[int] = ()) -> None:
        """Create (or, after a new session, re-create) this member's ephemeral node."""
        data = json.dumps({"partitions": sorted(partitions)}).encode()
        try:
            self.client.create(self.path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.client.set(self.path, data)
        self._registered_generation = self.client.session_generation

    def ensure(self, partitions: Sequence[int]) -> None:
        """Register again if the session that held the member node was lost."""
        if self._registered_generation != self.client.session_generation:
            self.register(partitions)

    def announce(self, partitions: Sequence[int]) -> None:
        """Record which partitions this member handles now."""
        if self._registered_generation != self.client.session_generation:
            self.register(partitions)
            return
        data = json.dumps({"partitions": sorted(partitions)}).encode()
        try:
            self.client.set(self.path, data)
        except NoNodeError:
            self.register(partitions)

    def members(self) -> list[str]:
        try:
            return sorted(paths.unsegment(n) for n in self.client.get_children(self.root))
        except NoNodeError:
            return []

    def stable_members(self, now: float | None = None) -> list[str] | None:
        """The member list once it has not changed for :data:`STABLE` seconds; else None."""
        now = time.monotonic() if now is None else now
        current = tuple(self.members())
        if current != self._seen:
            self._seen, self._since = current, now
            return None
        return list(current) if now - self._since >= STABLE else None

    def handled(self) -> dict[str, list[int]]:
        """Every member and the partitions it says it handles."""
        found = {}
        for name in self.members():
            try:
                raw, _ = self.client.get(paths.join(self.root, paths.segment(name)))
            except NoNodeError:
                continue
            found[name] = list(json.loads(raw or b"{}").get("partitions", []))
        return found

    def leave(self) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(self.path)
