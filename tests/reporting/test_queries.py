"""The data of ``sluice builds --json`` and ``sluice buildsets --json``, and duration estimates."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine

from scheduler.model.results import Result
from scheduler.reporting import (
    BuildEnd,
    BuildsetEnd,
    BuildsetStart,
    BuildStart,
    ReportingError,
    SqlReporter,
    estimate_duration,
    estimate_durations,
    job_durations,
    list_builds,
    list_buildsets,
)
from scheduler.reporting.queries import build_artifacts, build_times
from scheduler.reporting.records import Artifact
from tests.reporting.factories import at, build, buildset

# The CLI contract of issue 7: these keys at least, with these JSON types.
BUILD_KEYS: dict[str, type | tuple[type, ...]] = {
    "uuid": str,
    "job": str,
    "project": str,
    "branch": str,
    "ref": str,
    "pipeline": str,
    "result": (str, type(None)),
    "voting": bool,
    "buildset": str,
    "start_time": (str, type(None)),
    "end_time": (str, type(None)),
    "attempt": int,
}
BUILDSET_KEYS: dict[str, type | tuple[type, ...]] = {
    "uuid": str,
    "pipeline": str,
    "project": str,
    "ref": str,
    "result": (str, type(None)),
    "message": str,
}


def run(
    engine: Engine,
    bs_uuid: str,
    jobs: dict[str, Result],
    *,
    start: float = 0,
    **where: str,
) -> None:
    """Report a whole buildset: each job runs 10 s, the buildset ends after them."""
    reporter, bs = SqlReporter(engine), buildset(bs_uuid, **where)
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(start)))
    for index, (job, result) in enumerate(jobs.items()):
        b = build(f"{bs_uuid}-{job}", job, voting=not job.startswith("nv-"))
        began = at(start + index)
        reporter.record_build_start(BuildStart(bs, b, start_time=began))
        reporter.record_build_end(BuildEnd(bs, b, result, end_time=at(start + index + 10)))
    failed = any(r is not Result.SUCCESS for j, r in jobs.items() if not j.startswith("nv-"))
    overall = Result.FAILURE if failed else Result.SUCCESS
    message = "Build failed." if failed else "Build succeeded."
    reporter.record_buildset_end(BuildsetEnd(bs, overall, message, at(start + 20)))


@pytest.fixture
def history(engine: Engine) -> Engine:
    run(engine, "bs-1", {"unit": Result.SUCCESS, "nv-lint": Result.FAILURE})
    run(engine, "bs-2", {"unit": Result.FAILURE}, start=100, pipeline="gate")
    run(engine, "bs-3", {"unit": Result.SUCCESS}, start=200, project="org/web")
    run(engine, "bs-4", {"unit": Result.SUCCESS}, start=300, tenant="other")
    return engine


def test_builds_have_the_contract_keys_and_json_types(history: Engine) -> None:
    builds = json.loads(json.dumps(list_builds(history)))
    assert len(builds) == 5
    for row in builds:
        for key, kind in BUILD_KEYS.items():
            assert isinstance(row[key], kind), (key, row)
    newest = builds[0]
    assert newest == {
        **newest,
        "uuid": "bs-4-unit",
        "job": "unit",
        "tenant": "other",
        "project": "org/app",
        "branch": "main",
        "ref": "refs/heads/topic",
        "pipeline": "check",
        "result": "SUCCESS",
        "voting": True,
        "buildset": "bs-4",
        "start_time": "2026-11-22T12:05:00Z",
        "end_time": "2026-11-22T12:05:10Z",
        "duration": 10.0,
        "attempt": 1,
        "final": True,
    }


def test_buildsets_have_the_contract_keys_and_json_types(history: Engine) -> None:
    buildsets = json.loads(json.dumps(list_buildsets(history)))
    assert [b["uuid"] for b in buildsets] == ["bs-4", "bs-3", "bs-2", "bs-1"]
    for row in buildsets:
        for key, kind in BUILDSET_KEYS.items():
            assert isinstance(row[key], kind), (key, row)
    assert buildsets[2] == {
        **buildsets[2],
        "pipeline": "gate",
        "project": "org/app",
        "ref": "refs/heads/topic",
        "result": "FAILURE",
        "message": "Build failed.",
        "start_time": "2026-11-22T12:01:40Z",
        "end_time": "2026-11-22T12:02:00Z",
    }


BUILD_FILTERS: list[tuple[dict[str, Any], list[str]]] = [
    ({"tenant": "acme"}, ["bs-3-unit", "bs-2-unit", "bs-1-nv-lint", "bs-1-unit"]),
    ({"tenant": "acme", "project": "org/web"}, ["bs-3-unit"]),
    ({"pipeline": "gate"}, ["bs-2-unit"]),
    ({"result": "FAILURE"}, ["bs-2-unit", "bs-1-nv-lint"]),
    ({"result": Result.FAILURE, "voting": False}, ["bs-1-nv-lint"]),
    ({"buildset": "bs-1", "job": "unit"}, ["bs-1-unit"]),
    ({"tenant": "nobody"}, []),
    ({"tenant": "acme", "limit": 2, "offset": 1}, ["bs-2-unit", "bs-1-nv-lint"]),
]

BUILDSET_FILTERS: list[tuple[dict[str, Any], list[str]]] = [
    ({"tenant": "acme"}, ["bs-3", "bs-2", "bs-1"]),
    ({"project": "org/web"}, ["bs-3"]),
    ({"pipeline": "gate", "tenant": "acme"}, ["bs-2"]),
    ({"result": "SUCCESS", "limit": 2}, ["bs-4", "bs-3"]),
    ({"uuid": "bs-1"}, ["bs-1"]),
]


def test_filters(history: Engine) -> None:
    # One history for every case: a database per case would be slow.
    for filters, expected in BUILD_FILTERS:
        assert [b["uuid"] for b in list_builds(history, **filters)] == expected, filters
    for filters, expected in BUILDSET_FILTERS:
        assert [b["uuid"] for b in list_buildsets(history, **filters)] == expected, filters


def test_build_times_are_finished_builds_latest_end_first(history: Engine) -> None:
    reporter, bs = SqlReporter(history), buildset("bs-5")
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(400)))
    retried = build("bs-5-unit", "unit")
    reporter.record_build_start(BuildStart(bs, retried, start_time=at(400)))
    reporter.record_build_end(BuildEnd(bs, retried, Result.RETRY, end_time=at(405)))
    again = build("bs-5-unit", "unit", attempt=2)
    reporter.record_build_start(BuildStart(bs, again, start_time=at(410)))  # still running

    def uuids(**filters: Any) -> list[str]:
        return [b["uuid"] for b in build_times(history, tenant="acme", **filters)]

    assert uuids() == ["bs-5-unit", "bs-3-unit", "bs-2-unit", "bs-1-nv-lint", "bs-1-unit"]
    assert uuids(final=False) == ["bs-5-unit"]
    assert uuids(final=True, result="SUCCESS") == ["bs-3-unit", "bs-1-unit"]
    assert uuids(exclude_result="SUCCESS", final=True) == ["bs-2-unit", "bs-1-nv-lint"]
    assert uuids(ended_after=at(110), ended_before=at(300)) == ["bs-3-unit", "bs-2-unit"]
    assert uuids(pipeline="gate", job="unit") == ["bs-2-unit"]
    assert uuids(project="org/web", branch="main", ref="refs/heads/topic") == ["bs-3-unit"]
    assert uuids(limit=2, offset=1) == ["bs-3-unit", "bs-2-unit"]
    (first,) = build_times(history, tenant="acme", limit=1)
    assert (first["attempt"], first["result"], first["duration"]) == (1, "RETRY", 5.0)
    assert first["final"] is False
    with pytest.raises(ReportingError, match="BOGUS"):
        build_times(history, tenant="acme", exclude_result="BOGUS")


def test_an_unknown_result_filter_is_refused(history: Engine) -> None:
    with pytest.raises(ReportingError, match="unknown result 'BOGUS'; one of SUCCESS, FAILURE"):
        list_builds(history, result="BOGUS")
    with pytest.raises(ReportingError, match="BOGUS"):
        list_buildsets(history, result="BOGUS")


def test_durations_of_the_last_successes_newest_first(engine: Engine) -> None:
    reporter, bs = SqlReporter(engine), buildset()
    timings = [(0, 30), (100, 160), (200, 290), (300, 305)]
    for number, (began, ended) in enumerate(timings):
        b = build(f"b-{number}", "unit")
        result = Result.FAILURE if number == 3 else Result.SUCCESS
        reporter.record_build_start(BuildStart(bs, b, start_time=at(began)))
        reporter.record_build_end(BuildEnd(bs, b, result, end_time=at(ended)))
    reporter.record_build_start(BuildStart(bs, build("b-running", "unit"), start_time=at(400)))
    assert job_durations(engine, tenant="acme", job="unit") == [90.0, 60.0, 30.0]
    assert job_durations(engine, tenant="acme", job="unit", limit=2) == [90.0, 60.0]
    assert job_durations(engine, tenant="acme", job="unit", project="org/web") == []
    assert estimate_duration(engine, tenant="acme", job="unit", branch="main") == 60.0
    assert estimate_duration(engine, tenant="acme", job="docs") is None


def test_estimates_for_many_jobs_in_one_query(engine: Engine) -> None:
    reporter, bs = SqlReporter(engine), buildset()
    runs = {"unit": [20, 40, 60], "lint": [5], "docs": []}
    for job, durations in runs.items():
        for number, seconds in enumerate(durations):
            b = build(f"{job}-{number}", job)
            began = 100 * number
            reporter.record_build_start(BuildStart(bs, b, start_time=at(began)))
            reporter.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(began + seconds)))
    failed = build("lint-failed", "lint")
    reporter.record_build_end(
        BuildEnd(bs, failed, Result.FAILURE, start_time=at(0), end_time=at(500))
    )
    jobs = ["unit", "lint", "docs"]
    assert estimate_durations(engine, tenant="acme", jobs=jobs) == {"unit": 40.0, "lint": 5.0}
    assert estimate_durations(engine, tenant="acme", jobs=jobs, samples=2) == {
        "unit": 50.0,
        "lint": 5.0,
    }
    assert estimate_durations(engine, tenant="acme", jobs=[]) == {}
    assert estimate_durations(engine, tenant="acme", jobs=jobs, branch="stable") == {}


def test_a_builds_artifacts_by_name_in_zuuls_shape(engine: Engine) -> None:
    reporter, bs = SqlReporter(engine), buildset("bs-a")
    b = build("bs-a-image", "build-image")
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
    reporter.record_build_start(BuildStart(bs, b, start_time=at(1)))
    image = {"type": "container_image"}
    shipped = (
        Artifact("image", "https://r.example/app:1", image),
        Artifact("docs", "https://logs.example/docs/"),
    )
    reporter.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(5), artifacts=shipped))
    assert build_artifacts(engine, "acme", "bs-a-image") == [
        {"name": "docs", "url": "https://logs.example/docs/", "metadata": {}},
        {"name": "image", "url": "https://r.example/app:1", "metadata": image},
    ]
    assert build_artifacts(engine, "other", "bs-a-image") == []  # another tenant's
