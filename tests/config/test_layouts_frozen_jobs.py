"""The table of valid configurations against the frozen jobs they must produce.

Each :class:`Case` adds to the config project (after ``BASE``) and the ``app``
project, freezes the job graph of one branch and pipeline, and checks the
chosen attributes of each job (see :func:`summary`): inheritance, variants and
branch matchers, file matchers, dependencies, semaphores, project-pipeline
variants, templates, required projects and ``.sluice.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.config import FrozenJob
from scheduler.config.graph import freeze_job_graph
from tests.config.builders import with_base


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
