"""The job graph and frozen jobs (Zuul's freeze-jobs and freeze-job, ``zuul-client
job-graph`` and ``freeze-job``): reads, at Zuul's paths.

The graph is frozen from the tenant's current layout for the project's
branch (:mod:`scheduler.views.jobgraph`); an unknown pipeline, project or
job is a 404 with Zuul's message (``Unknown pipeline``, ``Unknown project``,
``Unknown job``), a graph that cannot be frozen a 400 saying why.
"""

from __future__ import annotations

from typing import Any

from scheduler.config.graph import JobGraph
from scheduler.layouts import TenantLayout
from scheduler.views.jobgraph import (
    GraphFreezeError,
    GraphLookupError,
    frozen_graph,
    frozen_job_view,
    graph_rows,
)
from web.endpoints import NAME, PROJECT, Call, Param
from web.errors import ApiError
from web.rest import API, T, tenant_of

BRANCH = r"[^\x00-\x20~^:?*\[\\]{1,255}"
GRAPH = T + "/pipeline/{pipeline}/project/{project:path}/branch/{branch:path}"
GRAPH_PARAMS = (
    Param("pipeline", required=True, pattern=NAME),
    Param("project", required=True, pattern=PROJECT),
    Param("branch", required=True, pattern=BRANCH),
)


def _graph(call: Call) -> tuple[TenantLayout, JobGraph]:
    ctx, tenant = tenant_of(call)
    loaded = ctx.layout(tenant)
    try:
        graph = frozen_graph(
            loaded.layout, loaded.tenant, call["pipeline"], call["project"], call["branch"]
        )
    except GraphLookupError as exc:
        raise ApiError(404, str(exc)) from None
    except GraphFreezeError as exc:
        raise ApiError(400, str(exc)) from None
    return loaded, graph


@API.get(GRAPH + "/freeze-jobs", path_params=GRAPH_PARAMS)
def freeze_jobs(call: Call) -> Any:
    """The jobs a change of the project's branch runs in the pipeline, with their dependencies."""
    _, graph = _graph(call)
    return graph_rows(graph)


@API.get(
    GRAPH + "/freeze-job/{job}",
    path_params=(*GRAPH_PARAMS, Param("job", required=True, pattern=NAME)),
)
def freeze_job(call: Call) -> Any:
    """One job of that graph, frozen: playbooks, nodeset, variables (secrets by name)."""
    loaded, graph = _graph(call)
    try:
        return frozen_job_view(loaded.layout, loaded.tenant, graph, call["job"])
    except GraphLookupError as exc:
        raise ApiError(404, str(exc), "job") from None
