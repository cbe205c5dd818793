"""Changes waiting for their dependencies: enqueued behind them when they enter (Zuul's).

A change that meets a dependent pipeline's requirements while a change it
depends on (``Depends-On``, a parent pull request) does not yet cannot
enter: it would be tested without its dependency. Zuul enqueues such a
change behind its dependency when the dependency enters the pipeline; so
does Sluice. The tenant hop *parks* the change's latest trigger event (one
znode per change and tenant, naming the pipelines it waits for) and, when
it routes the dependency into one of those pipelines, routes the parked
change right behind it, in the same transaction's order, if the parked
change (with its dependency as it is now) meets the requirements.

What the forge said last about the parked change decides: each later event
of the change parks it again with its new state (a new patchset, a
withdrawn approval), or takes it out of a pipeline whose requirements it
no longer meets, or enqueues it if its dependencies now meet them. A park
older than :data:`RETENTION` is forgotten (:func:`prune`, by the sweep).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.layouts.triggers import ENQUEUE, WAIT
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient

log = logging.getLogger(__name__)

# seconds a change stays parked without news from its forge
RETENTION = 14 * 86400.0


class Verdicts(Protocol):
    def requirements_verdict(self, tenant: str, pipeline: str, event: Mapping[str, Any]) -> str: ...


def change_key(event: Mapping[str, Any]) -> str:
    """A trigger event's change, as parks name it: connection, project, ref."""
    return f"{event.get('connection')}/{event.get('project')}:{event.get('ref')}"


def needs_keys(event: Mapping[str, Any]) -> list[str]:
    """The changes a trigger event's change depends on, as :func:`change_key` names them."""
    connection = event.get("connection")
    return [
        change_key({**n, "connection": n.get("connection") or connection})
        for n in event.get("needs") or ()
        if isinstance(n, Mapping)
    ]


@dataclass
class Park:
    """One parked change: its latest trigger event and the pipelines it waits for."""

    event: dict[str, Any]
    pipelines: list[str]
    since: float = field(default_factory=time.time)

    def to_bytes(self) -> bytes:
        data = {"event": self.event, "pipelines": self.pipelines, "since": self.since}
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Park | None:
        try:
            data = json.loads(raw)
            return cls(
                dict(data["event"]), [str(p) for p in data["pipelines"]], float(data["since"])
            )
        except (ValueError, KeyError, TypeError):
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
                    self._parks[change_key(park.event)] = park
        return self._parks

    def park(self, event: Mapping[str, Any], pipelines: list[str]) -> None:
        """Park ``event``'s change for ``pipelines`` (none: it waits for nothing any more)."""
        key = change_key(event)
        path = self._path(key)
        if not pipelines:
            if self.parks.pop(key, None) is not None:
                with contextlib.suppress(NoNodeError):
                    self.client.delete(path)
            return
        park = Park(dict(event), sorted(set(pipelines)))
        self.parks[key] = park
        try:
            self.client.set(path, park.to_bytes())
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                self.client.create(path, park.to_bytes(), makepath=True)
        log.info("%s: %s waits for its dependencies in %s", self.tenant, key, park.pipelines)

    def waiting_on(self, key: str, pipeline: str) -> list[Park]:
        """The parks of changes that depend on ``key`` and wait for ``pipeline``."""
        return [
            p for p in self.parks.values() if pipeline in p.pipelines and key in needs_keys(p.event)
        ]


# what a dependency's trigger event says of it that requirements look at
STATE = ("open", "merged", "draft", "mergeable", "labels", "approvals", "approved", "statuses")


def with_dependency(event: Mapping[str, Any], dependency: Mapping[str, Any]) -> dict[str, Any]:
    """``event`` with its dependency's state replaced by ``dependency`` (a trigger event)."""
    key = change_key(dependency)
    connection = event.get("connection")
    state = {k: dependency[k] for k in STATE if k in dependency}
    if dependency.get("newrev"):
        state["commit"] = dependency["newrev"]
    needs = []
    for need in event.get("needs") or ():
        if not isinstance(need, Mapping):
            continue
        named = {**need, "connection": need.get("connection") or connection}
        needs.append({**need, **state} if change_key(named) == key else dict(need))
    return {**event, "needs": needs}


def after_event(
    verdicts: Verdicts,
    parked: Parked,
    tenant: str,
    event: Mapping[str, Any],
    own: Mapping[str, str],
) -> list[str]:
    """What a change's new event says of its parks: the pipelines it enters now.

    ``own``: the verdicts of the pipelines the event's own triggers match
    (those it enters are routed by the caller; those it waits for are
    parked). Every other pipeline the change waits for is judged again
    with this event's state.
    """
    park = parked.parks.get(change_key(event))
    waiting = [name for name, verdict in own.items() if verdict == WAIT]
    if park is None and not waiting:
        return []
    enters = []
    for pipeline in park.pipelines if park else []:
        if pipeline in own:
            continue
        verdict = verdicts.requirements_verdict(tenant, pipeline, event)
        if verdict == ENQUEUE:
            enters.append(pipeline)
        elif verdict == WAIT:
            waiting.append(pipeline)
    parked.park(event, waiting)
    return enters


def behind(
    verdicts: Verdicts, parked: Parked, tenant: str, dependency: Mapping[str, Any], pipeline: str
) -> list[dict[str, Any]]:
    """The parked changes that enter ``pipeline`` behind ``dependency`` (their trigger events)."""
    entering = []
    for park in parked.waiting_on(change_key(dependency), pipeline):
        event = with_dependency(park.event, dependency)
        verdict = verdicts.requirements_verdict(tenant, pipeline, event)
        left = [p for p in park.pipelines if p != pipeline]
        if verdict == ENQUEUE:
            log.info(
                "%s: %s enters %s behind %s",
                tenant,
                change_key(event),
                pipeline,
                change_key(dependency),
            )
            entering.append(event)
            parked.park(event, left)
        elif verdict != WAIT:
            parked.park(park.event, left)
    return entering


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
