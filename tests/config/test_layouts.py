"""Valid configurations against the frozen jobs they must produce."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.config import FrozenJob
from scheduler.config.graph import freeze_job_graph
from tests.config.builders import BASE, build, dedent, with_base


@dataclass(frozen=True)
class Case:
    id: str
    config: str  # added to the config project after BASE
    app: Mapping[str, Mapping[str, str]]  # branch -> path -> text
    branch: str
    pipeline: str
    files: Sequence[str] | None
    # job name -> the frozen attributes to check (see summary())
    expected: Mapping[str, Mapping[str, Any]]
    dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def summary(job: FrozenJob) -> dict[str, Any]:
    return {
        "parent": job.parent,
        "timeout": job.timeout,
        "post-timeout": job.post_timeout,
        "attempts": job.attempts,
        "voting": job.voting,
        "vars": dict(job.vars),
        "pre-run": [f"{p.project}:{p.path}" for p in job.pre_run],
        "run": [f"{p.project}:{p.path}" for p in job.run],
        "post-run": [f"{p.project}:{p.path}" for p in job.post_run],
        "semaphores": [(s.name, s.max) for s in job.semaphores],
        "required-projects": [p.name for p in job.required_projects],
        "nodeset": job.nodeset,
        "tags": list(job.tags),
        "variants": len(job.variants),
        "run-branch": [p.branch for p in job.run],
    }


CASES = [
    Case(
        id="inheritance-chain",
        config="""
        - job:
            name: tox
            parent: base
            abstract: true
            pre-run: playbooks/tox/pre.yaml
            post-run: playbooks/tox/post.yaml
            run: playbooks/tox/run.yaml
            vars: {tox: {env: py3, sitepackages: false}}
            timeout: 3600
        """,
        app={
            "main": {
                ".zuul.yaml": """
                - job:
                    name: unit
                    parent: tox
                    run: playbooks/unit.yaml
                    vars: {tox: {env: py311}}
                - project:
                    check:
                      jobs: [unit]
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={
            "unit": {
                "parent": "tox",
                "timeout": 3600,
                "attempts": 3,
                "vars": {"tox": {"env": "py311", "sitepackages": False}},
                "pre-run": ["config:playbooks/base/pre.yaml", "config:playbooks/tox/pre.yaml"],
                "run": ["app:playbooks/unit.yaml"],
                "post-run": ["config:playbooks/tox/post.yaml", "config:playbooks/base/post.yaml"],
                "variants": 4,
            }
        },
    ),
    Case(
        id="variants-in-order-with-branch-matcher",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job:
                    name: unit
                    run: playbooks/unit.yaml
                    vars: {level: 1}
                - job:
                    name: unit
                    branches: ^stable/.*
                    timeout: 600
                    vars: {level: 2}
                - project:
                    check: {jobs: [unit]}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"unit": {"timeout": 1800, "vars": {"level": 1}, "variants": 3}},
    ),
    Case(
        id="variant-for-matching-branch-applies-after",
        config="",
        app={
            "stable/1.0": {
                ".zuul.yaml": """
                - job:
                    name: unit
                    branches: .*
                    run: playbooks/unit.yaml
                    vars: {level: 1}
                - job:
                    name: unit
                    branches: ^stable/.*
                    timeout: 600
                    vars: {level: 2}
                - project:
                    check: {jobs: [unit]}
                """
            }
        },
        branch="stable/1.0",
        pipeline="check",
        files=None,
        expected={"unit": {"timeout": 600, "vars": {"level": 2}, "variants": 4}},
    ),
    Case(
        id="implied-branch-matchers-with-two-branches",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: unit, run: playbooks/new.yaml}
                - project: {check: {jobs: [unit]}}
                """
            },
            "stable": {
                ".zuul.yaml": """
                - job: {name: unit, run: playbooks/old.yaml, attempts: 1}
                - project: {check: {jobs: [unit]}}
                """
            },
        },
        branch="stable",
        pipeline="check",
        files=None,
        expected={
            "unit": {"run": ["app:playbooks/old.yaml"], "run-branch": ["stable"], "attempts": 1}
        },
    ),
    Case(
        id="files-matcher-runs-on-match",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: docs, files: ['^docs/.*']}
                - job: {name: unit, irrelevant-files: ['^docs/.*', '.*\\.md$']}
                - project: {check: {jobs: [docs, unit]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=["docs/index.rst", "README.md"],
        expected={"docs": {"variants": 3}},
    ),
    Case(
        id="irrelevant-files-let-code-changes-through",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: docs, files: ['^docs/.*']}
                - job: {name: unit, irrelevant-files: ['^docs/.*']}
                - project: {check: {jobs: [docs, unit]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=["src/app.py", "docs/x.rst"],
        expected={"docs": {}, "unit": {}},
    ),
    Case(
        id="dependencies-hard-and-soft-dropped",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: build}
                - job: {name: docs, files: ['^docs/']}
                - job:
                    name: test
                    dependencies: [build, {name: docs, soft: true}]
                - project: {gate: {jobs: [build, docs, test]}}
                """
            }
        },
        branch="main",
        pipeline="gate",
        files=["src/x.py"],
        expected={"build": {}, "test": {}},
        dependencies={"build": (), "test": ("build",)},
    ),
    Case(
        id="semaphores-defined-implicit-and-inherited",
        config="""
        - semaphore: {name: cloud, max: 3}
        - job: {name: deploy-base, semaphore: cloud, abstract: true}
        """,
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: deploy, parent: deploy-base, semaphores: [lab, cloud]}
                - project: {check: {jobs: [deploy]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"deploy": {"semaphores": [("cloud", 3), ("lab", 1)]}},
    ),
    Case(
        id="project-pipeline-variant-overrides-and-branch-filter",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: unit, vars: {a: 1}, voting: true}
                - job: {name: slow}
                - project:
                    check:
                      jobs:
                        - unit: {voting: false, vars: {b: 2}, timeout: 99}
                        - slow: {branches: ^stable/}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"unit": {"voting": False, "vars": {"a": 1, "b": 2}, "timeout": 99}},
    ),
    Case(
        id="templates-then-own-jobs",
        config="""
        - project-template:
            name: python
            check: {jobs: [pep8, {unit: {tags: [t]}}]}
        - job: {name: pep8}
        - job: {name: unit}
        """,
        app={
            "main": {
                ".zuul.yaml": """
                - project:
                    templates: [python]
                    check: {jobs: [{unit: {tags: [own]}}]}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"pep8": {}, "unit": {"tags": ["t", "own"], "variants": 4}},
    ),
    Case(
        id="required-projects-union-nodeset-recorded",
        config="""
        - nodeset: {name: small, nodes: [{name: n, label: debian}]}
        - job: {name: integ-base, required-projects: [lib], nodeset: small}
        """,
        app={
            "main": {
                ".zuul.yaml": """
                - job:
                    name: integ
                    parent: integ-base
                    required-projects: [{name: config, override-checkout: main}, lib]
                - project: {check: {jobs: [integ]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"integ": {"required-projects": ["lib", "config"], "nodeset": "small"}},
    ),
    Case(
        id="sluice-yaml-adds-a-later-variant",
        config="",
        app={
            "main": {
                "zuul.yaml": """
                - job: {name: unit, timeout: 100, run: playbooks/zuul.yaml}
                - project: {check: {jobs: [unit]}}
                """,
                ".zuul.yaml": "- job: {name: ignored-because-zuul-yaml-exists}\n",
                ".sluice.yaml": "- job: {name: unit, timeout: 200}\n",
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"unit": {"timeout": 200, "run": ["app:playbooks/zuul.yaml"], "variants": 4}},
    ),
    Case(
        id="config-project-stanza-and-own-stanza-combine",
        config="""
        - job: {name: central, post-timeout: 60}
        - project:
            name: app
            check: {jobs: [central]}
        """,
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: unit}
                - project: {check: {jobs: [unit]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"central": {"post-timeout": 60}, "unit": {}},
    ),
    Case(
        id="job-without-matching-variant-does-not-run",
        config="",
        app={
            "main": {
                ".zuul.yaml": """
                - job: {name: stable-only, branches: ^stable/}
                - job: {name: unit}
                - project: {check: {jobs: [stable-only, unit]}}
                """
            }
        },
        branch="main",
        pipeline="check",
        files=None,
        expected={"unit": {}},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_frozen_jobs(case: Case) -> None:
    result = with_base(case.config, app=case.app)
    assert [str(e) for e in result.errors] == []
    graph = freeze_job_graph(result.layout, "app", case.branch, case.pipeline, case.files)
    assert graph.names == tuple(case.expected)
    for name, expected in case.expected.items():
        job = graph.job(name)
        assert job is not None
        got = summary(job)
        assert {k: got[k] for k in expected} == dict(expected), name
    if case.dependencies:
        assert dict(graph.dependencies) == dict(case.dependencies)


def test_base_job_defaults() -> None:
    result = with_base(app={"main": {".zuul.yaml": "- project: {check: {jobs: [base]}}\n"}})
    job = freeze_job_graph(result.layout, "app", "main", "check").jobs[0]
    assert (job.attempts, job.voting, job.timeout, job.parent) == (3, True, 1800, None)


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


def test_pipeline_objects() -> None:
    extra = """
    - pipeline:
        name: post
        manager: supercedent
        precedence: low
        supercedes: [check]
        trigger:
          timer:
            - time: '0 0 * * *'
        success:
          sql: {}
    - pipeline:
        name: merge
        manager: dependent
        window: 10
        window-floor: 2
        window-increase-type: exponential
        window-decrease-factor: 3
        require:
          github: {open: true, label: ready}
        reject:
          gitlab: {merged: true}
        failure:
          github: {comment: true}
    """
    result = with_base(extra)
    assert result.errors == ()
    post = result.layout.pipelines["post"]
    assert (post.manager, post.precedence, post.supercedes) == ("supercedent", "low", ("check",))
    assert post.trigger == {"timer": ({"time": "0 0 * * *"},)}
    merge = result.layout.pipelines["merge"]
    assert merge.window is not None
    assert (merge.window.window, merge.window.floor, merge.window.increase_type) == (
        10,
        2,
        "exponential",
    )
    assert merge.window.decrease_factor == 3 and merge.window.decrease_type == "exponential"
    assert merge.require == {"github": {"open": True, "label": "ready"}}
    assert result.layout.pipelines["check"].dequeue_on_new_patchset is True


def test_queue_lookup() -> None:
    extra = "- queue: {name: integrated, per-branch: true}\n"
    app = {
        "main": {
            "zuul.yaml": "- job: {name: x}\n- project: {queue: integrated, gate: {jobs: [x]}}\n"
        }
    }
    result = with_base(extra, app=app)
    assert result.errors == ()
    assert result.layout.queue_for("app", "main", "gate") == ("integrated", True)
    assert result.layout.queue_for("lib", "main", "gate") is None


def test_ignored_zuul_files_are_warnings() -> None:
    app = {"main": {"zuul.yaml": "- job: {name: a}\n", ".zuul.d/x.yaml": "- job: {name: b}\n"}}
    result = with_base(app=app)
    assert result.errors == ()
    assert [w.describe() for w in result.warnings] == [
        "app@main: .zuul.d/x.yaml: ignored: another Zuul configuration file or directory "
        "takes precedence"
    ]
    assert "b" not in result.layout.jobs


def test_final_and_protected_allow_what_they_should() -> None:
    config = """
    - job: {name: sealed, final: true, timeout: 10}
    - job: {name: guarded, protected: true, abstract: true}
    - job: {name: guarded-child, parent: guarded}
    - project:
        name: app
        check:
          jobs:
            - sealed: {voting: false}
            - guarded-child
    """
    result = with_base(config, app={"main": {}})
    assert result.errors == ()
    graph = freeze_job_graph(result.layout, "app", "main", "check")
    sealed = graph.job("sealed")
    assert sealed is not None and (sealed.voting, sealed.timeout) == (False, 10)
    assert graph.names == ("sealed", "guarded-child")


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


def test_noop_is_built_in() -> None:
    """Zuul's noop job needs no definition and no parent, in every tenant."""
    app = {"main": {".zuul.yaml": "- project: {check: {jobs: [noop]}}\n"}}
    result = with_base(app=app)
    assert [str(e) for e in result.errors] == []
    (job,) = freeze_job_graph(result.layout, "app", "main", "check").jobs
    assert (job.name, job.parent, job.run, job.pre_run) == ("noop", None, (), ())


def test_noop_may_not_be_defined() -> None:
    app = {"main": {".zuul.yaml": "- job: {name: noop, run: x.sh}\n"}}
    result = with_base(app=app)
    assert [e.message for e in result.errors] == ["is built in and may not be defined"]
    assert result.errors[0].line == 1 and result.errors[0].project == "app"


def test_zone_and_merge_mode() -> None:
    app = {
        "main": {
            ".zuul.yaml": "- job: {name: east, zone: east-1, run: x.sh}\n"
            "- job: {name: child, parent: east, run: y.sh}\n"
            "- project: {merge-mode: rebase, check: {jobs: [east, child, {other: {}}]}}\n"
            "- job: {name: other, run: z.sh}\n"
        }
    }
    result = with_base(app=app)
    assert [str(e) for e in result.errors] == []
    graph = freeze_job_graph(result.layout, "app", "main", "check")
    assert {j.name: j.zone for j in graph.jobs} == {
        "east": "east-1",
        "child": "east-1",
        "other": "",
    }
    assert result.layout.merge_mode("app", "main") == "rebase"
    assert result.layout.merge_mode("config", "master") == "merge"


def test_a_bad_zone_is_refused_with_its_line() -> None:
    result = with_base(app={"main": {".zuul.yaml": "- job:\n    name: x\n    zone: 'a b'\n"}})
    (error,) = result.errors
    assert error.line == 3 and "is not a zone name" in error.message
