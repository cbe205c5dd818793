"""BuildSpec and BuildResult: JSON round trips and validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook, RequiredProject
from scheduler.wire.build_result import StepOutcome, StepRun
from scheduler.wire.build_spec import request_params
from workers.executor import (
    BuildContext,
    BuildResult,
    BuildSpec,
    BuildSpecError,
    Phase,
    Result,
)

COMMIT = "a" * 40

JOB = FrozenJob(
    name="j",
    project="org/p",
    branch="main",
    pipeline="gate",
    timeout=60,
    pre_run=(Playbook("ci/pre", "org/config", "main", True),),
    run=(Playbook("ci/run", "org/p", "main", False, (("site", "org/p@main:creds"),)),),
    vars={"x": [1, {"y": None}], "unicode": "café"},
    required_projects=(RequiredProject("org/lib", "stable"),),
    secrets={"org/p@main:creds": {"connection": "git", "project": "org/p", "data": {"a": 1}}},
)


def context_dict(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "tenant": "t",
        "build_uuid": "0123abcd",
        "ref": "refs/heads/main",
        "repo_state": {"org/p": {"main": COMMIT}, "org/lib": {"stable": "b" * 64}},
        "sources": {"org/p": "/cache/org/p", "org/lib": "https://git.example/org/lib"},
        "base_state": {"org/config": {"main": "c" * 40}},
        "parent_data": {"p": True},
        "merge_request": "m-1",
        "connections": {"org/p": "git", "org/lib": "git"},
    }
    data.update(changes)
    return data


def params(**changes: Any) -> dict[str, Any]:
    return {"schema": 3, "job": JOB.to_dict(), "context": context_dict(**changes)}


def test_spec_round_trips_through_json() -> None:
    spec = BuildSpec.from_dict(params())
    assert spec.job == JOB
    assert spec.context.parent_data == {"p": True}

    again = BuildSpec.from_json(json.dumps(spec.to_dict()))

    assert again == spec
    assert again.to_dict() == params()


def test_the_job_travels_in_its_own_plain_form_as_it_is() -> None:
    plain = JOB.to_dict()
    context = BuildContext.from_dict(context_dict())

    written = request_params(plain, context)

    assert written["job"] == plain
    assert BuildSpec.from_dict(json.loads(json.dumps(written))).job == JOB


def test_empty_optional_context_fields_are_left_out() -> None:
    context = BuildContext("t", "u1", {"org/p": {"main": COMMIT}}, {"org/p": "/x"})
    assert context.to_dict() == {
        "tenant": "t",
        "build_uuid": "u1",
        "ref": "",
        "repo_state": {"org/p": {"main": COMMIT}},
        "sources": {"org/p": "/x"},
    }
    assert BuildContext.from_dict(context.to_dict()) == context


def test_spec_ignores_unknown_keys_of_a_newer_writer() -> None:
    newer = params(future_field=1)
    newer["future"] = True
    newer["job"] = {**newer["job"], "future-attribute": 1}
    assert BuildSpec.from_dict(newer) == BuildSpec.from_dict(params())


def test_a_flat_spec_of_an_older_scheduler_is_refused_saying_so() -> None:
    flat = {"schema": 1, "tenant": "t", "job": "j", "run": ["ci/run"], "build_uuid": "u"}
    with pytest.raises(BuildSpecError, match=r"schema 1 \(a flat spec, written by"):
        BuildSpec.from_dict(flat)


def test_params_the_scheduler_could_not_make_are_refused_with_its_reason() -> None:
    with pytest.raises(BuildSpecError, match="could not make it: sources: no source for org/lib"):
        BuildSpec.from_dict({"invalid": "sources: no source for org/lib"})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tenant": 5}, "tenant: expected a string, got int"),
        ({"tenant": ""}, "tenant must not be empty"),
        ({"hold": "yes"}, "hold: expected true/false"),
        ({"parent_data": []}, "parent_data: expected an object"),
        ({"repo_state": None}, "repo_state: expected an object {project: {branch: commit}}"),
        ({"repo_state": {"org/p": ["main"]}}, "repo_state.org/p: expected {branch: commit}"),
        ({"repo_state": {"org/p": {"main": "HEAD"}}}, "'HEAD' is not a commit id"),
        ({"repo_state": {"org/p": {"main": "0" * 40}}}, "is not a commit id"),
        ({"base_state": {"org/config": {"main": "x"}}}, "base_state.org/config.main: 'x'"),
        ({"sources": {"org/p": "/cache/org/p"}}, "sources: no source for org/lib"),
        ({"connections": {"org/p": 1}}, "connections: expected an object of strings"),
        ({"build_uuid": "../x"}, "build_uuid '../x' is not a safe name"),
        ({"nodes": [{"name": "n"}]}, "nodes: expected a list of {name, id, label, host"),
        (
            {"repo_state": {"../p": {"m": COMMIT}}, "sources": {"../p": "/x"}},
            "project name '../p' is not a safe relative path",
        ),
    ],
)
def test_context_validation_names_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BuildSpecError, match=r"^build spec: ") as info:
        BuildSpec.from_dict(params(**changes))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected an object, got list"),
        ({**params(), "schema": 4}, "unsupported schema 4"),
        ({"job": JOB.to_dict(), "context": context_dict()}, "unsupported schema None"),
        ({**params(), "job": "j"}, "job: expected an object, got str"),
        ({**params(), "job": {**JOB.to_dict(), "schema": 2}}, "job: unsupported schema 2"),
        ({**params(), "job": {"name": "j"}}, "job: not a frozen job"),
        ({**params(), "job": {**JOB.to_dict(), "project": ""}}, "project must be a non-empty"),
        ({**params(), "context": "c"}, "context: expected an object, got str"),
    ],
)
def test_spec_validation_names_what_is_wrong(data: Any, message: str) -> None:
    with pytest.raises(BuildSpecError, match=r"^build spec: ") as info:
        BuildSpec.from_dict(data)
    assert message in str(info.value)


def test_spec_from_invalid_json() -> None:
    with pytest.raises(BuildSpecError, match="invalid JSON"):
        BuildSpec.from_json("{")


def test_result_round_trips_through_json() -> None:
    result = BuildResult(
        build_uuid="u",
        result=Result.POST_FAILURE,
        message="post-run x failed",
        started_at=1.5,
        ended_at=3.0,
        steps=(StepRun(Phase.RUN, "ci/run", StepOutcome.OK, 0, 1.6, 0.5, project="org/p"),),
        result_data={"a": [1]},
        log_path="/logs/u/job-output.txt",
        log_tail=("line",),
    )

    data = json.loads(json.dumps(result.to_dict()))

    assert data["result"] == "POST_FAILURE"
    assert data["steps"][0]["phase"] == "run"
    assert BuildResult.from_dict(data) == result
