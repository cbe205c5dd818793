"""Parsing of ``project:`` and ``project-template:`` stanzas.

Keys other than the fixed ones name pipelines; whether those pipelines
exist is checked when the layout is assembled, since pipelines may be
defined in another project.
"""

from __future__ import annotations

from scheduler.config.jobs import parse_job_entry
from scheduler.config.model import JobVariant, ProjectConfig, ProjectPipeline, SourceContext
from scheduler.config.schema import Fields, Where, check_name, type_name
from scheduler.config.yamlload import MarkedDict, MarkedList

PROJECT_KEYS = frozenset(
    {"name", "description", "templates", "queue", "vars", "default-branch", "merge-mode"}
)
TEMPLATE_KEYS = frozenset({"name", "description", "queue"})
PIPELINE_ENTRY_KEYS = frozenset({"jobs", "queue", "fail-fast", "debug"})
MERGE_MODES = ("merge", "merge-resolve", "cherry-pick", "squash-merge", "rebase")


def parse_project(
    data: MarkedDict, where: Where, source: SourceContext, template: bool
) -> ProjectConfig:
    kind = "project-template" if template else "project"
    name = data.get("name")
    if name is None and not template:
        name = source.project
    subject = f"{kind} {name!r}" if isinstance(name, str) else kind
    fixed = TEMPLATE_KEYS if template else PROJECT_KEYS
    fields = Fields(data, where, subject, fixed | {k for k in data if isinstance(k, str)})
    fields.check_keys()
    if template:
        name = fields.name()
    elif fields.has("name"):
        name = fields.name()
        if not source.trusted and name != source.project:
            raise fields.error(
                "name", f"untrusted project {source.project!r} may only configure itself"
            )
    assert isinstance(name, str)
    pipelines = tuple(
        _pipeline(fields, key, source) for key in data if isinstance(key, str) and key not in fixed
    )
    vars_ = {}
    if not template and fields.has("vars"):
        if not isinstance(fields.raw("vars"), MarkedDict):
            raise fields.error("vars", f"expected a mapping, got {type_name(fields.raw('vars'))}")
        vars_ = fields.json("vars")
    templates = () if template else fields.string_list("templates") or ()
    return ProjectConfig(
        name=name,
        source=source,
        pipelines=pipelines,
        templates=templates,
        queue=fields.string("queue"),
        vars=vars_,
        default_branch=None if template else fields.string("default-branch"),
        merge_mode=None if template else fields.choice("merge-mode", MERGE_MODES, None),
        template=template,
        lines={key: data.line_of(key) for key in data if isinstance(key, str)},
    )


def _pipeline(fields: Fields, key: str, source: SourceContext) -> ProjectPipeline:
    check_name(fields, key, key)
    body = fields.raw(key)
    if body is None:
        body = MarkedDict(fields.line(key))
    if not isinstance(body, MarkedDict):
        raise fields.error(key, f"expected a mapping with 'jobs', got {type_name(body)}")
    sub = Fields(body, fields.where, fields.subject, PIPELINE_ENTRY_KEYS, prefix=f"{key}.")
    sub.check_keys()
    jobs_value = sub.raw("jobs")
    jobs: list[JobVariant] = []
    if jobs_value is not None:
        if not isinstance(jobs_value, MarkedList):
            raise sub.error("jobs", f"expected a list, got {type_name(jobs_value)}")
        subject = f"{fields.subject}: {key}"
        for index, item in enumerate(jobs_value):
            line = jobs_value.line_of(index)
            entry_source = SourceContext(
                source.project, source.branch, source.path, line, source.trusted
            )
            jobs.append(parse_job_entry(item, line, fields.where, subject, entry_source))
    return ProjectPipeline(
        pipeline=key,
        jobs=tuple(jobs),
        line=fields.line(key),
        queue=sub.string("queue"),
        fail_fast=sub.optional_boolean("fail-fast"),
    )
