"""The job graph of one item: frozen jobs and the dependencies between them.

Jobs come from the project pipeline (templates first, then the stanza's own
list, stanzas in load order); a job named more than once gets all its
entries applied, in order. Jobs that do not run for the item (no matching
variant, file matchers) are left out. Then dependencies are checked: a
*soft* dependency on a job that is not in the graph is dropped; a *hard*
one is an error, as is a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.config.errors import ConfigError, FreezeError
from scheduler.config.freeze import FrozenJob, freeze_job
from scheduler.config.layout import Layout
from scheduler.config.model import JobVariant, ProjectConfig, ProjectPipeline


@dataclass(frozen=True)
class JobGraph:
    """Not stored as such: each job's plain form is, with what scheduling needs of it."""

    project: str
    branch: str
    pipeline: str
    jobs: tuple[FrozenJob, ...] = ()
    # job name -> the names it waits for (soft ones absent are dropped)
    dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def job(self, name: str) -> FrozenJob | None:
        return next((j for j in self.jobs if j.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.jobs)


def _entries(
    layout: Layout, project: str, branch: str, pipeline: str
) -> tuple[dict[str, list[JobVariant]], tuple[ProjectConfig, ProjectPipeline] | None]:
    entries: dict[str, list[JobVariant]] = {}
    stanzas = layout.project_pipelines(project, branch, pipeline)
    for _, project_pipeline in stanzas:
        for entry in project_pipeline.jobs:
            entries.setdefault(entry.name, []).append(entry)
    return entries, (stanzas[0] if stanzas else None)


def freeze_job_graph(
    layout: Layout,
    project: str,
    branch: str,
    pipeline: str,
    files: Sequence[str] | None = None,
) -> JobGraph:
    """The frozen jobs an item of ``project``/``branch`` runs in ``pipeline`` of ``layout``.

    ``files`` are the changed paths (None or empty: unknown, file matchers
    then match). Raises :class:`FreezeError`.
    """
    if pipeline not in layout.pipelines:
        raise FreezeError(f"pipeline {pipeline!r} is not defined", project=project, branch=branch)
    entries, first = _entries(layout, project, branch, pipeline)
    jobs: list[FrozenJob] = []
    try:
        for name, variants in entries.items():
            job = freeze_job(
                layout, name, project=project, branch=branch, pipeline=pipeline, entries=variants
            )
            if job is not None and job.matches_files(files):
                jobs.append(job)
        dependencies = _dependencies(jobs)
    except FreezeError as exc:
        raise _locate(exc, first, pipeline) from None
    return JobGraph(project, branch, pipeline, tuple(jobs), dependencies)


def _locate(
    exc: FreezeError, first: tuple[ProjectConfig, ProjectPipeline] | None, pipeline: str
) -> FreezeError:
    """Name the project pipeline where the error shows, if it has no place yet."""
    if first is None or exc.path:
        return exc
    stanza, project_pipeline = first
    located: ConfigError = exc.located(
        path=stanza.source.path,
        line=project_pipeline.line,
        subject=f"project {stanza.name!r}",
        project=stanza.source.project,
        branch=stanza.source.branch,
    )
    return FreezeError(
        f"{pipeline}: {located.message}",
        path=located.path,
        line=located.line,
        subject=located.subject,
        project=located.project,
        branch=located.branch,
    )


def _dependencies(jobs: Sequence[FrozenJob]) -> dict[str, tuple[str, ...]]:
    present = {j.name for j in jobs}
    result: dict[str, tuple[str, ...]] = {}
    for job in jobs:
        kept: list[str] = []
        for dep in job.dependencies:
            if dep.name in present:
                kept.append(dep.name)
            elif not dep.soft:
                raise FreezeError(
                    f"job {job.name!r} depends on {dep.name!r}, which does not run for this item"
                )
        result[job.name] = tuple(kept)
    _check_cycles(result)
    return result


def _check_cycles(graph: Mapping[str, tuple[str, ...]]) -> None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in graph:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        state[start] = 1
        while stack:
            node, index = stack.pop()
            deps = graph[node]
            if index < len(deps):
                stack.append((node, index + 1))
                nxt = deps[index]
                if state.get(nxt) == 1:
                    cycle = [*path[path.index(nxt) :], nxt]
                    raise FreezeError(f"dependency cycle: {' -> '.join(cycle)}")
                if not state.get(nxt):
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()
