"""The REST API's read endpoints, at Zuul's paths (``/api/...``).

Admin verbs are in :mod:`web.admin`; both register on :data:`API`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from starlette.responses import Response

from scheduler.model.results import Result
from scheduler.project_keys import UnknownProjectError, project_connection
from scheduler.reporting import queries
from scheduler.stores.autoholds import AutoholdRequest, AutoholdStore
from scheduler.stores.components import all_components
from scheduler.stores.keystore import SECRETS, SSH
from scheduler.views.deliveries import delivery_rows
from web import shapes
from web.auth import ALL, allows, tenants_of
from web.context import WebContext
from web.endpoints import NAME, PROJECT, UUID, Api, Call, Param
from web.errors import ApiError

API = Api()
T = "/api/tenant/{tenant}"
RESULTS = tuple(r.value for r in Result)
PAGE = (
    Param("limit", int, minimum=1, maximum=1000, help="at most this many (default 50)"),
    Param("skip", int, minimum=0, maximum=10**9, help="skip this many first"),
)
HISTORY_FILTERS = (
    Param("project", pattern=PROJECT),
    Param("pipeline", pattern=NAME),
    Param("branch"),
    Param("ref"),
    Param("change"),
    Param("uuid", pattern=UUID),
    Param("result", choices=RESULTS),
)
BUILD_FILTERS = (
    *HISTORY_FILTERS,
    Param("job_name", pattern=NAME),
    Param("voting", bool),
    Param("final", bool),
)


def context(call: Call) -> WebContext:
    found: WebContext = call.request.app.state.context
    return found


def tenant_of(call: Call) -> tuple[WebContext, str]:
    ctx = context(call)
    return ctx, ctx.check_tenant(call["tenant"])


# -- info -------------------------------------------------------------------


def _info(ctx: WebContext, tenant: str | None = None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "capabilities": {
            "job_history": True,
            "auth": {**ctx.auth.describe(), "read_protected": ctx.settings.web.protect_reads},
        },
        "stats": {"url": f"{ctx.settings.web.url}/metrics", "prefix": None, "type": "prometheus"},
        "websocket_url": None,
    }
    if tenant:
        info["tenant"] = tenant
    return {"info": info}


@API.get("/api/info", public=True)
def info(call: Call) -> Any:
    """What this API offers (Zuul's capabilities)."""
    return _info(context(call))


@API.get(T + "/info", public=True)
def tenant_info(call: Call) -> Any:
    """What this API offers, for one tenant."""
    ctx = context(call)
    if ctx.settings.web.protect_reads:  # open: it does not say whether the tenant exists
        return _info(ctx, call["tenant"])
    return _info(ctx, ctx.check_tenant(call["tenant"]))


@API.get("/api/tenants", listing=True)
def tenants(call: Call) -> Any:
    """Every tenant (the token may read) with its project count and queued items."""
    ctx = context(call)
    found = []
    for name in ctx.tenants():
        if ctx.settings.web.protect_reads and not allows(call.claims, name):
            continue
        state = ctx.layouts.state(name)
        queued = sum(len(p.items) for p in ctx.pipelines(name))
        projects = len(state.tenant.projects) if state else 0
        found.append({"name": name, "projects": projects, "queue": queued})
    return found


def _authorizations(claims: Any, scope: str, admin: bool) -> dict[str, Any]:
    named = sorted(t for t in tenants_of(claims) if t != ALL)
    return {"zuul": {"admin": admin, "scope": [scope]}, "admin_tenants": named}


@API.get("/api/authorizations", token=True, listing=True)
def root_authorizations(call: Call) -> Any:
    """What the bearer of the token may do: admin of every tenant or not."""
    return _authorizations(call.claims, ALL, ALL in tenants_of(call.claims))


@API.get(T + "/authorizations", token=True)
def tenant_authorizations(call: Call) -> Any:
    """What the bearer of the token may do in the tenant (``admin``: the admin verbs)."""
    _, tenant = tenant_of(call)
    return _authorizations(call.claims, tenant, allows(call.claims, tenant))


# -- status -----------------------------------------------------------------


def status_document(ctx: WebContext, tenant: str) -> dict[str, Any]:
    """The tenant's status as Zuul's ``/status`` (with SQL estimates)."""
    layout = ctx.layout(tenant).layout

    known: dict[tuple[str, str, tuple[str, ...]], dict[str, float]] = {}

    def estimate(project: str, branch: str, jobs: list[str]) -> dict[str, float]:
        key = (project, branch, tuple(sorted(jobs)))
        if key not in known:  # one query per project, branch and job set, not per item
            try:
                known[key] = queries.estimate_durations(
                    ctx.engine, tenant=tenant, jobs=jobs, project=project, branch=branch
                )
            except Exception:  # history is a nicety here: the status stands without it
                known[key] = {}
        return known[key]

    return shapes.tenant_status(
        tenant, ctx.pipelines(tenant), layout, estimate, f"{ctx.settings.web.url}/t/{tenant}"
    )


@API.get(T + "/status")
def status(call: Call) -> Any:
    """Pipelines, change queues, items and jobs (elapsed and remaining time)."""
    ctx, tenant = tenant_of(call)
    return status_document(ctx, tenant)


@API.get(
    T + "/status/change/{change}", path_params=(Param("change", pattern=r"[^\x00-\x1f]{1,255}"),)
)
def status_change(call: Call) -> Any:
    """The items of one change (its ref, or an item id) in every pipeline."""
    ctx, tenant = tenant_of(call)
    wanted = call["change"]
    found = []
    for pipeline in status_document(ctx, tenant)["pipelines"]:
        for queue in pipeline["change_queues"]:
            for head in queue["heads"]:
                found += [
                    dict(item, pipeline=pipeline["name"])
                    for item in head
                    if wanted in (item["ref"], item["id"])
                ]
    return found


# -- history ----------------------------------------------------------------


def _history_args(call: Call) -> dict[str, Any]:
    return {
        "project": call.get("project"),
        "pipeline": call.get("pipeline"),
        "branch": call.get("branch"),
        "ref": call.get("ref"),
        "change": call.get("change"),
        "uuid": call.get("uuid"),
        "result": call.get("result"),
        "limit": call.get("limit", 50),
        "offset": call.get("skip", 0),
    }


@API.get(T + "/builds", query=(*BUILD_FILTERS, *PAGE))
def builds(call: Call) -> Any:
    """Build attempts, newest first (filters as Zuul's)."""
    ctx, tenant = tenant_of(call)
    found = queries.list_builds(
        ctx.engine,
        tenant=tenant,
        job=call.get("job_name"),
        voting=call.get("voting"),
        **_history_args(call),
    )
    final = call.get("final")
    if final is not None:
        found = [b for b in found if b["final"] == final]
    return [shapes.build(b, ctx.settings.web.url) for b in found]


@API.get(T + "/build/{uuid}", path_params=(Param("uuid", pattern=UUID),))
def build(call: Call) -> Any:
    """One build attempt (a running one too)."""
    ctx, tenant = tenant_of(call)
    found = shapes.build(build_row(ctx, tenant, call["uuid"]), ctx.settings.web.url)
    found["artifacts"] = queries.build_artifacts(ctx.engine, tenant, call["uuid"])
    return found


def build_row(ctx: WebContext, tenant: str, uuid: str) -> Any:
    """A build from the history, or from the pipeline state while its item is queued."""
    found: list[Any] = queries.list_builds(ctx.engine, tenant=tenant, uuid=uuid, limit=1)
    if not found:
        live = ctx.live_build(tenant, uuid)
        if live is None:
            raise ApiError(404, f"no build {uuid!r} in tenant {tenant!r}", "uuid")
        return live
    return found[0]


@API.get(T + "/buildsets", query=(*HISTORY_FILTERS, *PAGE))
def buildsets(call: Call) -> Any:
    """Buildsets, newest first."""
    ctx, tenant = tenant_of(call)
    found = queries.list_buildsets(ctx.engine, tenant=tenant, **_history_args(call))
    return [shapes.buildset(b, ctx.settings.web.url) for b in found]


@API.get(T + "/buildset/{uuid}", path_params=(Param("uuid", pattern=UUID),))
def buildset(call: Call) -> Any:
    """One buildset with its builds."""
    ctx, tenant = tenant_of(call)
    found = queries.list_buildsets(ctx.engine, tenant=tenant, uuid=call["uuid"], limit=1)
    if not found:
        raise ApiError(404, f"no buildset {call['uuid']!r} in tenant {tenant!r}", "uuid")
    members = queries.list_builds(ctx.engine, tenant=tenant, buildset=call["uuid"])
    return shapes.buildset(found[0], ctx.settings.web.url, members)


TIME = r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?)?Z?"


def _moment(call: Call, name: str) -> datetime | None:
    """A time filter (ISO 8601, UTC unless it says otherwise); 400 naming it when invalid."""
    raw = call.get(name)
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError as exc:
        raise ApiError(400, f"query parameter {name!r}: {exc}", name) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@API.get(
    T + "/build-times",
    query=(
        Param("project", pattern=PROJECT),
        Param("pipeline", pattern=NAME),
        Param("branch"),
        Param("ref"),
        Param("job_name", pattern=NAME),
        Param("result", choices=RESULTS),
        Param("exclude_result", choices=RESULTS),
        Param("final", bool),
        Param("start_time", pattern=TIME, help="builds that ended at or after this (UTC)"),
        Param("end_time", pattern=TIME, help="builds that ended at or before this (UTC)"),
        *PAGE,
    ),
)
def build_times(call: Call) -> Any:
    """Finished builds and their durations, latest end first (Zuul's build times)."""
    ctx, tenant = tenant_of(call)
    found = queries.build_times(
        ctx.engine,
        tenant=tenant,
        project=call.get("project"),
        pipeline=call.get("pipeline"),
        branch=call.get("branch"),
        ref=call.get("ref"),
        job=call.get("job_name"),
        result=call.get("result"),
        exclude_result=call.get("exclude_result"),
        final=call.get("final"),
        ended_after=_moment(call, "start_time"),
        ended_before=_moment(call, "end_time"),
        limit=call.get("limit", 50),
        offset=call.get("skip", 0),
    )
    return [shapes.build_time(b) for b in found]


def check_project(ctx: WebContext, tenant: str, project: str) -> str:
    """``project`` if the tenant has it; Zuul's 404 otherwise."""
    state = ctx.layouts.state(tenant)
    if state is None or state.tenant.project(project) is None:
        raise ApiError(404, "Unknown project", "project")
    return project


@API.get(
    T + "/badge",
    query=(Param("project", pattern=PROJECT), Param("pipeline", pattern=NAME), Param("branch")),
    media_type="image/svg+xml",
)
def badge(call: Call) -> Any:
    """An SVG badge of the latest reported buildset: passing, failing (404: unknown)."""
    ctx, tenant = tenant_of(call)
    if call.get("project"):
        check_project(ctx, tenant, call["project"])
    found = queries.list_buildsets(
        ctx.engine,
        tenant=tenant,
        project=call.get("project"),
        pipeline=call.get("pipeline"),
        branch=call.get("branch"),
        complete=True,
        limit=1,
    )
    verdict = "unknown"
    if found:
        verdict = "passing" if found[0]["result"] == "SUCCESS" else "failing"
    return Response(
        shapes.badge(verdict),
        status_code=404 if verdict == "unknown" else 200,
        media_type="image/svg+xml",
        headers={"Cache-Control": "no-cache"},
    )


# -- configuration ----------------------------------------------------------


@API.get(T + "/jobs")
def jobs(call: Call) -> Any:
    """Every job of the tenant's layout with its variants."""
    ctx, tenant = tenant_of(call)
    layout = ctx.layout(tenant).layout
    found = []
    for name in sorted(layout.jobs):
        variants = [shapes.job_variant(v) for v in layout.jobs[name]]
        description = next((v["description"] for v in variants if v["description"]), "")
        found.append({"name": name, "description": description, "variants": variants})
    return found


@API.get(T + "/job/{name}")
def job(call: Call) -> Any:
    """The variants of one job."""
    ctx, tenant = tenant_of(call)
    variants = ctx.layout(tenant).layout.jobs.get(call["name"])
    if not variants:
        raise ApiError(404, f"no job {call['name']!r} in tenant {tenant!r}", "name")
    return [shapes.job_variant(v) for v in variants]


@API.get(T + "/projects")
def projects(call: Call) -> Any:
    """The tenant's projects."""
    ctx, tenant = tenant_of(call)
    loaded = ctx.layout(tenant)
    return [
        {k: v for k, v in shapes.project(p, loaded.layout).items() if k != "configs"}
        for p in loaded.tenant.projects
    ]


@API.get(T + "/project/{project:path}/autohold", path_params=(Param("project", pattern=PROJECT),))
def project_autohold_list(call: Call) -> Any:
    """The autohold requests of one project of the tenant (Zuul's per-project list);
    registered before ``/project/<p>``, whose path would take it."""
    ctx, tenant = tenant_of(call)
    project = check_project(ctx, tenant, call["project"])
    found = AutoholdStore(ctx.client).list()
    return [autohold_shape(r) for r in found if r.tenant == tenant and r.project == project]


@API.get(T + "/project/{project:path}", path_params=(Param("project", pattern=PROJECT),))
def project(call: Call) -> Any:
    """One project and its configuration."""
    ctx, tenant = tenant_of(call)
    loaded = ctx.layout(tenant)
    for entry in loaded.tenant.projects:
        if entry.name == call["project"]:
            return shapes.project(entry, loaded.layout)
    raise ApiError(404, f"no project {call['project']!r} in tenant {tenant!r}", "project")


# a project's public key: PEM for its secrets, OpenSSH's line for SSH
PUBLIC_KEY = {"path_params": (Param("project", pattern=PROJECT),), "media_type": "text/plain"}


def _project_key(call: Call, kind: str) -> Response:
    ctx, tenant = tenant_of(call)
    project = call["project"]
    try:
        connection = project_connection(ctx.layouts, tenant, project)
    except UnknownProjectError as exc:
        raise ApiError(404, str(exc), "project") from None
    if kind == SSH:
        key = ctx.keystore.public_ssh(connection, project) + b"\n"
    else:
        key = ctx.keystore.public_pem(connection, project)
    return Response(key, media_type="text/plain")


@API.get(T + "/key/{project:path}.pub", **PUBLIC_KEY)
def project_public_key(call: Call) -> Any:
    """The project's public key (PEM), to encrypt its secrets with (``zuul-client encrypt``)."""
    return _project_key(call, SECRETS)


@API.get(T + "/project-ssh-key/{project:path}.pub", **PUBLIC_KEY)
def project_ssh_key(call: Call) -> Any:
    """The project's public SSH key (``ssh-rsa ...``), e.g. to allow it to push."""
    return _project_key(call, SSH)


@API.get(T + "/pipelines")
def pipelines(call: Call) -> Any:
    """The tenant's pipelines and their triggers."""
    ctx, tenant = tenant_of(call)
    layout = ctx.layout(tenant).layout
    return [
        {
            "name": name,
            "manager": p.manager,
            "description": p.description,
            "triggers": [{"name": c, "driver": c} for c in p.trigger],
        }
        for name, p in sorted(layout.pipelines.items())
    ]


@API.get(T + "/config-errors", query=(Param("project", pattern=PROJECT), Param("branch")))
def config_errors(call: Call) -> Any:
    """Errors of the tenant's configuration (also of branches that kept their last good one)."""
    ctx, tenant = tenant_of(call)
    state = ctx.layouts.state(tenant)
    assert state is not None
    found = shapes.config_errors(state)
    for key in ("project", "branch"):
        if call.get(key):
            found = [e for e in found if e.get("source_context", {}).get(key) == call[key]]
    return found


# -- operations -------------------------------------------------------------


@API.get("/api/components")
def components(call: Call) -> Any:
    """Every registered process, by kind (Zuul's shape)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for c in all_components(context(call).client):
        found.setdefault(c.kind, []).append(
            {
                "hostname": c.hostname,
                "pid": c.pid,
                "state": c.state,
                "version": c.version,
                "queues": list(c.handles),
                **{k: v for k, v in c.extra.items() if k not in ("hostname", "pid")},
            }
        )
    return found


@API.get("/api/connection/{connection}/deliveries", admin=True)
def connection_deliveries(call: Call) -> Any:
    """The connection's webhook deliveries set aside or deferred, with their reasons."""
    ctx = context(call)
    name = call["connection"]
    if name not in ctx.settings.connections:
        raise ApiError(404, f"no connection {name!r}", "connection")
    return delivery_rows(ctx.client, name)


def autohold_shape(request: AutoholdRequest) -> dict[str, Any]:
    return {
        "id": request.id,
        "tenant": request.tenant,
        "project": request.project,
        "job": request.job,
        "ref_filter": request.ref or ".*",
        "max_count": request.count,
        "current_count": len(request.held),
        "reason": request.reason,
        "node_expiration": None,
        "expired": None,
        "nodes": [h.to_dict() for h in request.held],
        "created": request.created,
    }


@API.get(T + "/autohold")
def autohold_list(call: Call) -> Any:
    """The tenant's autohold requests."""
    ctx, tenant = tenant_of(call)
    return [autohold_shape(r) for r in AutoholdStore(ctx.client).list() if r.tenant == tenant]


@API.get(T + "/autohold/{id}", path_params=(Param("id", pattern=NAME),))
def autohold_info(call: Call) -> Any:
    """One autohold request."""
    ctx, tenant = tenant_of(call)
    found = AutoholdStore(ctx.client).get(call["id"])
    if found is None or found.tenant != tenant:
        raise ApiError(404, f"no autohold request {call['id']!r} in tenant {tenant!r}", "id")
    return autohold_shape(found)
