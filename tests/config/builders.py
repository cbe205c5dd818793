"""Small builders for configuration tests: connections, a tenant, layouts."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

from scheduler.config import (
    LayoutResult,
    Tenant,
    UnparsedBranch,
    build_layout,
    parse_tenant_config,
)
from scheduler.settings.sections import ConnectionSettings

CONNECTIONS = {
    "git": ConnectionSettings("git", "git", "/srv/git"),
    "github": ConnectionSettings("github", "github"),
    "gitlab": ConnectionSettings("gitlab", "gitlab"),
    "timer": ConnectionSettings("timer", "timer"),
    "sql": ConnectionSettings("sql", "sql"),
}

TENANT = """
- tenant:
    name: example
    source:
      git:
        config-projects:
          - config
        untrusted-projects:
          - app
          - lib
"""

# The config project's usual content: two pipelines and a base job.
BASE = """
- pipeline:
    name: check
    manager: independent
    trigger:
      git:
        - event: ref-updated
- pipeline:
    name: gate
    manager: dependent
- job:
    name: base
    parent: null
    pre-run: playbooks/base/pre.yaml
    post-run: playbooks/base/post.yaml
    timeout: 1800
"""


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def tenant(text: str = TENANT) -> Tenant:
    config = parse_tenant_config(dedent(text), "main.yaml", CONNECTIONS)
    assert not config.errors, [str(e) for e in config.errors]
    return config.tenants[0]


Branches = Mapping[str, Mapping[str, Mapping[str, str]]]


def build(projects: Branches, tenant_text: str = TENANT) -> LayoutResult:
    """``projects``: project -> branch -> path -> text (texts are dedented)."""
    branches = [
        UnparsedBranch(project, branch, {path: dedent(text) for path, text in files.items()})
        for project, by_branch in projects.items()
        for branch, files in by_branch.items()
    ]
    return build_layout(tenant(tenant_text), branches)


def with_base(extra: str = "", **projects: Mapping[str, Mapping[str, str]]) -> LayoutResult:
    """The config project holds BASE plus ``extra``; other projects as given."""
    tree: dict[str, Mapping[str, Mapping[str, str]]] = {
        "config": {"master": {"zuul.yaml": dedent(BASE) + dedent(extra)}}
    }
    tree.update(projects)
    return build(tree)
