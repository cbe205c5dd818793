"""Invalid configurations, each against its exact error message.

``config`` goes to the config project's ``zuul.d/extra.yaml`` (next to the
usual pipelines and base job in ``zuul.d/00-base.yaml``); ``app`` to the
untrusted project's ``.zuul.yaml``. Lines count from 1 in each file.
"""

from __future__ import annotations

import time

import pytest

from scheduler.config import LayoutResult
from scheduler.config.graph import freeze_job_graph
from tests.config.builders import BASE, build, dedent


def load(config: str = "", app: str = "") -> LayoutResult:
    return build(
        {
            "config": {
                "master": {"zuul.d/00-base.yaml": dedent(BASE), "zuul.d/extra.yaml": dedent(config)}
            },
            "app": {"main": {".zuul.yaml": dedent(app)}},
        }
    )


def messages(result: LayoutResult) -> list[str]:
    return [str(e) for e in result.errors]


# (id, config text, app text, expected messages)
INVALID = [
    (
        "yaml-syntax",
        "",
        "- job:\n    name: [unterminated\n",
        [
            ".zuul.yaml:3: invalid YAML: while parsing a flow sequence, "
            "expected ',' or ']', but got '<stream end>'"
        ],
    ),
    (
        "duplicate-key",
        "",
        "- job:\n    name: a\n    name: b\n",
        [".zuul.yaml:3: duplicate key 'name' (first at line 2)"],
    ),
    (
        "unknown-key",
        "",
        "- job:\n    name: a\n    colour: red\n",
        [".zuul.yaml:3: job 'a': colour: unknown key"],
    ),
    (
        "wrong-type-int",
        "",
        "- job:\n    name: a\n    timeout: ten\n",
        [".zuul.yaml:3: job 'a': timeout: expected an integer, got string"],
    ),
    (
        "wrong-type-bool",
        "",
        "- job:\n    name: a\n    voting: 'no'\n",
        [".zuul.yaml:3: job 'a': voting: expected true/false, got string"],
    ),
    (
        "attempts-zero",
        "",
        "- job:\n    name: a\n    attempts: 0\n",
        [".zuul.yaml:3: job 'a': attempts: must be at least 1, got 0"],
    ),
    (
        "zuul-only-key",
        "",
        "- job:\n    name: a\n    roles: [{zuul: x}]\n",
        [".zuul.yaml:3: job 'a': roles: is not supported by Sluice yet"],
    ),
    (
        "unknown-object-type",
        "",
        "- jbo:\n    name: a\n",
        [
            ".zuul.yaml:1: unknown object type 'jbo' (known: pipeline, job, project, "
            "project-template, semaphore, queue, nodeset, secret)"
        ],
    ),
    (
        "pragma-not-supported",
        "",
        "- pragma:\n    implied-branches: [main]\n",
        [".zuul.yaml:1: pragma: this object type is not supported by Sluice yet"],
    ),
    (
        "secret-without-data",
        "",
        "- secret:\n    name: s\n",
        [".zuul.yaml:2: secret 's': data: expected a mapping, got null"],
    ),
    (
        "secret-oidc",
        "",
        "- secret:\n    name: s\n    oidc: {}\n",
        [".zuul.yaml:3: secret 's': oidc: token (OIDC) secrets are not supported by Sluice yet"],
    ),
    (
        "encrypted-bad-value",
        "",
        "- secret:\n    name: s\n    data:\n      a: !encrypted/pkcs1-oaep {x: 1}\n",
        [".zuul.yaml:4: !encrypted/pkcs1-oaep: expected a base64 string or a list of them"],
    ),
    (
        "encrypted-outside-a-secret",
        "",
        "- job:\n    name: a\n    vars:\n      a: !encrypted/pkcs1-oaep abc\n",
        [
            ".zuul.yaml:3: job 'a': vars: !encrypted/pkcs1-oaep values are only allowed "
            "in a secret's data"
        ],
    ),
    (
        "secret-not-defined",
        "",
        "- job:\n    name: a\n    secrets: [nope]\n",
        [".zuul.yaml:3: job 'a': secret 'nope' is not defined"],
    ),
    (
        "secret-of-another-project",
        "- secret:\n    name: s\n    data: {a: 1}\n",
        "- job:\n    name: a\n    secrets: [s]\n",
        [
            ".zuul.yaml:3: job 'a': secret 's' is defined in project 'config'; "
            "a secret may only be used by jobs defined in the same project"
        ],
    ),
    (
        "secret-given-twice",
        "",
        "- job:\n    name: a\n    secrets: [s, {name: s, secret: t}]\n",
        [".zuul.yaml:3: job 'a': secrets: 's' is given twice"],
    ),
    (
        "secret-in-a-project-entry",
        "",
        "- project:\n    check:\n      jobs:\n        - base: {secrets: [s]}\n",
        [
            ".zuul.yaml:4: project 'app': check: job 'base': secrets: "
            "may only be set in a job definition"
        ],
    ),
    (
        "allowed-project-unknown",
        "",
        "- job:\n    name: a\n    allowed-projects: [nope]\n",
        [".zuul.yaml:3: job 'a': allowed project 'nope' is not in tenant 'example'"],
    ),
    (
        "top-level-mapping",
        "",
        "job:\n  name: a\n",
        [".zuul.yaml:1: expected a list of configuration objects, got mapping"],
    ),
    (
        "two-keys-in-one-item",
        "",
        "- job: {name: a}\n  project: {}\n",
        [".zuul.yaml:1: expected a mapping with one key, the object type (e.g. '- job:')"],
    ),
    (
        "job-without-name",
        "",
        "- job:\n    run: x.yaml\n",
        [".zuul.yaml:2: job: 'name' is required"],
    ),
    (
        "pipeline-in-untrusted-project",
        "",
        "- pipeline:\n    name: mine\n    manager: independent\n",
        [".zuul.yaml:1: pipeline 'mine': pipelines may only be defined in config projects"],
    ),
    (
        "base-job-in-untrusted-project",
        "",
        "- job:\n    name: mybase\n    parent: null\n",
        [
            ".zuul.yaml:3: job 'mybase': parent: base jobs (parent: null) may only be defined "
            "in config projects"
        ],
    ),
    (
        "untrusted-project-configures-another",
        "",
        "- project:\n    name: lib\n    check: {jobs: [base]}\n",
        [".zuul.yaml:2: project 'lib': name: untrusted project 'app' may only configure itself"],
    ),
    (
        "job-not-defined",
        "",
        "- project:\n    check:\n      jobs:\n        - base\n        - unit\n",
        [".zuul.yaml:5: project 'app': job 'unit' is not defined"],
    ),
    (
        "pipeline-not-defined",
        "",
        "- project:\n    chek:\n      jobs: [base]\n",
        [".zuul.yaml:2: project 'app': pipeline 'chek' is not defined"],
    ),
    (
        "template-not-defined",
        "",
        "- project:\n    templates: [python]\n",
        [".zuul.yaml:2: project 'app': project-template 'python' is not defined"],
    ),
    (
        "parent-not-defined",
        "",
        "- job:\n    name: unit\n    parent: tox\n",
        [".zuul.yaml:3: job 'unit': parent job 'tox' is not defined"],
    ),
    (
        "inheritance-cycle",
        "",
        "- job: {name: a, parent: b}\n- job: {name: b, parent: c}\n- job: {name: c, parent: a}\n",
        [
            ".zuul.yaml:1: job 'a': inheritance cycle: a -> b -> c -> a",
            ".zuul.yaml:2: job 'b': inheritance cycle: b -> c -> a -> b",
            ".zuul.yaml:3: job 'c': inheritance cycle: c -> a -> b -> c",
        ],
    ),
    (
        "grandparent-not-defined",
        "",
        "- job: {name: a, parent: b}\n- job: {name: b, parent: c}\n",
        [
            ".zuul.yaml:2: job 'b': parent job 'c' is not defined",
            ".zuul.yaml:1: job 'a': parent job 'b' is not defined",
        ],
    ),
    (
        "dependency-not-defined",
        "",
        "- job:\n    name: a\n    dependencies: [build]\n",
        [".zuul.yaml:3: job 'a': dependency 'build' is not defined"],
    ),
    (
        "dependency-cycle",
        "",
        "- job: {name: a, dependencies: [b]}\n- job: {name: b, dependencies: [a]}\n"
        "- project:\n    check:\n      jobs: [a, b]\n",
        [".zuul.yaml:4: project 'app': check: dependency cycle: a -> b -> a"],
    ),
    (
        "hard-dependency-not-in-pipeline",
        "",
        "- job: {name: build}\n- job: {name: test, dependencies: [build]}\n"
        "- project:\n    check:\n      jobs: [test]\n",
        [
            ".zuul.yaml:4: project 'app': check: job 'test' depends on 'build', which does "
            "not run for this item"
        ],
    ),
    (
        "run-path-traversal",
        "",
        "- job:\n    name: a\n    run: ../../etc/passwd\n",
        [
            ".zuul.yaml:3: job 'a': run: path '../../etc/passwd' must not contain '.', '..' "
            "or empty segments"
        ],
    ),
    (
        "absolute-pre-run-path",
        "",
        "- job:\n    name: a\n    pre-run:\n      - ok.yaml\n      - /etc/shadow\n",
        [
            ".zuul.yaml:5: job 'a': pre-run: path '/etc/shadow' must be relative to the "
            "repository root"
        ],
    ),
    (
        "files-matcher-traversal",
        "",
        "- job:\n    name: a\n    files: ['^../secrets/.*']\n",
        [
            ".zuul.yaml:3: job 'a': files: regex '^../secrets/.*' may not match paths outside "
            "the repository"
        ],
    ),
    (
        "catastrophic-regex",
        "",
        "- job:\n    name: a\n    irrelevant-files: ['(a+)+$']\n",
        [
            ".zuul.yaml:3: job 'a': irrelevant-files: regex '(a+)+$' refused: "
            "a repetition inside a repetition is not allowed"
        ],
    ),
    (
        "branch-regex-back-reference",
        "",
        "- job:\n    name: a\n    branches: '(x)\\1'\n",
        [
            ".zuul.yaml:3: job 'a': branches: regex '(x)\\\\1' refused: back-references are "
            "not allowed"
        ],
    ),
    (
        "invalid-regex",
        "",
        "- job:\n    name: a\n    branches: 'stable/[0-9'\n",
        [
            ".zuul.yaml:3: job 'a': branches: regex 'stable/[0-9' refused: invalid regular "
            "expression: unterminated character set at position 7"
        ],
    ),
    (
        "vars-not-a-mapping",
        "",
        "- job:\n    name: a\n    vars: [1, 2]\n",
        [".zuul.yaml:3: job 'a': vars: expected a mapping, got list"],
    ),
    (
        "vars-infinite-number",
        "",
        "- job:\n    name: a\n    vars: {x: .inf}\n",
        [".zuul.yaml:3: job 'a': vars: numbers must be finite"],
    ),
    (
        "vars-binary-value",
        "",
        "- job:\n    name: a\n    vars: {x: !!binary aGVsbG8=}\n",
        [".zuul.yaml:3: job 'a': vars: values of type bytes are not allowed"],
    ),
    (
        "nodeset-not-defined",
        "",
        "- job:\n    name: a\n    nodeset: huge\n",
        [".zuul.yaml:3: job 'a': nodeset 'huge' is not defined"],
    ),
    (
        "required-project-not-in-tenant",
        "",
        "- job:\n    name: a\n    required-projects: [elsewhere]\n",
        [".zuul.yaml:3: job 'a': required project 'elsewhere' is not in tenant 'example'"],
    ),
    (
        "variant-changes-parent",
        "- job: {name: other}\n",
        "- job: {name: a}\n- job: {name: a, parent: other}\n",
        [
            ".zuul.yaml:2: job 'a': a variant may not change the parent (first definition: "
            ".zuul.yaml:1)"
        ],
    ),
    (
        "inherit-from-final",
        "- job: {name: sealed, final: true}\n",
        "- job: {name: a, parent: sealed}\n",
        [".zuul.yaml:1: job 'a': may not inherit from final job 'sealed'"],
    ),
    (
        "inherit-from-foreign-protected",
        "- job: {name: deploy, protected: true}\n",
        "- job: {name: a, parent: deploy}\n",
        [".zuul.yaml:1: job 'a': may not inherit from protected job 'deploy' of project 'config'"],
    ),
    (
        "final-job-changed-by-project",
        "- job: {name: sealed, final: true}\n",
        "- project:\n    check:\n      jobs:\n        - sealed: {timeout: 5}\n",
        [
            ".zuul.yaml:4: project 'app': check: job 'sealed' is final; this variant may not "
            "change 'timeout'"
        ],
    ),
    (
        "abstract-job-run-directly",
        "- job: {name: tox, abstract: true}\n",
        "- project:\n    check:\n      jobs: [tox]\n",
        [".zuul.yaml:3: project 'app': check: job 'tox' is abstract and may not be run directly"],
    ),
    (
        "job-defined-in-two-projects",
        "- job: {name: lint}\n",
        "- job: {name: lint}\n",
        [
            ".zuul.yaml:1: job 'lint': is already defined in project 'config' (variants must "
            "be in one project)"
        ],
    ),
    (
        "pipeline-defined-twice",
        "- pipeline: {name: check, manager: dependent}\n",
        "",
        [
            "zuul.d/extra.yaml:1: pipeline 'check': is already defined (config@master "
            "zuul.d/00-base.yaml:1)"
        ],
    ),
    (
        "bad-manager",
        "- pipeline: {name: p, manager: parallel}\n",
        "",
        [
            "zuul.d/extra.yaml:1: pipeline 'p': manager: 'parallel' is not one of: dependent, "
            "independent, serial, supercedent"
        ],
    ),
    (
        "window-on-independent",
        "- pipeline:\n    name: p\n    manager: independent\n    window: 5\n",
        "",
        [
            "zuul.d/extra.yaml:4: pipeline 'p': window: window settings apply only to "
            "dependent pipelines"
        ],
    ),
    (
        "batch-on-independent",
        "- pipeline:\n    name: p\n    manager: independent\n    batch: {size: 4}\n",
        "",
        ["zuul.d/extra.yaml:4: pipeline 'p': batch: batches apply only to dependent pipelines"],
    ),
    (
        "failure-verdict-on-independent",
        "- pipeline:\n    name: p\n    manager: independent\n    failure-verdict: true\n",
        "",
        [
            "zuul.d/extra.yaml:4: pipeline 'p': failure-verdict: failure verdicts apply only "
            "to dependent pipelines"
        ],
    ),
    (
        "batch-unknown-key",
        "- queue:\n    name: q\n    batch: {size: 4, wait: 3}\n",
        "",
        ["zuul.d/extra.yaml:3: queue 'q': batch.wait: unknown key"],
    ),
    (
        "trigger-unknown-connection",
        "- pipeline:\n    name: p\n    manager: independent\n    trigger:\n      gerrit: []\n",
        "",
        [
            "zuul.d/extra.yaml:4: pipeline 'p': trigger: 'gerrit' is not a known connection "
            "(known: git, github, gitlab, sql, timer)"
        ],
    ),
    (
        "trigger-unknown-event",
        "- pipeline:\n    name: p\n    manager: independent\n    trigger:\n      git:\n       "
        " - event: patchset-created\n",
        "",
        [
            "zuul.d/extra.yaml:6: pipeline 'p': trigger.git.event: 'patchset-created' is not "
            "one of: ref-updated"
        ],
    ),
    (
        "require-on-git",
        "- pipeline:\n    name: p\n    manager: dependent\n    require:\n      git: {open: true}\n",
        "",
        ["zuul.d/extra.yaml:4: pipeline 'p': require: git connection 'git' has no require filters"],
    ),
    (
        "supercedes-unknown-pipeline",
        "- pipeline: {name: p, manager: independent, supercedes: nightly}\n",
        "",
        ["zuul.d/extra.yaml:1: pipeline 'p': supercedes pipeline 'nightly', which is not defined"],
    ),
    (
        "semaphore-max-not-int",
        "- semaphore: {name: s, max: many}\n",
        "",
        ["zuul.d/extra.yaml:1: semaphore 's': max: expected an integer, got string"],
    ),
    (
        "semaphore-defined-twice",
        "- semaphore: {name: s, max: 2}\n",
        "- semaphore: {name: s, max: 3}\n",
        [".zuul.yaml:1: semaphore 's': is already defined (config@master zuul.d/extra.yaml:1)"],
    ),
    (
        "project-entry-sets-parent",
        "",
        "- project:\n    check:\n      jobs:\n        - base: {parent: other}\n",
        [".zuul.yaml:4: project 'app': check: job 'base': parent: unknown key"],
    ),
    (
        "jobs-not-a-list",
        "",
        "- project:\n    check:\n      jobs: base\n",
        [".zuul.yaml:3: project 'app': check.jobs: expected a list, got string"],
    ),
]


@pytest.mark.parametrize(
    ("config", "app", "expected"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_config(config: str, app: str, expected: list[str]) -> None:
    assert messages(load(config, app)) == expected


def test_there_are_enough_invalid_cases() -> None:
    assert len(INVALID) >= 30


def test_errors_carry_project_and_branch() -> None:
    result = load(app="- project:\n    check:\n      jobs: [unit]\n")
    (error,) = result.errors
    assert (error.project, error.branch, error.path, error.line) == ("app", "main", ".zuul.yaml", 3)
    assert error.describe() == "app@main: .zuul.yaml:3: project 'app': job 'unit' is not defined"


def test_other_objects_survive_a_broken_one() -> None:
    result = load(
        app="- job: {name: ok}\n- job: {name: bad, timeout: x}\n- project: {check: {jobs: [ok]}}\n"
    )
    assert len(result.errors) == 1
    assert freeze_job_graph(result.layout, "app", "main", "check").names == ("ok",)


def test_alias_bomb_in_project_config_is_bounded() -> None:
    lines = [
        "- job:",
        "    name: bomb",
        "    vars:",
        '      a: &a ["x","x","x","x","x","x","x","x","x"]',
    ]
    previous = "a"
    for name in "bcdefghij":
        lines.append(f"      {name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    start = time.perf_counter()
    result = load(app="\n".join(lines) + "\n")
    assert time.perf_counter() - start < 2.0
    assert messages(result) == [
        ".zuul.yaml:9: document expands to more than 100000 nodes (alias bomb?)"
    ]
