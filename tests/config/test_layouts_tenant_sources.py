"""What a tenant takes into its layout, and from where.

Shadowed definitions, excluded object types, ignored Zuul files, the
tenant's max-job-timeout and projects outside it, the config project's
load-branch, and the per-project branch options (exclude-branches,
implied-branch-matchers).
"""

from __future__ import annotations

from scheduler.config.graph import freeze_job_graph
from tests.config.builders import BASE, build, dedent, with_base


def test_shadowed_definitions_are_ignored() -> None:
    tenant_text = """
    - tenant:
        name: example
        source:
          git:
            config-projects: [config]
            untrusted-projects:
              - lib
              - app: {shadow: lib}
    """
    result = build(
        {
            "config": {"master": {"zuul.yaml": dedent(BASE)}},
            "lib": {"main": {"zuul.yaml": "- job: {name: lint, timeout: 5}\n"}},
            "app": {
                "main": {
                    "zuul.yaml": "- job: {name: lint, timeout: 9}\n"
                    "- project: {check: {jobs: [lint]}}\n"
                }
            },
        },
        tenant_text,
    )
    assert result.errors == ()
    assert freeze_job_graph(result.layout, "app", "main", "check").jobs[0].timeout == 5


def test_excluded_object_types_are_not_loaded() -> None:
    tenant_text = """
    - tenant:
        name: example
        source:
          git:
            config-projects: [config]
            untrusted-projects:
              - app: {exclude: [project]}
    """
    result = build(
        {
            "config": {"master": {"zuul.yaml": dedent(BASE)}},
            "app": {"main": {"zuul.yaml": "- job: {name: x}\n- project: {check: {jobs: [x]}}\n"}},
        },
        tenant_text,
    )
    assert result.errors == ()
    assert "x" in result.layout.jobs and "app" not in result.layout.projects


def test_ignored_zuul_files_are_warnings() -> None:
    app = {"main": {"zuul.yaml": "- job: {name: a}\n", ".zuul.d/x.yaml": "- job: {name: b}\n"}}
    result = with_base(app=app)
    assert result.errors == ()
    assert [w.describe() for w in result.warnings] == [
        "app@main: .zuul.d/x.yaml: ignored: another Zuul configuration file or directory "
        "takes precedence"
    ]
    assert "b" not in result.layout.jobs


def test_tenant_limits_and_foreign_projects() -> None:
    tenant_text = """
    - tenant:
        name: example
        max-job-timeout: 3600
        source:
          git:
            config-projects: [config]
            untrusted-projects: [app]
    """
    extra = (
        "- job: {name: long, timeout: 3601}\n"
        "- job: {name: short}\n"
        "- project: {name: elsewhere, check: {jobs: [short]}}\n"
        "- project: {name: app, check: {jobs: [short]}}\n"
    )
    result = build({"config": {"master": {"zuul.yaml": dedent(BASE) + extra}}}, tenant_text)
    assert [str(e) for e in result.errors] == [
        "zuul.yaml:16: job 'long': timeout 3601 is over the tenant's max-job-timeout 3600",
        "zuul.yaml:18: project 'elsewhere': project is not in tenant 'example'",
    ]
    assert "long" not in result.layout.jobs and "elsewhere" not in result.layout.projects


def test_config_project_needs_load_branch_for_several_branches() -> None:
    result = build(
        {"config": {"master": {"zuul.yaml": dedent(BASE)}, "main": {"zuul.yaml": dedent(BASE)}}}
    )
    assert [e.describe() for e in result.errors] == [
        "config: a config project is read from one branch; set load-branch (given: main, master)"
    ]


def test_branch_options_of_the_tenant() -> None:
    tenant_text = """
    - tenant:
        name: example
        source:
          git:
            config-projects: [config]
            untrusted-projects:
              - app:
                  exclude-branches: ['^wip/']
                  implied-branch-matchers: false
    """
    app_text = "- job: {name: unit, timeout: %d}\n- project: {check: {jobs: [unit]}}\n"
    result = build(
        {
            "config": {"master": {"zuul.yaml": dedent(BASE)}},
            "app": {
                "main": {".zuul.yaml": app_text % 1},
                "stable": {".zuul.yaml": app_text % 2},
                "wip/x": {".zuul.yaml": "- job: {name: broken, colour: red}\n"},
            },
        },
        tenant_text,
    )
    assert result.errors == ()
    assert result.layout.branches["app"] == ("main", "stable")
    # without implied branch matchers both variants apply everywhere, in branch order
    job = freeze_job_graph(result.layout, "app", "main", "check").jobs[0]
    assert job.timeout == 2
