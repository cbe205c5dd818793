"""Building a tenant's layout from the configuration files of its projects.

Input: the :class:`~scheduler.config.tenant.Tenant` and, for each project
branch, a mapping ``path -> text`` (:class:`UnparsedBranch`) that may come
from a merger, the ZooKeeper config cache or a local checkout. Output: a
:class:`~scheduler.config.layout.LayoutResult`, the layout of every good
object plus one error per bad one. Nothing here does I/O.

Load order (it decides the order of job variants): config projects, then
untrusted projects, each in tenant order; a project's branches in sorted
order; a branch's files as :mod:`scheduler.config.files` says. A config
project is read from one branch only: its ``load-branch`` if set,
otherwise the single branch given (several without ``load-branch`` is an
error).

Definitions that clash: a job may have variants in one project only
(across its branches); a later project redefining it is an error unless it
lists the first in ``shadow`` (then its definitions are ignored, Zuul's
rule). Pipelines, semaphores, queues and nodesets are defined once; the
same definition repeated on another branch of the same project is fine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.config.checks import check_layout
from scheduler.config.errors import ConfigError
from scheduler.config.files import select_config_files
from scheduler.config.layout import Layout, LayoutResult
from scheduler.config.model import NOOP_JOB, JobVariant, ProjectConfig, Secret, SourceContext
from scheduler.config.parser import ParsedConfig, parse_config_text
from scheduler.config.regex import matches_any
from scheduler.config.schema import Where
from scheduler.config.tenant import Tenant, TenantProject


@dataclass(frozen=True)
class UnparsedBranch:
    """The configuration files of one project branch: path -> text."""

    project: str
    branch: str
    files: Mapping[str, str] = field(default_factory=dict)


def _branches_to_load(
    tenant: Tenant, given: Iterable[UnparsedBranch], errors: list[ConfigError]
) -> dict[str, list[UnparsedBranch]]:
    by_project: dict[str, dict[str, UnparsedBranch]] = {p.name: {} for p in tenant.projects}
    for unparsed in given:
        if unparsed.project not in by_project:
            errors.append(
                ConfigError(f"project is not in tenant {tenant.name!r}", project=unparsed.project)
            )
            continue
        by_project[unparsed.project][unparsed.branch] = unparsed
    result: dict[str, list[UnparsedBranch]] = {}
    for project in tenant.projects:
        branches = {
            name: b for name, b in by_project[project.name].items() if _branch_wanted(project, name)
        }
        if project.trusted and project.load_branch is not None:
            branches = {k: v for k, v in branches.items() if k == project.load_branch}
        if project.trusted and len(branches) > 1:
            if project.load_branch in branches:
                branches = {project.load_branch: branches[project.load_branch]}
            else:
                errors.append(
                    ConfigError(
                        "a config project is read from one branch; set load-branch "
                        f"(given: {', '.join(sorted(branches))})",
                        project=project.name,
                    )
                )
                branches = {}
        result[project.name] = [branches[name] for name in sorted(branches)]
    return result


def _branch_wanted(project: TenantProject, branch: str) -> bool:
    if project.include_branches and not matches_any(project.include_branches, branch):
        return False
    return not (project.exclude_branches and matches_any(project.exclude_branches, branch))


def _parse_branch(
    tenant: Tenant,
    project: TenantProject,
    unparsed: UnparsedBranch,
    implied: bool,
    sink: tuple[list[ConfigError], list[ConfigError]],
) -> ParsedConfig:
    errors, warnings = sink
    selection = select_config_files(unparsed.files, project.extra_config_paths)
    for path in selection.ignored:
        warnings.append(
            ConfigError(
                "ignored: another Zuul configuration file or directory takes precedence",
                path=path,
                project=project.name,
                branch=unparsed.branch,
            )
        )
    for path, why in selection.refused:
        errors.append(
            ConfigError(
                f"path refused: {why}", path=path, project=project.name, branch=unparsed.branch
            )
        )
    parsed = ParsedConfig()
    for path in selection.paths:
        where = Where(path, project.name, unparsed.branch)
        one, problems = parse_config_text(
            unparsed.files[path],
            where,
            trusted=project.trusted,
            include=project.include,
            drivers=tenant.drivers,
        )
        parsed.extend(one)
        errors.extend(problems)
    if implied:
        _imply_branch(parsed, unparsed.branch)
    return parsed


def _imply_branch(parsed: ParsedConfig, branch: str) -> None:
    parsed.jobs[:] = [
        v if v.branches is not None else replace(v, implied_branch=branch) for v in parsed.jobs
    ]
    parsed.projects[:] = [replace(p, implied_branch=branch) for p in parsed.projects]
    parsed.templates[:] = [replace(p, implied_branch=branch) for p in parsed.templates]


def _implied(project: TenantProject, branch_count: int) -> bool:
    if project.implied_branch_matchers is not None:
        return project.implied_branch_matchers
    return not project.trusted and branch_count > 1


# the built-in noop job's definition (scheduler.config.model.NOOP_JOB)
_NOOP = JobVariant(
    name=NOOP_JOB,
    source=SourceContext(project="", branch="", path="<built-in>", line=0, trusted=True),
    attrs={"parent": None, "description": "does nothing and always succeeds (built in)"},
    origin=f"job {NOOP_JOB!r}",
)


class _Assembler:
    """Collects parsed objects into the layout's tables, refusing clashes."""

    def __init__(self, tenant: Tenant, errors: list[ConfigError]) -> None:
        self.tenant = tenant
        self.errors = errors
        self.pipelines: dict[str, Any] = {}
        self.jobs: dict[str, list[JobVariant]] = {NOOP_JOB: [_NOOP]}
        self.projects: dict[str, list[ProjectConfig]] = {}
        self.templates: dict[str, list[ProjectConfig]] = {}
        self.singles: dict[str, dict[str, Any]] = {"semaphore": {}, "queue": {}, "nodeset": {}}
        self.secrets: dict[str, list[Secret]] = {}

    def add(self, project: TenantProject, parsed: ParsedConfig) -> None:
        for pipeline in parsed.pipelines:
            self._single("pipeline", self.pipelines, pipeline)
        for kind, items in (
            ("semaphore", parsed.semaphores),
            ("queue", parsed.queues),
            ("nodeset", parsed.nodesets),
        ):
            for item in items:
                self._single(kind, self.singles[kind], item)
        for variant in parsed.jobs:
            self._job(project, variant)
        for stanza in parsed.projects:
            self.projects.setdefault(stanza.name, []).append(stanza)
        for template in parsed.templates:
            self._template(template)
        for secret in parsed.secrets:
            self._secret(project, secret)

    def _secret(self, project: TenantProject, secret: Secret) -> None:
        """One name, one project (Zuul's rule); a project may define it on each branch."""
        secret = replace(secret, connection=project.connection)
        defined = self.secrets.setdefault(secret.name, [])
        for old in defined:
            if old.source.project != project.name or old.source.branch == secret.source.branch:
                where = f"{old.source.project}@{old.source.branch} {old.source.where()}"
                self._error(secret, f"secret {secret.name!r}", f"is already defined ({where})")
                return
        defined.append(secret)

    def _error(self, obj: Any, subject: str, message: str) -> None:
        source = obj.source
        self.errors.append(
            ConfigError(
                message,
                path=source.path,
                line=source.line,
                subject=subject,
                project=source.project,
                branch=source.branch,
            )
        )

    def _single(self, kind: str, table: dict[str, Any], obj: Any) -> None:
        old = table.get(obj.name)
        if old is None:
            table[obj.name] = obj
            return
        same_project = old.source.project == obj.source.project
        if same_project and replace(old, source=obj.source) == obj:
            return
        where = f"{old.source.project}@{old.source.branch} {old.source.where()}"
        self._error(obj, f"{kind} {obj.name!r}", f"is already defined ({where})")

    def _job(self, project: TenantProject, variant: JobVariant) -> None:
        if variant.name == NOOP_JOB:
            self._error(variant, f"job {NOOP_JOB!r}", "is built in and may not be defined")
            return
        variants = self.jobs.setdefault(variant.name, [])
        if variants and variants[0].source.project != project.name:
            owner = variants[0].source.project
            if owner in project.shadow:
                return
            self._error(
                variant,
                f"job {variant.name!r}",
                f"is already defined in project {owner!r} (variants must be in one project)",
            )
            return
        variants.append(variant)

    def _template(self, template: ProjectConfig) -> None:
        existing = self.templates.setdefault(template.name, [])
        if existing and existing[0].source.project != template.source.project:
            owner = existing[0].source.project
            self._error(
                template,
                f"project-template {template.name!r}",
                f"is already defined in project {owner!r}",
            )
            return
        existing.append(template)

    def layout(self, branches: Mapping[str, tuple[str, ...]]) -> Layout:
        return Layout(
            tenant=self.tenant.name,
            default_parent=self.tenant.default_parent,
            max_job_timeout=self.tenant.max_job_timeout,
            pipelines=dict(self.pipelines),
            jobs={name: tuple(v) for name, v in self.jobs.items() if v},
            projects={name: tuple(v) for name, v in self.projects.items()},
            templates={name: tuple(v) for name, v in self.templates.items() if v},
            semaphores=dict(self.singles["semaphore"]),
            queues=dict(self.singles["queue"]),
            nodesets=dict(self.singles["nodeset"]),
            secrets={name: tuple(v) for name, v in self.secrets.items()},
            branches=branches,
        )


def build_layout(tenant: Tenant, branches: Iterable[UnparsedBranch]) -> LayoutResult:
    """Parse every given branch of the tenant's projects into a layout.

    Give every branch of every project, with an empty ``files`` mapping for
    a branch without configuration: the number of branches decides whether
    implied branch matchers apply. Never raises for bad configuration.
    """
    errors: list[ConfigError] = []
    warnings: list[ConfigError] = []
    to_load = _branches_to_load(tenant, branches, errors)
    assembler = _Assembler(tenant, errors)
    for project in tenant.projects:
        loaded = to_load[project.name]
        implied = _implied(project, len(loaded))
        for unparsed in loaded:
            parsed = _parse_branch(tenant, project, unparsed, implied, (errors, warnings))
            assembler.add(project, parsed)
    layout = assembler.layout({p: tuple(b.branch for b in bs) for p, bs in to_load.items() if bs})
    layout = check_layout(tenant, layout, errors)
    return LayoutResult(layout, tuple(errors), tuple(warnings))
