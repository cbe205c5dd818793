"""Management verbs (enqueue, dequeue, promote), shared by every face.

The CLI (``sluice enqueue``...) and the REST API's admin verbs both call
these. Each checks what it can at once (tenant, pipeline, project, ref: a
typo is a :class:`ManagementError` and nothing is queued), then puts a
management event in the tenant's queue, nudges the scheduler, and waits
for the outcome the pipeline records when it applies the event.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from scheduler.drivers.git.refs import list_refs, resolve
from scheduler.errors import SluiceError
from scheduler.layouts import NoLayoutError, TenantLayouts
from scheduler.model.change import Change
from scheduler.nudge import dispatch, task_names
from scheduler.settings.sections import Settings
from scheduler.stores.management import wait_for_result
from scheduler.wire.events import Dequeue, Enqueue, Promote
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue


class ManagementError(SluiceError):
    """A management request names something that does not exist, or went unanswered."""


class NotInPipelineError(ManagementError):
    """The pipeline holds no item of the change named."""


class NoAnswerError(ManagementError):
    """The event is queued but no scheduler applied it in time."""


@dataclass(frozen=True)
class Target:
    tenant: str
    pipeline: str
    connection: str


def target(client: ZooKeeperClient, tenant: str, pipeline: str, project: str) -> Target:
    """Check that ``tenant`` has ``pipeline`` and ``project``; where events for them go."""
    # The layout state names the pipelines and projects: no need to build the layout.
    layouts = TenantLayouts(client)
    state = layouts.state(tenant)
    if state is None:
        raise NoLayoutError(f"tenant {tenant!r} has no layout yet (not reconfigured)")
    pipelines = state.pipelines
    if pipelines is None:  # a state written before pipelines were recorded
        pipelines = tuple(layouts.get(tenant).layout.pipelines)
    if pipeline not in pipelines:
        known = ", ".join(sorted(pipelines)) or "none"
        raise ManagementError(f"tenant {tenant!r} has no pipeline {pipeline!r} (it has: {known})")
    for entry in state.tenant.projects:
        if entry.name == project:
            return Target(tenant, pipeline, entry.connection)
    raise ManagementError(f"tenant {tenant!r} has no project {project!r}")


def send(
    client: ZooKeeperClient,
    conf: Settings,
    where: Target,
    event: Enqueue | Dequeue | Promote,
    timeout: float,
) -> dict[str, Any]:
    """Queue ``event`` for ``where``, nudge, and return the outcome the pipeline records."""
    result_id = uuid.uuid4().hex
    payload = replace(event, pipeline=where.pipeline, result_id=result_id).to_dict()
    EventQueue(client, paths.tenant_management_queue(where.tenant)).put(payload)
    dispatch.send_quickly(task_names.PROCESS_TENANT, where.tenant, settings=conf)
    outcome = wait_for_result(client, result_id, timeout)
    if outcome is None:
        raise NoAnswerError(
            f"no answer within {timeout:.0f}s: the event is queued and will be applied when "
            "a scheduler worker runs (see `sluice stack status`)"
        )
    if "error" in outcome:
        if outcome.get("reason") == "not-found":
            raise NotInPipelineError(str(outcome["error"]))
        raise ManagementError(str(outcome["error"]))
    return outcome


def enqueue_change(  # noqa: PLR0917 (the CLI's arguments, in its order)
    client: ZooKeeperClient,
    conf: Settings,
    tenant: str,
    pipeline: str,
    project: str,
    branch: str,
    ref: str,
    timeout: float = 60.0,
) -> str:
    """Check the names and the ref, enqueue, and return the item id once it is in."""
    where = target(client, tenant, pipeline, project)
    connection = conf.connections[where.connection]
    refs = list_refs(connection, project)
    if f"refs/heads/{branch}" not in refs:
        raise ManagementError(f"project {project!r} has no branch {branch!r}")
    commit = resolve(refs, ref, connection, project)
    if commit is None:
        raise ManagementError(f"project {project!r} has no ref {ref!r}")
    change = Change(where.connection, project, branch, ref, commit)
    outcome = send(client, conf, where, Enqueue(change), timeout)
    return str(outcome["item"])


def dequeue_change(  # noqa: PLR0917 (the CLI's arguments, in its order)
    client: ZooKeeperClient,
    conf: Settings,
    tenant: str,
    pipeline: str,
    project: str,
    ref: str,
    branch: str | None = None,
    timeout: float = 60.0,
) -> list[str]:
    """Take the items of ``ref`` out of ``pipeline``; the ids of those dequeued."""
    where = target(client, tenant, pipeline, project)
    change = Change(where.connection, project, branch or "", ref)
    outcome = send(client, conf, where, Dequeue(change), timeout)
    return [str(item) for item in outcome["dequeued"]]


def promote_changes(  # noqa: PLR0917 (the CLI's arguments, in its order)
    client: ZooKeeperClient,
    conf: Settings,
    tenant: str,
    pipeline: str,
    project: str,
    refs: tuple[str, ...],
    timeout: float = 60.0,
) -> list[str]:
    """Move the items of ``refs`` to the head of their queue; the ids promoted."""
    where = target(client, tenant, pipeline, project)
    changes = tuple(Change(where.connection, project, "", ref) for ref in refs)
    outcome = send(client, conf, where, Promote(changes), timeout)
    return [str(item) for item in outcome["promoted"]]
