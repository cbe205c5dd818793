"""Secrets in configuration: parsing, binding to playbooks, who may run a job with one.

Zuul's rules (its documentation of ``secret`` and ``job.secrets``): a secret
is bound to the playbooks of the job definition that names it, never to a
child's; ``pass-to-parent`` also gives it to the parents' playbooks; a
secret of an untrusted project makes the job post-review; a job runs only
for its ``allowed-projects``.
"""

from __future__ import annotations

import pytest

from scheduler.config import LayoutResult
from scheduler.config.errors import NotPermittedError
from scheduler.config.freeze import FrozenJob
from scheduler.config.graph import freeze_job_graph
from scheduler.crypto import ENCRYPTED
from tests.config.builders import BASE, build, dedent

GATE = BASE.replace("    manager: dependent\n", "    manager: dependent\n    post-review: true\n")

APP = """
- secret:
    name: creds
    data:
      user: deployer
      password: !encrypted/pkcs1-oaep
        - Y2h1bmsx
        - Y2h1bmsy
- job:
    name: deploy-base
    run: playbooks/deploy-base.sh
- job:
    name: deploy
    parent: deploy-base
    pre-run: playbooks/pre.sh
    run: playbooks/deploy.sh
    secrets:
      - name: site
        secret: creds
- job:
    name: publish
    parent: deploy-base
    secrets:
      - name: creds
        pass-to-parent: true
- job:
    name: child
    parent: deploy
    run: playbooks/child.sh
- project:
    check:
      jobs: [deploy]
    gate:
      jobs: [deploy, publish, child]
"""


def load(app: str = APP, config: str = "") -> LayoutResult:
    result = build(
        {
            "config": {"master": {"zuul.d/00-base.yaml": dedent(GATE), "zuul.d/x.yaml": config}},
            "app": {"main": {".zuul.yaml": dedent(app)}},
        }
    )
    return result


def frozen(result: LayoutResult, job: str, pipeline: str = "gate") -> FrozenJob:
    graph = freeze_job_graph(result.layout, "app", "main", pipeline, None)
    found = graph.job(job)
    assert found is not None, f"{job} is not in the graph"
    return found


def seen(job: FrozenJob, phase: str) -> list[tuple[str, dict[str, str]]]:
    playbooks = {"pre-run": job.pre_run, "run": job.run, "post-run": job.post_run}[phase]
    return [(p.path, dict(p.secrets)) for p in playbooks]


def test_a_secret_is_parsed_with_its_encrypted_values_kept_encrypted() -> None:
    result = load()
    assert [str(e) for e in result.errors] == [], "post-review is decided per item, not at load"
    (secret,) = result.layout.secrets["creds"]
    assert secret.connection == "git" and secret.source.project == "app"
    assert secret.data == {"user": "deployer", "password": {ENCRYPTED: ["Y2h1bmsx", "Y2h1bmsy"]}}


def test_a_secret_is_bound_to_the_playbooks_of_the_definition_that_names_it() -> None:
    job = frozen(load(), "deploy")
    key = "app@main:creds"
    assert seen(job, "pre-run") == [
        ("playbooks/base/pre.yaml", {}),
        ("playbooks/pre.sh", {"site": key}),
    ]
    assert seen(job, "run") == [("playbooks/deploy.sh", {"site": key})]
    assert seen(job, "post-run") == [("playbooks/base/post.yaml", {})]
    assert set(job.secrets) == {key} and job.secrets[key]["name"] == "creds"
    assert job.post_review, "a secret of an untrusted project makes the job post-review"


def test_a_child_job_does_not_see_its_parents_secrets() -> None:
    job = frozen(load(), "child")
    assert seen(job, "run") == [("playbooks/child.sh", {})]
    assert dict(job.pre_run[1].secrets) == {"site": "app@main:creds"}  # the parent's own playbook


def test_pass_to_parent_gives_the_secret_to_the_parents_playbooks() -> None:
    job = frozen(load(), "publish")
    assert seen(job, "run") == [("playbooks/deploy-base.sh", {"creds": "app@main:creds"})]
    assert seen(job, "pre-run") == [("playbooks/base/pre.yaml", {"creds": "app@main:creds"})]


def test_a_post_review_job_does_not_run_in_a_pre_review_pipeline() -> None:
    with pytest.raises(NotPermittedError, match="pre-review pipeline 'check' does not allow"):
        frozen(load(), "deploy", "check")


def test_a_config_project_secret_may_be_used_in_check() -> None:
    config = """
    - secret:
        name: token
        data: {value: !encrypted/pkcs1-oaep abc}
    - job:
        name: trusted-deploy
        run: playbooks/deploy.sh
        secrets: [token]
    - project:
        name: app
        check:
          jobs: [trusted-deploy]
    """
    result = load(app="", config=dedent(config))
    assert not result.errors, [str(e) for e in result.errors]
    job = frozen(result, "trusted-deploy", "check")
    assert not job.post_review
    assert seen(job, "run") == [("playbooks/deploy.sh", {"token": "config@master:token"})]


def test_allowed_projects_narrow_with_each_variant() -> None:
    config = """
    - job:
        name: restricted
        run: playbooks/r.sh
        allowed-projects: [app, lib]
    - job:
        name: restricted
        allowed-projects: [lib]
    - project:
        name: app
        gate:
          jobs: [restricted]
    """
    result = load(app="", config=dedent(config))
    assert not result.errors, "allowed-projects is decided per item, not at load"
    with pytest.raises(NotPermittedError, match="not allowed to run job 'restricted'"):
        frozen(result, "restricted")


def test_the_frozen_form_keeps_secrets_through_json() -> None:
    job = frozen(load(), "deploy")
    assert FrozenJob.from_dict(job.to_dict()) == job
