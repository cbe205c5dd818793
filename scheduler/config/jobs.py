"""Parsing of ``job:`` objects and of job entries in project pipelines."""

from __future__ import annotations

import re
from typing import Any

from scheduler.config.model import (
    Dependency,
    JobSecret,
    JobVariant,
    Playbook,
    RequiredProject,
    SourceContext,
)
from scheduler.config.schema import (
    MAX_NAME,
    Fields,
    Where,
    check_name,
    matcher_path_problem,
    repo_path_problem,
    type_name,
)
from scheduler.config.yamlload import MarkedDict

# Attributes that a project-pipeline job entry may set too.
VARIANT_KEYS = frozenset(
    {
        "description",
        "voting",
        "timeout",
        "post-timeout",
        "attempts",
        "branches",
        "files",
        "irrelevant-files",
        "pre-run",
        "run",
        "post-run",
        "vars",
        "required-projects",
        "dependencies",
        "semaphore",
        "semaphores",
        "nodeset",
        "tags",
        # Sluice's own: the executor zone (queue executor.<zone>) that runs the job
        "zone",
        # regexes searched in the run steps' output: a match pre-fails the build
        "failure-output",
        # Zuul's: names shared with the jobs of other changes (artifacts)
        "provides",
        "requires",
    }
)
# An executor zone becomes a Celery queue name (executor.<zone>) and a znode name.
ZONE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# Only a job definition may name secrets and say who may run it (the
# definition's project owns the secrets; a project stanza may not add any).
JOB_KEYS = VARIANT_KEYS | {
    "name",
    "parent",
    "abstract",
    "final",
    "protected",
    "secrets",
    "post-review",
    "allowed-projects",
}


def parse_job(data: MarkedDict, where: Where, source: SourceContext) -> JobVariant:
    """A ``job:`` definition; raises ConfigError on the first problem."""
    name = data.get("name")
    subject = f"job {name!r}" if isinstance(name, str) else "job"
    fields = Fields(data, where, subject, JOB_KEYS)
    fields.check_keys()
    name = fields.name()
    attrs = _read_attrs(fields, source)
    if "parent" in data:
        parent = fields.raw("parent")
        if parent is None:
            if not source.trusted:
                raise fields.error(
                    "parent", "base jobs (parent: null) may only be defined in config projects"
                )
        else:
            check_name(fields, "parent", fields.expect("parent", parent, (str,), "a string"))
            if parent == name:
                raise fields.error("parent", "a job may not be its own parent")
        attrs["parent"] = parent
    for key in ("abstract", "final", "protected", "post-review"):
        flag = fields.optional_boolean(key)
        if flag is not None:
            attrs[key] = flag
    if fields.has("secrets"):
        attrs["secrets"] = _job_secrets(fields)
    allowed = fields.string_list("allowed-projects")
    if allowed is not None:
        attrs["allowed-projects"] = allowed
    return JobVariant(
        name, source, attrs, fields.regexes("branches"), origin=subject, lines=_lines(data)
    )


def _lines(data: MarkedDict) -> dict[str, int]:
    return {key: data.line_of(key) for key in data if isinstance(key, str)}


def parse_job_entry(
    item: Any, line: int, where: Where, subject: str, source: SourceContext
) -> JobVariant:
    """One item of a project pipeline ``jobs:`` list: a name or ``{name: {...}}``."""
    if isinstance(item, str):
        if not item.strip():
            raise where.error(line, subject, "jobs: a job name must not be empty")
        return JobVariant(item, source, origin=subject)
    if not isinstance(item, MarkedDict) or len(item) != 1:
        raise where.error(
            line,
            subject,
            f"jobs: expected a job name or a mapping of one job name, got {type_name(item)}",
        )
    ((name, body),) = item.items()
    if not isinstance(name, str) or not name.strip():
        raise where.error(line, subject, "jobs: a job name must be a non-empty string")
    if body is None:
        body = MarkedDict(line)
    if not isinstance(body, MarkedDict):
        raise where.error(line, subject, f"job {name!r}: expected a mapping, got {type_name(body)}")
    fields = Fields(body, where, subject, VARIANT_KEYS, prefix=f"job {name!r}: ")
    fields.check_keys()
    attrs = _read_attrs(fields, source)
    return JobVariant(
        name, source, attrs, fields.regexes("branches"), origin=subject, lines=_lines(body)
    )


def _read_attrs(fields: Fields, source: SourceContext) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    _read_scalars(fields, attrs)
    _read_matchers(fields, attrs)
    for key in ("pre-run", "run", "post-run"):
        if fields.has(key):
            attrs[key] = _playbooks(fields, key, source)
    _read_collections(fields, attrs)
    return attrs


def _read_matchers(fields: Fields, attrs: dict[str, Any]) -> None:
    for key in ("files", "irrelevant-files"):
        patterns = fields.regexes(key)
        if patterns is not None:
            for pattern in patterns:
                problem = matcher_path_problem(pattern)
                if problem:
                    raise fields.error(key, f"regex {pattern!r} {problem}")
            attrs[key] = patterns
    failure_output = fields.regexes("failure-output", in_lines=True)
    if failure_output is not None:
        attrs["failure-output"] = failure_output


def _read_collections(fields: Fields, attrs: dict[str, Any]) -> None:
    if fields.has("vars"):
        if not isinstance(fields.raw("vars"), MarkedDict):
            raise fields.error("vars", f"expected a mapping, got {type_name(fields.raw('vars'))}")
        attrs["vars"] = fields.json("vars")
    if fields.has("required-projects"):
        attrs["required-projects"] = _required_projects(fields)
    if fields.has("dependencies"):
        attrs["dependencies"] = _dependencies(fields)
    semaphores = _semaphores(fields)
    if semaphores is not None:
        attrs["semaphores"] = semaphores
    if fields.has("nodeset"):
        nodeset = fields.json("nodeset")
        if not isinstance(nodeset, str | dict):
            raise fields.error("nodeset", f"expected a name or a mapping, got {type_name(nodeset)}")
        attrs["nodeset"] = nodeset
    tags = fields.string_list("tags")
    if tags is not None:
        attrs["tags"] = tags
    for key in ("provides", "requires"):
        names = _resource_names(fields, key)
        if names is not None:
            attrs[key] = names


def _resource_names(fields: Fields, key: str) -> tuple[str, ...] | None:
    """``provides``/``requires``: free-form names (Zuul's), each a line of text."""
    names = fields.string_list(key)
    if names is None:
        return None
    for name in names:
        if not name.strip():
            raise fields.error(key, "a name must not be empty")
        if len(name) > MAX_NAME:
            raise fields.error(key, f"a name is longer than {MAX_NAME} characters")
        if any(not c.isprintable() for c in name):
            raise fields.error(key, f"{name[:40]!r} holds a control character")
    return tuple(dict.fromkeys(names))


def _read_scalars(fields: Fields, attrs: dict[str, Any]) -> None:
    description = fields.string("description")
    if description is not None:
        attrs["description"] = description
    voting = fields.optional_boolean("voting")
    if voting is not None:
        attrs["voting"] = voting
    for key in ("timeout", "post-timeout", "attempts"):
        value = fields.integer(key, minimum=1)
        if value is not None:
            attrs[key] = value
    zone = fields.string("zone")
    if zone is not None:
        if not ZONE_PATTERN.fullmatch(zone):
            raise fields.error(
                "zone", f"{zone!r} is not a zone name (letters, digits, '.', '_', '-'; 63 at most)"
            )
        attrs["zone"] = zone


def _items(fields: Fields, key: str) -> list[tuple[Any, int]]:
    """A scalar-or-list value as (item, line) pairs."""
    value = fields.raw(key)
    if isinstance(value, list):
        lines = getattr(value, "item_lines", [])
        return [
            (item, lines[i] if i < len(lines) else fields.line(key)) for i, item in enumerate(value)
        ]
    return [(value, fields.line(key))]


def _entry_name(
    fields: Fields, key: str, item: Any, line: int, extra: frozenset[str]
) -> tuple[str, MarkedDict | None]:
    if isinstance(item, str):
        name, body = item, None
    elif isinstance(item, MarkedDict):
        body = item
        sub = Fields(item, fields.where, fields.subject, extra | {"name"}, prefix=f"{key}.")
        sub.check_keys()
        name = sub.required_string("name")
    else:
        raise fields.error_at(line, f"{key}: expected a string or a mapping, got {type_name(item)}")
    if not name.strip():
        raise fields.error_at(line, f"{key}: a name must not be empty")
    return name, body


def _playbooks(fields: Fields, key: str, source: SourceContext) -> tuple[Playbook, ...]:
    result = []
    for item, line in _items(fields, key):
        path, _ = _entry_name(fields, key, item, line, frozenset())
        problem = repo_path_problem(path)
        if problem:
            raise fields.error_at(line, f"{key}: path {path!r} {problem}")
        result.append(Playbook(path, source.project, source.branch, source.trusted))
    return tuple(result)


def _required_projects(fields: Fields) -> tuple[RequiredProject, ...]:
    result: dict[str, RequiredProject] = {}
    for item, line in _items(fields, "required-projects"):
        name, body = _entry_name(
            fields, "required-projects", item, line, frozenset({"override-checkout"})
        )
        checkout = None
        if body is not None:
            checkout = Fields(
                body, fields.where, fields.subject, {"name", "override-checkout"}
            ).string("override-checkout")
        result[name] = RequiredProject(name, checkout)
    return tuple(result.values())


def _dependencies(fields: Fields) -> tuple[Dependency, ...]:
    result: dict[str, Dependency] = {}
    for item, line in _items(fields, "dependencies"):
        name, body = _entry_name(fields, "dependencies", item, line, frozenset({"soft"}))
        soft = False
        if body is not None:
            soft = Fields(
                body, fields.where, fields.subject, {"name", "soft"}, "dependencies."
            ).boolean("soft", False)
        result[name] = Dependency(name, soft)
    return tuple(result.values())


def _semaphores(fields: Fields) -> tuple[str, ...] | None:
    if fields.has("semaphore") and fields.has("semaphores"):
        raise fields.error("semaphore", "use either 'semaphore' or 'semaphores', not both")
    key = "semaphores" if fields.has("semaphores") else "semaphore"
    if not fields.has(key):
        return None
    names: list[str] = []
    for item, line in _items(fields, key):
        name, _ = _entry_name(fields, key, item, line, frozenset({"resources-first"}))
        if name not in names:
            names.append(name)
    return tuple(names)


def _job_secrets(fields: Fields) -> tuple[JobSecret, ...]:
    """``secrets:``: names, or ``{name, secret, pass-to-parent}`` (Zuul's forms)."""
    result: dict[str, JobSecret] = {}
    for item, line in _items(fields, "secrets"):
        extra = frozenset({"secret", "pass-to-parent"})
        name, body = _entry_name(fields, "secrets", item, line, extra)
        secret, pass_to_parent = name, False
        if body is not None:
            sub = Fields(body, fields.where, fields.subject, extra | {"name"}, prefix="secrets.")
            secret = sub.string("secret") or name
            pass_to_parent = sub.boolean("pass-to-parent", False)
        if name in result:
            raise fields.error_at(line, f"secrets: {name!r} is given twice")
        if name in ("zuul", "sluice"):
            raise fields.error_at(line, f"secrets: {name!r} is a reserved name")
        result[name] = JobSecret(name, secret, pass_to_parent)
    return tuple(result.values())
