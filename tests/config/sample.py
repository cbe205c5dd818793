"""A rich, fixed configuration for determinism tests (run as a script too)."""

from __future__ import annotations

import sys

from scheduler.config import LayoutResult, UnparsedBranch, build_layout
from scheduler.config.graph import freeze_job_graph
from scheduler.config.serialize import canonical_json
from tests.config.builders import BASE, dedent, tenant

EXTRA = """
- semaphore: {name: db, max: 2}
- queue: {name: integrated, per-branch: true}
- nodeset: {name: small, nodes: [{name: n1, label: debian}]}
- job:
    name: tox
    abstract: true
    pre-run: playbooks/tox/pre.yaml
    vars: {tox: {env: py3, opts: [a, b]}, unicode: "caf\\u00e9 \\U0001F600"}
    nodeset: small
- project-template:
    name: python
    check: {jobs: [pep8]}
- job: {name: pep8, parent: tox}
"""

APP_MAIN = """
- job:
    name: unit
    parent: tox
    semaphores: [db, lab]
    required-projects: [lib]
    files: ['^src/.*']
- job:
    name: docs
    irrelevant-files: ['^src/.*']
- job:
    name: integ
    dependencies: [unit, {name: docs, soft: true}]
- project:
    queue: integrated
    templates: [python]
    check: {jobs: [unit, docs, integ]}
    gate: {jobs: [unit, {integ: {voting: false}}]}
- job: {name: broken, timeout: soon}
"""

APP_STABLE = """
- job: {name: unit, parent: tox, vars: {stable: true}}
- project:
    check: {jobs: [unit]}
"""


def branches() -> list[UnparsedBranch]:
    return [
        UnparsedBranch(
            "config",
            "master",
            {"zuul.d/00-base.yaml": dedent(BASE), "zuul.d/10-extra.yaml": dedent(EXTRA)},
        ),
        UnparsedBranch("app", "main", {".zuul.yaml": dedent(APP_MAIN), "README.md": "# app"}),
        UnparsedBranch("app", "stable/1", {".zuul.yaml": dedent(APP_STABLE)}),
        UnparsedBranch("lib", "main", {}),
    ]


def sample(reverse: bool = False) -> LayoutResult:
    given = branches()
    if reverse:
        given = [
            UnparsedBranch(b.project, b.branch, dict(reversed(list(b.files.items()))))
            for b in reversed(given)
        ]
    return build_layout(tenant(), given)


def render(result: LayoutResult) -> str:
    """Everything a scheduler would store: layout, errors, frozen graphs."""
    parts = [result.layout.to_json(), result.layout.content_hash()]
    parts += [e.describe() for e in result.errors]
    for branch in ("main", "stable/1"):
        for pipeline in ("check", "gate"):
            graph = freeze_job_graph(result.layout, "app", branch, pipeline, ["src/a.py"])
            parts.append(canonical_json(graph))
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render(sample(reverse="--reverse" in sys.argv)))
