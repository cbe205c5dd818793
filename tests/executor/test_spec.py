"""BuildSpec and BuildResult: JSON round trips and validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.wire.build_result import StepOutcome, StepRun
from scheduler.wire.build_spec import JobStep
from workers.executor import BuildResult, BuildSpec, BuildSpecError, Phase, Result

COMMIT = "a" * 40


def spec_dict(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "tenant": "t",
        "pipeline": "gate",
        "project": "org/p",
        "branch": "main",
        "ref": "refs/heads/main",
        "job": "j",
        "build_uuid": "0123abcd",
        "pre_run": ["ci/pre"],
        "run": ["ci/run", {"path": "run.sh", "project": "org/lib", "branch": "stable"}],
        "post_run": [],
        "timeout": 60,
        "post_timeout": None,
        "vars": {"x": [1, {"y": None}]},
        "parent_data": {"p": True},
        "repo_state": {"org/p": {"main": COMMIT}, "org/lib": {"stable": "b" * 64}},
        "sources": {"org/p": "/cache/org/p", "org/lib": "https://git.example/org/lib"},
        "checkouts": {"org/lib": "stable"},
        "hold": False,
    }
    data.update(changes)
    return data


def test_spec_round_trips_through_json() -> None:
    spec = BuildSpec.from_dict(spec_dict())
    assert spec.timeout == 60.0
    assert spec.run == ("ci/run", JobStep("run.sh", "org/lib", "stable"))
    assert spec.steps("run") == (JobStep("ci/run"), JobStep("run.sh", "org/lib", "stable"))

    again = BuildSpec.from_json(json.dumps(spec.to_dict()))

    assert again == spec
    extra = {"schema": 1, "timeout": 60.0, "secrets": {}, "speculation": {}}
    assert again.to_dict() == {**spec_dict(), **extra}
    assert BuildSpec.from_json(spec.to_json()) == spec


def test_steps_name_the_secrets_they_see_and_the_spec_keeps_them_encrypted() -> None:
    secret = {"connection": "git", "project": "org/p", "name": "creds", "data": {"a": 1}}
    data = spec_dict(
        run=[{"path": "ci/run", "secrets": {"site": "org/p@main:creds"}}],
        secrets={"org/p@main:creds": secret},
    )
    spec = BuildSpec.from_dict(data)
    assert spec.steps("run") == (JobStep("ci/run", secrets=(("site", "org/p@main:creds"),)),)
    assert BuildSpec.from_json(spec.to_json()) == spec
    with pytest.raises(BuildSpecError, match="run ci/run: no secret 'org/p@main:creds'"):
        BuildSpec.from_dict({**data, "secrets": {}})


def test_spec_ignores_unknown_keys_of_a_newer_writer() -> None:
    assert BuildSpec.from_dict(spec_dict(future_field=1)) == BuildSpec.from_dict(spec_dict())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"schema": 2}, "unsupported schema 2"),
        ({"tenant": 5}, "tenant: expected a string, got int"),
        ({"job": ""}, "job must not be empty"),
        ({"run": "ci/run"}, "run: expected a list of paths or {path, project, branch}"),
        ({"run": [5]}, "run: expected a path or {path, project, branch}, got 5"),
        ({"run": [{"project": "x"}]}, "run: expected a path or {path, project, branch}"),
        ({"timeout": "1h"}, "timeout: expected a number of seconds or null"),
        ({"timeout": True}, "timeout: expected a number of seconds or null"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"vars": []}, "vars: expected an object"),
        ({"hold": "yes"}, "hold: expected true/false"),
        ({"repo_state": {"org/lib": {"main": COMMIT}}}, "repo_state has no entry for 'org/p'"),
        ({"repo_state": {"org/p": ["main"]}}, "repo_state.org/p: expected {branch: commit}"),
        ({"repo_state": {"org/p": {"main": "HEAD"}}}, "'HEAD' is not a commit id"),
        ({"repo_state": {"org/p": {"main": "0" * 40}}}, "is not a commit id"),
        ({"sources": {"org/p": "/cache/org/p"}}, "sources: no source for org/lib"),
        ({"build_uuid": "../x"}, "build_uuid '../x' is not a safe name"),
        (
            {"project": "../p", "repo_state": {"../p": {"m": COMMIT}}, "sources": {"../p": "/x"}},
            "project name '../p' is not a safe relative path",
        ),
    ],
)
def test_spec_validation_names_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(BuildSpecError, match=r"^build spec: ") as info:
        BuildSpec.from_dict(spec_dict(**changes))
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
    assert result.duration == 1.5
