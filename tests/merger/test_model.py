"""Jobs and results as JSON: round trips, tolerance of other versions, bad input."""

from __future__ import annotations

import json

import pytest

from scheduler.wire.merger import (
    Change,
    ChangeResult,
    ConfigFiles,
    Failure,
    InvalidRecordError,
    MergeJob,
    MergeMode,
    MergeResult,
    ProjectRef,
    ProjectState,
    Status,
)


def test_round_trip_through_json() -> None:
    job = MergeJob(
        "j1",
        (Change("git", "org/a", "main", ref="refs/changes/1", merge_mode=MergeMode.REBASE),),
        required=(ProjectRef("git", "org/b"),),
        base_state=(ProjectState("git", "org/a", {"main": "a" * 40}),),
        timestamp=1_700_000_000,
    )
    assert MergeJob.from_dict(json.loads(json.dumps(job.to_dict()))) == job
    result = MergeResult(
        "j1",
        Status.CONFLICT,
        repo_state=(ProjectState("git", "org/a", {"main": "b" * 40}),),
        changes=(ChangeResult(0, "1,1", "git", "org/a", "main", "c" * 40, "d" * 40, "r", ("f",)),),
        config=(ConfigFiles("git", "org/a", "main", "d" * 40, {"zuul.yaml": "- job: {}\n"}),),
        failure=Failure("conflict", "m", "git", "org/a", "refs/changes/2", 1, "2,1", ("f",)),
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["status"] == "conflict" and data["changes"][0]["files"] == ["f"]
    assert MergeResult.from_dict(data) == result


def test_other_versions_are_read() -> None:
    data = {"job_id": "j", "changes": [], "added_later": {"x": 1}}
    assert MergeJob.from_dict(data) == MergeJob("j", ())
    change = Change.from_dict({"connection": "git", "project": "p", "branch": "main"})
    assert change.merge_mode is MergeMode.MERGE


@pytest.mark.parametrize(
    "data",
    [
        {"changes": []},
        {"job_id": 5, "changes": []},
        {"job_id": "j", "changes": [{"connection": "git"}]},
        {
            "job_id": "j",
            "changes": [{"connection": "g", "project": "p", "branch": "b", "merge_mode": "x"}],
        },
        {"job_id": "j", "changes": "nope"},
        {
            "job_id": "j",
            "changes": [],
            "base_state": [{"connection": "g", "project": "p", "branches": 3}],
        },
    ],
)
def test_malformed_input_is_an_invalid_job(data: dict[str, object]) -> None:
    with pytest.raises(InvalidRecordError):
        MergeJob.from_dict(data)
