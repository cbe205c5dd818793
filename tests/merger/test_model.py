"""Jobs and results as JSON: round trips, tolerance of other versions, bad input; request params."""

from __future__ import annotations

import json

import pytest

from scheduler.wire.merger import (
    LOST,
    BranchHeadsJob,
    BranchHeadsResult,
    ChangeResult,
    ConfigFiles,
    ConfigJob,
    ConfigResult,
    Failure,
    FilesChangesJob,
    InvalidRecordError,
    MergeChange,
    MergeJob,
    MergeMode,
    MergeResult,
    MergerJob,
    ProjectRef,
    ProjectState,
    Status,
    decode_result,
    job_kind,
    read_job,
    read_params,
    request_params,
    result_data,
)


def test_round_trip_through_json() -> None:
    job = MergeJob(
        "j1",
        (MergeChange("git", "org/a", "main", ref="refs/changes/1", merge_mode=MergeMode.REBASE),),
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
    change = MergeChange.from_dict({"connection": "git", "project": "p", "branch": "main"})
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


def test_request_params_round_trip_for_every_kind() -> None:
    change = MergeChange("git", "org/a", "main", ref="refs/changes/1")
    jobs: list[MergerJob] = [
        MergeJob("m", (change,)),
        FilesChangesJob("f", change),
        ConfigJob("c", "git", "org/a", ("main",)),
        BranchHeadsJob("h", "git", "org/a"),
    ]
    for job in jobs:
        params = json.loads(json.dumps(request_params(job)))
        assert params == {"kind": job_kind(job).value, "job": job.to_dict()}
        assert read_params(params) == (job_kind(job), job.to_dict())
        assert read_job(params) == job


@pytest.mark.parametrize(
    "params",
    [{}, {"kind": "merge"}, {"kind": "merge", "job": []}, {"kind": "rebase", "job": {}}],
)
def test_params_of_the_wrong_shape_are_invalid(params: dict[str, object]) -> None:
    with pytest.raises(InvalidRecordError):
        read_params(params)


def test_result_data_decodes_to_the_kind_it_was_stored_as() -> None:
    heads = BranchHeadsResult("h", Status.OK, ProjectState("git", "org/a", {"main": "a" * 40}))
    data = json.loads(json.dumps(result_data("branch-heads", heads.to_dict())))
    assert data["kind"] == "branch-heads"
    assert decode_result(data) == heads
    assert decode_result(data, kind="branch-heads") == heads
    with pytest.raises(InvalidRecordError):
        decode_result(data, kind="merge")


def test_a_lost_result_is_a_failure_of_the_requested_kind() -> None:
    lost = decode_result({"result": "LOST"}, lost=True, kind="config", job_id="c")
    assert isinstance(lost, ConfigResult) and lost.status is Status.FAILED
    assert lost.failure is not None and lost.failure.kind == LOST and lost.job_id == "c"
    assert isinstance(decode_result({"result": "LOST"}), MergeResult)
