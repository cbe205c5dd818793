"""The REST API's admin verbs: enqueue, dequeue, promote, autohold (Zuul's paths and bodies).

Each needs a token naming the tenant (:mod:`web.auth`) and goes through
:mod:`scheduler.management`, as ``sluice enqueue`` does: names and refs are
checked first (a typo is a 400 or 404 and nothing is queued), then the
verb waits for the pipeline to apply the event and answers ``true``.

Sluice's changes are git refs: ``change`` is the ref to test (a branch,
tag, full ref or commit) and ``branch`` (a Sluice extension, optional) the
branch it merges into, by default the project's default branch.
"""

from __future__ import annotations

import logging
from typing import Any

from scheduler import management
from scheduler.drivers.git.refs import list_refs
from scheduler.model.change import Change
from scheduler.stores.autoholds import AutoholdError, AutoholdStore
from scheduler.wire.events import Promote
from web.context import WebContext
from web.endpoints import NAME, PROJECT, Call, Param
from web.errors import ApiError
from web.rest import API, T, tenant_of

log = logging.getLogger(__name__)

# How long a verb waits for the pipeline to apply its event.
TIMEOUT = 30.0
REF = r"[^\x00-\x20~^:?*\[\\]{1,255}"
SHA = r"[0-9a-f]{40}"
PROJECT_PARAM = (Param("project", pattern=PROJECT),)
# the body of the verbs that name a change: its pipeline, and a change or a ref
CHANGE_BODY = (
    Param("pipeline", required=True, pattern=NAME),
    Param("change", pattern=REF),
    Param("ref", pattern=REF),
)


def default_branch(ctx: WebContext, tenant: str, project: str, connection: str) -> str:
    """The branch a change merges into when the request names none."""
    for config in ctx.layout(tenant).layout.projects.get(project, ()):
        if config.default_branch:
            return config.default_branch
    refs = list_refs(ctx.settings.connections[connection], project)
    for name in ("main", "master"):
        if f"refs/heads/{name}" in refs:
            return name
    raise ApiError(
        400, f"project {project!r} has no main or master branch: give 'branch'", "branch"
    )


@API.post(
    T + "/project/{project:path}/enqueue",
    path_params=PROJECT_PARAM,
    admin=True,
    body=(
        *CHANGE_BODY,
        Param("oldrev", pattern=SHA),
        Param("newrev", pattern=SHA),
        Param("branch", pattern=REF),
    ),
)
def enqueue(call: Call) -> Any:
    """Enqueue a change (``change``) or a ref (``ref``, ``newrev``) into a pipeline."""
    ctx, tenant = tenant_of(call)
    project, pipeline = call["project"], call["pipeline"]
    where = management.target(ctx.client, tenant, pipeline, project)
    if call.get("change") and call.get("ref"):
        raise ApiError(400, "give 'change' or 'ref', not both", "change")
    if call.get("change"):
        branch = call.get("branch") or default_branch(ctx, tenant, project, where.connection)
        test = call["change"]
    elif call.get("ref"):
        branch = call["ref"].removeprefix("refs/heads/")
        test = call.get("newrev") or call["ref"]
    else:
        raise ApiError(400, "body field 'change' or 'ref' is required", "change")
    management.enqueue_change(
        ctx.client, ctx.settings, tenant, pipeline, project, branch, test, TIMEOUT
    )
    return True


@API.post(
    T + "/project/{project:path}/dequeue",
    path_params=PROJECT_PARAM,
    admin=True,
    body=CHANGE_BODY,
)
def dequeue(call: Call) -> Any:
    """Take the item of a change (or ref) out of a pipeline; its builds are aborted."""
    ctx, tenant = tenant_of(call)
    ref = call.get("change") or call.get("ref")
    if not ref:
        raise ApiError(400, "body field 'change' or 'ref' is required", "change")
    management.dequeue_change(
        ctx.client, ctx.settings, tenant, call["pipeline"], call["project"], ref, None, TIMEOUT
    )
    return True


@API.post(
    T + "/promote",
    admin=True,
    body=(
        Param("pipeline", required=True, pattern=NAME),
        Param("changes", list, required=True, pattern=REF),
    ),
)
def promote(call: Call) -> Any:
    """Move the items of ``changes`` to the head of their queue, in that order."""
    ctx, tenant = tenant_of(call)
    pipeline = call["pipeline"]
    states = {s.pipeline: s for s in ctx.pipelines(tenant)}
    state = states.get(pipeline)
    if state is None:
        raise ApiError(400, f"tenant {tenant!r} has no pipeline {pipeline!r}", "pipeline")
    changes = []
    for wanted in call["changes"]:
        found = [i.change for i in state.items.values() if wanted in (i.change.ref, i.uuid)]
        if not found:
            raise ApiError(404, f"no item of {wanted!r} in pipeline {pipeline!r}", "changes")
        change = found[0]
        changes.append(Change(change.connection, change.project, "", change.ref))
    where = management.target(ctx.client, tenant, pipeline, changes[0].project)
    management.send(ctx.client, ctx.settings, where, Promote(tuple(changes)), TIMEOUT)
    return True


@API.post(
    T + "/project/{project:path}/autohold",
    path_params=PROJECT_PARAM,
    admin=True,
    body=(
        Param("job", required=True, pattern=NAME),
        Param("reason", required=True),
        Param("count", int, minimum=1, maximum=1000),
        Param("change", pattern=REF),
        Param("ref"),
    ),
)
def autohold(call: Call) -> Any:
    """Keep the workspace of the next failing build(s) of a job."""
    ctx, tenant = tenant_of(call)
    project = call["project"]
    if not any(p.name == project for p in ctx.layout(tenant).tenant.projects):
        raise ApiError(404, f"no project {project!r} in tenant {tenant!r}", "project")
    ref = call.get("ref") or (call.get("change") and f"^{call['change']}$") or ""
    try:
        request = AutoholdStore(ctx.client).add(
            tenant, project, call["job"], ref=ref, reason=call["reason"], count=call.get("count", 1)
        )
    except AutoholdError as exc:
        raise ApiError(400, str(exc), "ref") from None
    log.info("autohold %s: %s %s %s", request.id, tenant, project, call["job"])
    return True


@API.delete(T + "/autohold/{id}", path_params=(Param("id", pattern=NAME),), admin=True, status=204)
def autohold_delete(call: Call) -> Any:
    """Delete an autohold request."""
    ctx, tenant = tenant_of(call)
    store = AutoholdStore(ctx.client)
    found = store.get(call["id"])
    if found is None or found.tenant != tenant:
        raise ApiError(404, f"no autohold request {call['id']!r} in tenant {tenant!r}", "id")
    store.delete(call["id"])
    return None
