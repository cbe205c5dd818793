"""Component registry: one ephemeral sequence node per running process.

Each process registers under ``components/<kind>/<hostname>-<sequence>``
(:func:`scheduler.zk.paths.component_prefix`) with a stored object of its
state: kind, hostname, pid, version, state, and what it handles (queues,
zones). :meth:`Component.update` rewrites it in place; :func:`list_components`
lists one kind.

Guarantees: the node is ephemeral, so a dead process (kill -9, lost host)
disappears from the registry within the session timeout. On SUSPENDED the
node stays (the session may survive); on LOST it is gone, and
:meth:`Component.update` re-registers with a new node, so a process that
outlives its session shows up again once reconnected.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient


@dataclass(frozen=True)
class ComponentInfo:
    """A registered process as read from the registry."""

    path: str
    kind: str
    hostname: str
    pid: int
    version: str
    state: str
    handles: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)


class Component:
    """This process's registration; create with :func:`register`."""

    def __init__(self, client: ZooKeeperClient, kind: str, state: dict[str, Any]) -> None:
        self.client = client
        self.kind = kind
        self.state = state
        self.path = ""
        self.session_id: int | None = None

    def _create(self) -> None:
        prefix = paths.component_prefix(self.kind, str(self.state["hostname"]))
        self.path = self.client.create(
            prefix, stored.encode(self.state), ephemeral=True, sequence=True, makepath=True
        )
        self.session_id = self.client.session_id

    def update(self, **changes: Any) -> None:
        """Change fields of the state (e.g. ``state="paused"``) and write them in place."""
        self.state.update(changes)
        if self.client.session_id != self.session_id:
            self._create()  # the old session, and our node with it, is gone
            return
        try:
            self.client.set(self.path, stored.encode(self.state))
        except NoNodeError:
            self._create()

    def unregister(self) -> None:
        with contextlib.suppress(NoNodeError):
            self.client.delete(self.path)


def register(
    client: ZooKeeperClient,
    kind: str,
    *,
    version: str = "",
    state: str = "running",
    handles: tuple[str, ...] = (),
    **extra: Any,
) -> Component:
    """Register this process as a component of ``kind``."""
    data: dict[str, Any] = {
        "kind": kind,
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "version": version,
        "state": state,
        "handles": list(handles),
        **extra,
    }
    component = Component(client, kind, data)
    component._create()
    return component


def list_components(client: ZooKeeperClient, kind: str) -> list[ComponentInfo]:
    """Every registered process of ``kind`` (nodes that vanish meanwhile are skipped)."""
    root = paths.components(kind)
    try:
        names = client.get_children(root)
    except NoNodeError:
        return []
    pending = [(paths.join(root, n), client.kazoo.get_async(paths.join(root, n))) for n in names]
    found = []
    for path, result in pending:
        try:
            raw, _ = client.wait(result)
        except NoNodeError:
            continue
        data = stored.decode(raw, path)
        known = ("schema", "kind", "hostname", "pid", "version", "state", "handles")
        found.append(
            ComponentInfo(
                path=path,
                kind=str(data.get("kind", kind)),
                hostname=str(data.get("hostname", "")),
                pid=int(data.get("pid", 0)),
                version=str(data.get("version", "")),
                state=str(data.get("state", "")),
                handles=tuple(data.get("handles", ())),
                extra={k: v for k, v in data.items() if k not in known},
            )
        )
    return sorted(found, key=lambda c: c.path)


def all_components(client: ZooKeeperClient) -> list[ComponentInfo]:
    """Every registered process, of every kind, by kind then path."""
    try:
        kinds = client.get_children(paths.components_root())
    except NoNodeError:
        return []
    found: list[ComponentInfo] = []
    for kind in sorted(kinds):
        found.extend(list_components(client, paths.unsegment(kind)))
    return found
