"""The job graph of a project's branch in a pipeline, frozen for a look (Zuul's freeze-jobs).

What ``zuul-client job-graph`` and ``freeze-job`` show: the jobs an item
of ``project`` on ``branch`` would run in ``pipeline`` under the tenant's
current layout, frozen as for a change that touches every file (file
matchers match), with the dependencies between them; and one of those
jobs in full, in the fields of Zuul's ``freeze-job`` (playbooks with their
connection, project, branch and trust; the nodeset; the variables).
Secrets are named, never shown: their values stay encrypted in the layout
and are decrypted only by an executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.config import Layout, Tenant
from scheduler.config.errors import FreezeError
from scheduler.config.freeze import FrozenJob
from scheduler.config.graph import JobGraph, freeze_job_graph
from scheduler.config.model import Playbook
from scheduler.errors import SluiceError
from scheduler.model.nodeset import nodeset_alternatives, nodeset_groups, nodeset_nodes

REDACTED = "REDACTED"


class GraphLookupError(SluiceError):
    """The pipeline, project or job asked for is not in the tenant (Zuul's 404)."""


class GraphFreezeError(SluiceError):
    """The graph cannot be frozen (a hard dependency that does not run, a cycle)."""


def frozen_graph(
    layout: Layout, tenant: Tenant, pipeline: str, project: str, branch: str
) -> JobGraph:
    """The frozen job graph; GraphLookupError or GraphFreezeError."""
    if pipeline not in layout.pipelines:
        raise GraphLookupError(f"Unknown pipeline: {pipeline!r}")
    if not any(p.name == project for p in tenant.projects):
        raise GraphLookupError(f"Unknown project: {project!r}")
    try:
        return freeze_job_graph(layout, project, branch, pipeline)
    except FreezeError as exc:
        raise GraphFreezeError(str(exc)) from None


def graph_rows(graph: JobGraph) -> list[dict[str, Any]]:
    """Zuul's freeze-jobs: each job with the dependencies it keeps (``name``, ``soft``)."""
    rows = []
    for job in graph.jobs:
        kept = set(graph.dependencies.get(job.name, ()))
        dependencies = [
            {"name": d.name, "soft": d.soft} for d in job.dependencies if d.name in kept
        ]
        rows.append({"name": job.name, "dependencies": dependencies})
    return rows


def frozen_job_view(layout: Layout, tenant: Tenant, graph: JobGraph, name: str) -> dict[str, Any]:
    """Zuul's freeze-job fields of one job of ``graph``; GraphLookupError if it has none."""
    job = graph.job(name)
    if job is None:
        raise GraphLookupError(f"Unknown job: {name!r}")
    connections = {p.name: p.connection for p in tenant.projects}
    named = {n: nodeset.spec for n, nodeset in layout.nodesets.items()}

    def playbooks(steps: tuple[Playbook, ...]) -> list[dict[str, Any]]:
        return [_playbook(step, connections) for step in steps]

    return {
        "job": job.name,
        "project": job.project,
        "branch": graph.branch,
        "pipeline": graph.pipeline,
        "parent": job.parent,
        "description": job.description,
        "voting": job.voting,
        "timeout": job.timeout,
        "post_timeout": job.post_timeout,
        "attempts": job.attempts,
        "override_branch": None,
        "override_checkout": None,
        "ansible_version": None,
        "workspace_scheme": None,
        "pre_playbooks": playbooks(job.pre_run),
        "playbooks": playbooks(job.run),
        "post_playbooks": playbooks(job.post_run),
        "cleanup_playbooks": [],
        "nodeset": _nodeset(job, named),
        "vars": dict(job.vars),
        "extra_vars": {},
        "host_vars": {},
        "group_vars": {},
        "secret_vars": None,
        "secrets": sorted(s.get("name", k) for k, s in job.secrets.items()),
        "required_projects": [
            {"name": r.name, "override_checkout": r.override_checkout}
            for r in job.required_projects
        ],
        "dependencies": [{"name": d.name, "soft": d.soft} for d in job.dependencies],
        "semaphores": [s.name for s in job.semaphores],
        "tags": list(job.tags),
        "zone": job.zone or None,
        "failure_output": list(job.failure_output),
        "variants": list(job.variants),
    }


def _playbook(step: Playbook, connections: Mapping[str, str]) -> dict[str, Any]:
    return {
        "connection": connections.get(step.project, ""),
        "project": step.project,
        "branch": step.branch,
        "path": step.path,
        "trusted": step.trusted,
        "roles": [],
        "secrets": {alias: REDACTED for alias, _ in step.secrets},
    }


def _nodeset(job: FrozenJob, named: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Zuul's nodeset: its name (empty when inline), nodes, groups and alternatives."""
    spec = job.nodeset
    groups: dict[str, list[str]] = {}
    for node, names in nodeset_groups(spec, named).items():
        for group in names:
            groups.setdefault(group, []).append(node)
    alternatives = nodeset_alternatives(spec, named)
    return {
        "name": spec if isinstance(spec, str) else "",
        "nodes": [{"name": [n], "label": label} for n, label in nodeset_nodes(spec, named)],
        "groups": [{"name": g, "nodes": members} for g, members in groups.items()],
        "alternatives": [] if len(alternatives) < 2 else [dict(a) for a in alternatives],
    }
