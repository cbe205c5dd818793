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
older than :data:`scheduler.stores.parked.RETENTION` is forgotten (the sweep's
``parked-changes`` step). The parks are kept by :mod:`scheduler.stores.parked`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from scheduler.layouts.triggers import ENQUEUE, WAIT
from scheduler.stores.parked import Park, Parked

log = logging.getLogger(__name__)


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


def waiting_on(parked: Parked, key: str, pipeline: str) -> list[Park]:
    """The parks of changes that depend on ``key`` and wait for ``pipeline``."""
    return [
        p for p in parked.parks.values() if pipeline in p.pipelines and key in needs_keys(p.event)
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
    parked.park(change_key(event), event, waiting)
    return enters


def behind(
    verdicts: Verdicts, parked: Parked, tenant: str, dependency: Mapping[str, Any], pipeline: str
) -> list[dict[str, Any]]:
    """The parked changes that enter ``pipeline`` behind ``dependency`` (their trigger events)."""
    entering = []
    for park in waiting_on(parked, change_key(dependency), pipeline):
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
            parked.park(change_key(event), event, left)
        elif verdict != WAIT:
            parked.park(park.key, park.event, left)
    return entering
