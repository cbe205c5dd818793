"""Parsing of one project configuration file into configuration objects.

A file is a YAML list of one-key mappings (``- job: {...}``). Each object is
parsed on its own: the first problem in an object becomes one
:class:`~scheduler.config.errors.ConfigError` and that object is skipped;
the others are kept. Object types excluded for the project by the tenant
(``include``/``exclude``) are skipped without a word, as in Zuul.

Who may define what (Zuul's rules): pipelines only in config projects;
base jobs (``parent: null``) only in config projects; an untrusted project's
``project:`` stanza only for itself.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from scheduler.config.errors import ConfigError
from scheduler.config.jobs import parse_job
from scheduler.config.model import (
    JobVariant,
    Nodeset,
    Pipeline,
    ProjectConfig,
    Queue,
    Secret,
    Semaphore,
    SourceContext,
)
from scheduler.config.pipelines import batch_of, parse_pipeline
from scheduler.config.projects import parse_project
from scheduler.config.schema import Fields, Where, plain_json, type_name
from scheduler.config.yamlload import MarkedDict, MarkedList, load_yaml

CONFIG_TYPES = (
    "pipeline",
    "job",
    "project",
    "project-template",
    "semaphore",
    "queue",
    "nodeset",
    "secret",
)
ZUUL_ONLY_TYPES = frozenset(
    {"pragma", "global-semaphore", "image", "flavor", "label", "section", "provider"}
)


@dataclass
class ParsedConfig:
    """Objects parsed from one or more files, in load order."""

    pipelines: list[Pipeline] = field(default_factory=list)
    jobs: list[JobVariant] = field(default_factory=list)
    projects: list[ProjectConfig] = field(default_factory=list)
    templates: list[ProjectConfig] = field(default_factory=list)
    semaphores: list[Semaphore] = field(default_factory=list)
    queues: list[Queue] = field(default_factory=list)
    nodesets: list[Nodeset] = field(default_factory=list)
    secrets: list[Secret] = field(default_factory=list)

    def extend(self, other: ParsedConfig) -> None:
        self.pipelines.extend(other.pipelines)
        self.jobs.extend(other.jobs)
        self.projects.extend(other.projects)
        self.templates.extend(other.templates)
        self.semaphores.extend(other.semaphores)
        self.queues.extend(other.queues)
        self.nodesets.extend(other.nodesets)
        self.secrets.extend(other.secrets)


def parse_config_text(
    text: str,
    where: Where,
    *,
    trusted: bool,
    include: Collection[str] = CONFIG_TYPES,
    drivers: Mapping[str, str],
) -> tuple[ParsedConfig, list[ConfigError]]:
    """Parse one file's text; never raises for bad input."""
    parsed = ParsedConfig()
    errors: list[ConfigError] = []
    try:
        data = load_yaml(text, where.path)
    except ConfigError as exc:
        return parsed, [exc.located(project=where.project, branch=where.branch)]
    if data is None:
        return parsed, errors
    if not isinstance(data, MarkedList):
        line = getattr(data, "line", 1) or 1
        return parsed, [
            where.error(
                line, "", f"expected a list of configuration objects, got {type_name(data)}"
            )
        ]
    for index, item in enumerate(data):
        try:
            _parse_object(
                item,
                data.line_of(index),
                where,
                trusted=trusted,
                include=include,
                drivers=drivers,
                parsed=parsed,
            )
        except ConfigError as exc:
            errors.append(exc)
    return parsed, errors


def _parse_object(
    item: object,
    line: int,
    where: Where,
    *,
    trusted: bool,
    include: Collection[str],
    drivers: Mapping[str, str],
    parsed: ParsedConfig,
) -> None:
    if not isinstance(item, MarkedDict) or len(item) != 1:
        raise where.error(
            line, "", "expected a mapping with one key, the object type (e.g. '- job:')"
        )
    ((kind, body),) = item.items()
    if kind in ZUUL_ONLY_TYPES:
        raise where.error(line, str(kind), "this object type is not supported by Sluice yet")
    if kind not in CONFIG_TYPES:
        raise where.error(
            line, "", f"unknown object type {kind!r} (known: {', '.join(CONFIG_TYPES)})"
        )
    if kind not in include:
        return
    if not isinstance(body, MarkedDict):
        raise where.error(line, str(kind), f"expected a mapping, got {type_name(body)}")
    source = SourceContext(where.project, where.branch, where.path, line, trusted)
    if kind == "pipeline":
        if not trusted:
            name = body.get("name")
            subject = f"pipeline {name!r}" if isinstance(name, str) else "pipeline"
            raise where.error(line, subject, "pipelines may only be defined in config projects")
        parsed.pipelines.append(parse_pipeline(body, where, source, drivers))
    elif kind == "job":
        parsed.jobs.append(parse_job(body, where, source))
    elif kind in ("project", "project-template"):
        project = parse_project(body, where, source, template=kind == "project-template")
        (parsed.templates if project.template else parsed.projects).append(project)
    else:
        _NAMED[kind](body, where, source, parsed)


def _subject(kind: str, body: MarkedDict) -> str:
    name = body.get("name")
    return f"{kind} {name!r}" if isinstance(name, str) else kind


def _semaphore(body: MarkedDict, where: Where, source: SourceContext) -> Semaphore:
    fields = Fields(body, where, _subject("semaphore", body), {"name", "max"})
    fields.check_keys()
    name = fields.name()
    maximum = fields.integer("max", minimum=1)
    return Semaphore(name, 1 if maximum is None else maximum, source)


def _queue(body: MarkedDict, where: Where, source: SourceContext) -> Queue:
    keys = {
        "name",
        "per-branch",
        "allow-circular-dependencies",
        "dependencies-by-topic",
        "batch",
        "pending-failure-depth",
    }
    fields = Fields(body, where, _subject("queue", body), keys)
    fields.check_keys()
    fields.boolean("dependencies-by-topic", False)
    return Queue(
        name=fields.name(),
        source=source,
        per_branch=fields.boolean("per-branch", False),
        allow_circular_dependencies=fields.boolean("allow-circular-dependencies", False),
        batch=batch_of(fields),
        pending_failure_depth=fields.integer("pending-failure-depth", minimum=0),
    )


def _nodeset(body: MarkedDict, where: Where, source: SourceContext) -> Nodeset:
    fields = Fields(
        body, where, _subject("nodeset", body), {"name", "nodes", "groups", "alternatives"}
    )
    fields.check_keys()
    name = fields.name()
    spec = {key: fields.json(key) for key in ("nodes", "groups", "alternatives") if fields.has(key)}
    return Nodeset(name, source, spec)


def _secret(body: MarkedDict, where: Where, source: SourceContext) -> Secret:
    """A data secret (Zuul's ``oidc`` token secrets are not supported)."""
    fields = Fields(body, where, _subject("secret", body), {"name", "data", "oidc"})
    fields.check_keys()
    name = fields.name()
    if fields.has("oidc"):
        raise fields.error("oidc", "token (OIDC) secrets are not supported by Sluice yet")
    data = fields.raw("data")
    if not isinstance(data, MarkedDict):
        raise fields.error("data", f"expected a mapping, got {type_name(data)}")
    plain = plain_json(fields, "data", data, encrypted=True)
    return Secret(name, source, connection="", data=plain)


def _add_semaphore(
    body: MarkedDict, where: Where, source: SourceContext, into: ParsedConfig
) -> None:
    into.semaphores.append(_semaphore(body, where, source))


def _add_queue(body: MarkedDict, where: Where, source: SourceContext, into: ParsedConfig) -> None:
    into.queues.append(_queue(body, where, source))


def _add_nodeset(body: MarkedDict, where: Where, source: SourceContext, into: ParsedConfig) -> None:
    into.nodesets.append(_nodeset(body, where, source))


def _add_secret(body: MarkedDict, where: Where, source: SourceContext, into: ParsedConfig) -> None:
    into.secrets.append(_secret(body, where, source))


# the object types that are a name and a few attributes
_NAMED: dict[str, Callable[[MarkedDict, Where, SourceContext, ParsedConfig], None]] = {
    "semaphore": _add_semaphore,
    "queue": _add_queue,
    "nodeset": _add_nodeset,
    "secret": _add_secret,
}
