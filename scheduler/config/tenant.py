"""The tenant configuration (Zuul's ``main.yaml`` syntax).

::

    - tenant:
        name: example
        default-parent: base          # optional, Zuul's default
        max-job-timeout: 10800        # optional
        source:
          gerrit-or-git:              # a connection of sluice.yaml
            config-projects:
              - project-config
            untrusted-projects:
              - app
              - lib:
                  include: [job]      # object types to load (default: all)
                  shadow: project-config
              - exclude: [project]    # a group: options for several projects
                projects: [one, two]

Every connection named under ``source`` must be a git, github or gitlab
connection of ``sluice.yaml``; a project name must be a relative path (it
is a repository under the connection's ``baseurl``). A tenant with an error
is left out of the result, the others are kept; the errors say why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from scheduler.config.errors import ConfigError
from scheduler.config.parser import CONFIG_TYPES
from scheduler.config.schema import Fields, Where, repo_path_problem, type_name
from scheduler.config.yamlload import MarkedDict, MarkedList, load_yaml
from scheduler.settings.sections import ConnectionSettings

SOURCE_DRIVERS = ("git", "github", "gitlab")
TENANT_KEYS = frozenset(
    {
        "name",
        "description",
        "source",
        "default-parent",
        "max-job-timeout",
        "max-nodes-per-job",
        "exclude-unprotected-branches",
        "semaphores",
    }
)
PROJECT_OPTIONS = frozenset(
    {
        "include",
        "exclude",
        "shadow",
        "load-branch",
        "implied-branch-matchers",
        "extra-config-paths",
        "include-branches",
        "exclude-branches",
        "exclude-unprotected-branches",
    }
)


class BranchKey(NamedTuple):
    """What names one project branch everywhere: its connection, project and branch.

    The config layer keys a tenant's branches with it (the last good files
    of a branch, the branches an update broke: :mod:`scheduler.config.policies`),
    and the config cache keys its files with it
    (:mod:`scheduler.stores.config_cache`). A tuple, so it unpacks into
    ``(connection, project, branch)`` arguments and sorts in that order.
    """

    connection: str
    project: str
    branch: str


@dataclass(frozen=True)
class TenantProject:
    name: str
    connection: str
    trusted: bool
    include: tuple[str, ...] = CONFIG_TYPES
    shadow: tuple[str, ...] = ()
    load_branch: str | None = None
    implied_branch_matchers: bool | None = None
    extra_config_paths: tuple[str, ...] = ()
    include_branches: tuple[str, ...] = ()
    exclude_branches: tuple[str, ...] = ()
    exclude_unprotected_branches: bool | None = None


@dataclass(frozen=True)
class Tenant:
    name: str
    projects: tuple[TenantProject, ...]
    # connection name -> driver, for every connection of sluice.yaml
    drivers: Mapping[str, str] = field(default_factory=dict)
    default_parent: str = "base"
    max_job_timeout: int | None = None
    path: str = ""
    line: int = 0
    # the global semaphores (``- global-semaphore:``) this tenant may use: name -> max
    global_semaphores: Mapping[str, int] = field(default_factory=dict)

    def project(self, name: str) -> TenantProject | None:
        for project in self.projects:
            if project.name == name:
                return project
        return None

    def branch_key(self, project: str, branch: str) -> BranchKey:
        """The key of ``project``'s ``branch`` in this tenant (its connection is the project's).

        A project the tenant does not hold has no connection here: ``""``.
        """
        found = self.project(project)
        return BranchKey(found.connection if found else "", project, branch)


@dataclass(frozen=True)
class TenantConfig:
    tenants: tuple[Tenant, ...]
    errors: tuple[ConfigError, ...]

    def tenant(self, name: str) -> Tenant | None:
        return next((t for t in self.tenants if t.name == name), None)


def parse_tenant_config(
    text: str, where: str, connections: Mapping[str, ConnectionSettings]
) -> TenantConfig:
    """Parse ``main.yaml`` against the connections of ``sluice.yaml``."""
    place = Where(where)
    try:
        data = load_yaml(text, where)
    except ConfigError as exc:
        return TenantConfig((), (exc,))
    if data is None:
        return TenantConfig((), ())
    if not isinstance(data, MarkedList):
        return TenantConfig((), (place.error(1, "", "expected a list of tenants"),))
    drivers = {name: conn.driver for name, conn in sorted(connections.items())}
    tenants: list[tuple[Tenant, tuple[str, ...], int]] = []
    globals_: dict[str, int] = {}
    errors: list[ConfigError] = []
    for index, item in enumerate(data):
        line = data.line_of(index)
        try:
            if isinstance(item, MarkedDict) and list(item) == ["global-semaphore"]:
                name, maximum = _global_semaphore(item["global-semaphore"], line, place)
                if name in globals_:
                    raise place.error(line, f"global-semaphore {name!r}", "is defined twice")
                globals_[name] = maximum
                continue
            tenant, wanted = _tenant(item, line, place, drivers)
            if any(t.name == tenant.name for t, _, _ in tenants):
                raise place.error(line, f"tenant {tenant.name!r}", "is defined twice")
            tenants.append((tenant, wanted, line))
        except ConfigError as exc:
            errors.append(exc)
    resolved = []
    for tenant, wanted, line in tenants:
        unknown = [name for name in wanted if name not in globals_]
        if unknown:
            errors.append(
                place.error(
                    line,
                    f"tenant {tenant.name!r}",
                    f"semaphores: {unknown[0]!r} is not a defined global-semaphore",
                )
            )
            continue
        chosen = {name: globals_[name] for name in sorted(wanted)}
        resolved.append(replace(tenant, global_semaphores=chosen))
    return TenantConfig(tuple(resolved), tuple(errors))


def _global_semaphore(body: Any, line: int, place: Where) -> tuple[str, int]:
    """``- global-semaphore: {name, max}`` (shared by the tenants that list it)."""
    if not isinstance(body, MarkedDict):
        raise place.error(line, "global-semaphore", f"expected a mapping, got {type_name(body)}")
    name = body.get("name")
    subject = f"global-semaphore {name!r}" if isinstance(name, str) else "global-semaphore"
    fields = Fields(body, place, subject, frozenset({"name", "max"}))
    fields.check_keys()
    return fields.name(), fields.integer("max", minimum=1) or 1


def _tenant(
    item: Any, line: int, place: Where, drivers: Mapping[str, str]
) -> tuple[Tenant, tuple[str, ...]]:
    """The tenant, and the names of the global semaphores it asks for."""
    if not isinstance(item, MarkedDict) or list(item) != ["tenant"]:
        raise place.error(
            line,
            "",
            "expected '- tenant:' or '- global-semaphore:' (other types are not supported)",
        )
    body = item["tenant"]
    if not isinstance(body, MarkedDict):
        raise place.error(line, "tenant", f"expected a mapping, got {type_name(body)}")
    name = body.get("name")
    fields = Fields(
        body, place, f"tenant {name!r}" if isinstance(name, str) else "tenant", TENANT_KEYS
    )
    fields.check_keys()
    name = fields.name()
    fields.boolean("exclude-unprotected-branches", False)
    fields.integer("max-nodes-per-job", minimum=1)
    source = fields.mapping("source")
    if not source:
        raise fields.error(None, "'source' is required")
    projects: list[TenantProject] = []
    for conn in source:
        projects.extend(_source(fields, source, conn, drivers))
    projects.sort(key=lambda p: not p.trusted)  # config projects load first
    seen: set[str] = set()
    for project in projects:
        if project.name in seen:
            raise fields.error("source", f"project {project.name!r} is listed twice")
        seen.add(project.name)
    tenant = Tenant(
        name=name,
        projects=tuple(projects),
        drivers=dict(drivers),
        default_parent=fields.string("default-parent", "base") or "base",
        max_job_timeout=fields.integer("max-job-timeout", minimum=1),
        path=place.path,
        line=body.line,
    )
    return tenant, fields.string_list("semaphores") or ()


def _source(
    fields: Fields, source: MarkedDict, conn: Any, drivers: Mapping[str, str]
) -> list[TenantProject]:
    if not isinstance(conn, str) or conn not in drivers:
        known = ", ".join(sorted(drivers)) or "none"
        raise fields.error_at(
            source.line_of(conn), f"source: {conn!r} is not a known connection (known: {known})"
        )
    if drivers[conn] not in SOURCE_DRIVERS:
        raise fields.error_at(
            source.line_of(conn),
            f"source: connection {conn!r} ({drivers[conn]}) cannot be a source",
        )
    body = source[conn]
    if not isinstance(body, MarkedDict):
        raise fields.error_at(source.line_of(conn), f"source: {conn}: expected a mapping")
    sub = Fields(
        body,
        fields.where,
        fields.subject,
        {"config-projects", "untrusted-projects"},
        f"source.{conn}.",
    )
    sub.check_keys()
    result: list[TenantProject] = []
    for key, trusted in (("config-projects", True), ("untrusted-projects", False)):
        items = sub.raw(key)
        if items is None:
            continue
        if not isinstance(items, MarkedList):
            raise sub.error(key, f"expected a list, got {type_name(items)}")
        for index, item in enumerate(items):
            result.extend(
                _projects(sub, key, item, items.line_of(index), conn=conn, trusted=trusted)
            )
    return result


def _projects(
    fields: Fields, key: str, item: Any, line: int, *, conn: str, trusted: bool
) -> list[TenantProject]:
    if isinstance(item, str):
        return [_project(fields, item, line, conn=conn, trusted=trusted, opts=None)]
    if not isinstance(item, MarkedDict):
        raise fields.error_at(line, f"{fields.prefix}{key}: expected a project name or mapping")
    if "projects" in item:
        group = Fields(
            item, fields.where, fields.subject, PROJECT_OPTIONS | {"projects"}, f"{key}."
        )
        group.check_keys()
        names = group.string_list("projects") or ()
        return [
            _project(fields, name, line, conn=conn, trusted=trusted, opts=group) for name in names
        ]
    if len(item) != 1:
        raise fields.error_at(line, f"{fields.prefix}{key}: expected a mapping of one project name")
    ((name, options),) = item.items()
    if options is None:
        options = MarkedDict(line)
    if not isinstance(name, str) or not isinstance(options, MarkedDict):
        raise fields.error_at(line, f"{fields.prefix}{key}: expected 'name: {{options}}'")
    opts = Fields(options, fields.where, fields.subject, PROJECT_OPTIONS, f"project {name!r}: ")
    opts.check_keys()
    return [_project(fields, name, line, conn=conn, trusted=trusted, opts=opts)]


def _project(
    fields: Fields, name: str, line: int, *, conn: str, trusted: bool, opts: Fields | None
) -> TenantProject:
    problem = repo_path_problem(name)
    if problem:
        raise fields.error_at(line, f"project name {name!r} {problem}")
    if opts is None:
        return TenantProject(name, conn, trusted)
    include = opts.string_list("include")
    exclude = opts.string_list("exclude") or ()
    for kind in (*(include or ()), *exclude):
        if kind not in CONFIG_TYPES:
            raise opts.error(
                "include" if include and kind in include else "exclude",
                f"{kind!r} is not a configuration object type",
            )
    types = tuple(t for t in (CONFIG_TYPES if include is None else include) if t not in exclude)
    extra = opts.string_list("extra-config-paths") or ()
    for path in extra:
        if repo_path_problem(path.rstrip("/")):
            raise opts.error(
                "extra-config-paths", f"path {path!r} {repo_path_problem(path.rstrip('/'))}"
            )
    return TenantProject(
        name=name,
        connection=conn,
        trusted=trusted,
        include=tuple(t for t in CONFIG_TYPES if t in types),
        shadow=opts.string_list("shadow") or (),
        load_branch=opts.string("load-branch"),
        implied_branch_matchers=opts.optional_boolean("implied-branch-matchers"),
        extra_config_paths=extra,
        include_branches=opts.regexes("include-branches") or (),
        exclude_branches=opts.regexes("exclude-branches") or (),
        exclude_unprotected_branches=opts.optional_boolean("exclude-unprotected-branches"),
    )
