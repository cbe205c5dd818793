"""From a frozen job to a :class:`BuildSpec`: the one mapping between the two.

The scheduler freezes a job (:class:`scheduler.config.freeze.FrozenJob`);
the merger gives the item's repo state. :func:`spec_for_job` combines them
with what only the pipeline knows (tenant, ref, the build's uuid, parent
data) into the spec the executor runs:

* steps keep the project and branch of the variant that named them
  (``Playbook`` becomes :class:`JobStep`);
* the repo state is narrowed to the projects the build uses: the change's
  project, the job's required projects and the projects holding its steps;
  each must be in the item's repo state (the merger includes required
  projects at their branch heads);
* ``override-checkout`` of a required project becomes ``checkouts``;
* the job's secrets travel still encrypted, each step naming those it sees;
* the merge request that made the repo state, and each project's
  connection, go along, so an executor without the merger's repo cache can
  make that state again (the request's job and result stay in ZooKeeper).

* trusted (config-project) steps run from the branch head, never from a
  speculative merge: where the item's merge moved their branch
  (``base_state``: the commit each moved branch had before the changes),
  the step names that commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook
from scheduler.wire.build_spec import BuildSpec, BuildSpecError, JobStep


def spec_for_job(
    job: FrozenJob,
    *,
    tenant: str,
    ref: str,
    build_uuid: str,
    repo_state: Mapping[str, Mapping[str, str]],
    sources: Mapping[str, str],
    parent_data: Mapping[str, Any] | None = None,
    hold: bool = False,
    base_state: Mapping[str, Mapping[str, str]] | None = None,
    merge_request: str = "",
    connections: Mapping[str, str] | None = None,
) -> BuildSpec:
    """The spec of one build of ``job``; :class:`BuildSpecError` if something is missing."""
    used = set(job.projects_used())
    missing = sorted(used - set(repo_state))
    if missing:
        raise BuildSpecError(f"job {job.name}: repo state lacks {', '.join(missing)}")
    return BuildSpec(
        tenant=tenant,
        pipeline=job.pipeline,
        project=job.project,
        branch=job.branch,
        ref=ref,
        job=job.name,
        build_uuid=build_uuid,
        pre_run=_steps(job.pre_run, base_state or {}),
        run=_steps(job.run, base_state or {}),
        post_run=_steps(job.post_run, base_state or {}),
        timeout=None if job.timeout is None else float(job.timeout),
        post_timeout=None if job.post_timeout is None else float(job.post_timeout),
        vars=dict(job.vars),
        parent_data=dict(parent_data or {}),
        repo_state={project: dict(repo_state[project]) for project in sorted(used)},
        sources={project: sources[project] for project in sorted(used) if project in sources},
        checkouts={
            r.name: r.override_checkout for r in job.required_projects if r.override_checkout
        },
        hold=hold,
        secrets={key: dict(secret) for key, secret in job.secrets.items()},
        speculation=_speculation(used, merge_request, connections or {}),
    )


def _speculation(
    used: set[str], merge_request: str, connections: Mapping[str, str]
) -> dict[str, Any]:
    """Where the merge that made the repo state is recorded (see BuildSpec)."""
    if not merge_request:
        return {}
    return {
        "merge_request": merge_request,
        "connections": {p: connections[p] for p in sorted(used) if p in connections},
    }


def _steps(
    playbooks: Iterable[Playbook], base_state: Mapping[str, Mapping[str, str]]
) -> tuple[JobStep, ...]:
    return tuple(
        JobStep(p.path, p.project, p.branch, _trusted_commit(p, base_state), p.secrets, p.trusted)
        for p in playbooks
    )


def _trusted_commit(playbook: Playbook, base_state: Mapping[str, Mapping[str, str]]) -> str | None:
    """The pre-speculation commit a trusted step runs from, if its branch was moved."""
    if not playbook.trusted:
        return None
    return base_state.get(playbook.project, {}).get(playbook.branch)
