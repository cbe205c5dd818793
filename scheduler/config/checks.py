"""Cross-object checks of an assembled layout.

Parsing checks one object at a time; these checks need the whole tenant:
that parents, pipelines, templates, jobs, nodesets, required projects and
hard dependencies named by an object exist; that inheritance has no cycle
and does not extend a final or foreign protected job; that timeouts stay
under the tenant's ``max-job-timeout``. An object that fails is dropped
from the layout (its error is kept), as Zuul does.

Last, every job graph the layout can produce is frozen once per project,
branch and pipeline (file matchers ignored), so an unknown job, a
dependency cycle or a missing hard dependency is reported when the
configuration is loaded, not only when a change arrives.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.config.errors import ConfigError, FreezeError, NotPermittedError
from scheduler.config.freeze import inheritance_chain
from scheduler.config.graph import freeze_job_graph
from scheduler.config.layout import Layout
from scheduler.config.model import JobVariant, ProjectConfig
from scheduler.config.tenant import Tenant


def _error(obj: Any, subject: str, message: str, line: int | None = None) -> ConfigError:
    source = obj.source
    return ConfigError(
        message,
        path=source.path,
        line=source.line if line is None else line,
        subject=subject,
        project=source.project,
        branch=source.branch,
    )


def _variant_problem(
    tenant: Tenant, layout: Layout, reference: JobVariant, variant: JobVariant
) -> tuple[str, str]:
    """(what is wrong, the attribute it is about) or ("", "")."""
    attrs = variant.attrs
    if variant is not reference and "parent" in attrs and attrs["parent"] != reference.parent:
        where = reference.source.where()
        return f"a variant may not change the parent (first definition: {where})", "parent"
    timeout = attrs.get("timeout")
    limit = tenant.max_job_timeout
    if limit is not None and timeout is not None and timeout > limit:
        return f"timeout {timeout} is over the tenant's max-job-timeout {limit}", "timeout"
    nodeset = attrs.get("nodeset")
    if isinstance(nodeset, str) and nodeset not in layout.nodesets:
        return f"nodeset {nodeset!r} is not defined", "nodeset"
    for required in attrs.get("required-projects", ()):
        if tenant.project(required.name) is None:
            message = f"required project {required.name!r} is not in tenant {tenant.name!r}"
            return message, "required-projects"
    for dep in attrs.get("dependencies", ()):
        if not dep.soft and dep.name not in layout.jobs:
            return f"dependency {dep.name!r} is not defined", "dependencies"
    return _access_problem(tenant, layout, variant)


def _access_problem(tenant: Tenant, layout: Layout, variant: JobVariant) -> tuple[str, str]:
    """Unknown allowed projects; secrets not defined in the definition's own project."""
    for project in variant.attrs.get("allowed-projects", ()):
        if tenant.project(project) is None:
            message = f"allowed project {project!r} is not in tenant {tenant.name!r}"
            return message, "allowed-projects"
    return _secrets_problem(layout, variant), "secrets"


def _secrets_problem(layout: Layout, variant: JobVariant) -> str:
    """A secret must be defined in the project of the job definition that uses it."""
    source = variant.source
    for used in variant.attrs.get("secrets", ()):
        if layout.secret_for(used.secret, source.project, source.branch) is not None:
            continue
        if layout.secrets.get(used.secret):
            owner = layout.secrets[used.secret][0].source.project
            return (
                f"secret {used.secret!r} is defined in project {owner!r}; a secret may only "
                f"be used by jobs defined in the same project"
            )
        return f"secret {used.secret!r} is not defined"
    return ""


def _job_problem(layout: Layout, name: str) -> str:
    """What is wrong with the job's inheritance; a broken ancestor further up
    is reported on the job whose own parent is missing, and the children
    follow in the next round."""
    reference = layout.jobs[name][0]
    if reference.is_base:
        return ""
    parent = reference.parent or layout.default_parent
    if parent not in layout.jobs:
        return f"parent job {parent!r} is not defined"
    try:
        inheritance_chain(layout, name)
    except FreezeError as exc:
        if "inheritance cycle" in exc.message:
            return exc.message.split(": ", 1)[1]
        return ""
    return _sealed_parent(layout, reference, parent)


def _sealed_parent(layout: Layout, reference: JobVariant, parent: str) -> str:
    """A final parent, or a protected one of another project."""
    parent_ref = layout.jobs[parent][0]
    if parent_ref.attrs.get("final") and parent_ref.branches is None:
        return f"may not inherit from final job {parent!r}"
    owner = parent_ref.source.project
    if parent_ref.attrs.get("protected") and owner != reference.source.project:
        return f"may not inherit from protected job {parent!r} of project {owner!r}"
    return ""


def _check_jobs(tenant: Tenant, layout: Layout, errors: list[ConfigError]) -> Layout:
    jobs = dict(layout.jobs)
    for name, variants in layout.jobs.items():
        kept = []
        for variant in variants:
            problem, key = _variant_problem(tenant, layout, variants[0], variant)
            if problem:
                errors.append(_error(variant, f"job {name!r}", problem, variant.line_of(key)))
            else:
                kept.append(variant)
        if kept and kept[0] is not variants[0]:
            kept = []  # the reference definition is broken: so is the job
        jobs[name] = tuple(kept)
    layout = replace(layout, jobs={n: v for n, v in jobs.items() if v})
    while True:  # dropping a job may break its children: repeat until stable
        broken = {name: _job_problem(layout, name) for name in layout.jobs}
        broken = {name: why for name, why in broken.items() if why}
        if not broken:
            return layout
        for name, why in broken.items():
            reference = layout.jobs[name][0]
            errors.append(_error(reference, f"job {name!r}", why, reference.line_of("parent")))
        layout = replace(layout, jobs={n: v for n, v in layout.jobs.items() if n not in broken})


def _stanza_problem(
    tenant: Tenant, layout: Layout, stanza: ProjectConfig
) -> tuple[str, int | None]:
    if not stanza.template and tenant.project(stanza.name) is None:
        return f"project is not in tenant {tenant.name!r}", stanza.line_of("name")
    for template in stanza.templates:
        if template not in layout.templates:
            return f"project-template {template!r} is not defined", stanza.line_of("templates")
    for project_pipeline in stanza.pipelines:
        if project_pipeline.pipeline not in layout.pipelines:
            return f"pipeline {project_pipeline.pipeline!r} is not defined", project_pipeline.line
        for entry in project_pipeline.jobs:
            if entry.name not in layout.jobs:
                return f"job {entry.name!r} is not defined", entry.source.line
    return "", None


def _check_stanzas(tenant: Tenant, layout: Layout, errors: list[ConfigError]) -> Layout:
    tables: dict[str, dict[str, tuple[ProjectConfig, ...]]] = {}
    for kind, table in (("project-template", layout.templates), ("project", layout.projects)):
        kept: dict[str, tuple[ProjectConfig, ...]] = {}
        for name, stanzas in table.items():
            good = []
            for stanza in stanzas:
                problem, line = _stanza_problem(tenant, layout, stanza)
                if problem:
                    errors.append(_error(stanza, f"{kind} {name!r}", problem, line))
                else:
                    good.append(stanza)
            if good:
                kept[name] = tuple(good)
        tables[kind] = kept
        if kind == "project-template":
            layout = replace(layout, templates=kept)
    return replace(layout, projects=tables["project"])


def _check_pipelines(layout: Layout, errors: list[ConfigError]) -> None:
    for pipeline in layout.pipelines.values():
        for other in pipeline.supercedes:
            if other not in layout.pipelines:
                errors.append(
                    _error(
                        pipeline,
                        f"pipeline {pipeline.name!r}",
                        f"supercedes pipeline {other!r}, which is not defined",
                    )
                )


def _check_graphs(layout: Layout, errors: list[ConfigError]) -> None:
    seen = {(e.key(), e.line) for e in errors}
    for project, stanzas in layout.projects.items():
        pipelines = dict.fromkeys(p.pipeline for s in stanzas for p in s.pipelines)
        for template in (
            t for s in stanzas for name in s.templates for t in layout.templates[name]
        ):
            pipelines.update(dict.fromkeys(p.pipeline for p in template.pipelines))
        for branch in layout.branches.get(project, ()):
            for pipeline in pipelines:
                try:
                    freeze_job_graph(layout, project, branch, pipeline, None)
                except NotPermittedError:
                    continue  # decided per item, as Zuul does: not a configuration error
                except FreezeError as exc:
                    if (exc.key(), exc.line) not in seen:
                        seen.add((exc.key(), exc.line))
                        errors.append(exc)


def check_layout(tenant: Tenant, layout: Layout, errors: list[ConfigError]) -> Layout:
    """The layout with broken objects dropped; problems appended to ``errors``."""
    _check_pipelines(layout, errors)
    layout = _check_jobs(tenant, layout, errors)
    layout = _check_stanzas(tenant, layout, errors)
    _check_graphs(layout, errors)
    return layout
