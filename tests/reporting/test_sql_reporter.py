"""The SQL reporter: one row per buildset and per build attempt, whatever the redeliveries."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime

import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from scheduler.model.results import Result
from scheduler.reporting import (
    Artifact,
    BuildEnd,
    BuildEvent,
    BuildInfo,
    BuildsetEnd,
    BuildsetStart,
    BuildStart,
    RefInfo,
    ReportingError,
    SqlReporter,
    list_builds,
    list_buildsets,
    prune_history,
    record_build_event,
)
from scheduler.reporting.models import (
    ArtifactRow,
    BuildEventRow,
    BuildRow,
    BuildsetRefRow,
    BuildsetRow,
    RefRow,
)
from tests.reporting.factories import at, build, buildset


def count(engine: Engine, model: type[object]) -> int:
    with Session(engine) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def build_row(engine: Engine, uuid: str, attempt: int = 1) -> BuildRow:
    with Session(engine) as session:
        row = session.scalars(
            select(BuildRow).where(BuildRow.uuid == uuid, BuildRow.attempt == attempt)
        ).one()
        session.expunge(row)
        return row


def test_a_build_reported_twice_is_one_row(engine: Engine) -> None:
    reporter = SqlReporter(engine)
    bs, b = buildset(), build()
    for _ in range(2):  # a redelivered task reports everything again
        reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
        reporter.record_build_start(BuildStart(bs, b, start_time=at(1), executor="ex-1"))
        reporter.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(61)))
        reporter.record_buildset_end(BuildsetEnd(bs, Result.SUCCESS, "Build succeeded.", at(62)))
    assert count(engine, BuildsetRow) == 1
    assert count(engine, BuildRow) == 1
    row = build_row(engine, "b-1")
    assert (row.result, row.start_time, row.end_time) == (Result.SUCCESS, at(1), at(61))
    assert row.executor == "ex-1"
    assert row.nodeset == "ubuntu"


def test_a_second_attempt_is_a_second_row(engine: Engine) -> None:
    reporter = SqlReporter(engine)
    bs = buildset()
    first, second = build(attempt=1), build(attempt=2)
    reporter.record_build_start(BuildStart(bs, first, start_time=at(0)))
    reporter.record_build_end(
        BuildEnd(bs, first, Result.RETRY, end_time=at(5), error_detail="node lost")
    )
    reporter.record_build_start(BuildStart(bs, second, start_time=at(6)))
    reporter.record_build_end(BuildEnd(bs, second, Result.SUCCESS, end_time=at(16)))
    reporter.record_build_end(BuildEnd(bs, second, Result.SUCCESS, end_time=at(16)))
    assert count(engine, BuildRow) == 2
    rows = list_builds(engine, uuid="b-1")
    assert [(r["attempt"], r["result"], r["final"]) for r in rows] == [
        (2, "SUCCESS", True),
        (1, "RETRY", False),
    ]
    assert rows[1]["error_detail"] == "node lost"


def test_an_end_without_a_start_makes_a_complete_row(engine: Engine) -> None:
    SqlReporter(engine).record_build_end(
        BuildEnd(buildset(), build(), Result.FAILURE, end_time=at(9), start_time=at(2))
    )
    [row] = list_builds(engine)
    assert (row["result"], row["start_time"], row["duration"]) == (
        "FAILURE",
        "2026-11-22T12:00:02Z",
        7.0,
    )
    [buildset_row] = list_buildsets(engine)
    assert buildset_row["uuid"] == "bs-1"
    assert buildset_row["result"] is None  # still running, as far as SQL knows


def test_a_late_start_never_erases_a_result(engine: Engine) -> None:
    reporter = SqlReporter(engine)
    bs, b = buildset(), build()
    reporter.record_build_start(BuildStart(bs, b, start_time=at(1)))
    reporter.record_build_end(BuildEnd(bs, b, Result.TIMED_OUT, end_time=at(30)))
    reporter.record_build_start(BuildStart(bs, b, start_time=at(3), executor="late"))
    row = build_row(engine, "b-1")
    assert (row.result, row.start_time, row.end_time) == (Result.TIMED_OUT, at(1), at(30))
    reporter.record_buildset_end(BuildsetEnd(bs, Result.FAILURE, "timed out", at(31)))
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
    [buildset_row] = list_buildsets(engine)
    assert (buildset_row["result"], buildset_row["message"]) == ("FAILURE", "timed out")


def test_a_skipped_build_has_no_start(engine: Engine) -> None:
    SqlReporter(engine).record_build_end(
        BuildEnd(buildset(), build(job="deploy"), Result.SKIPPED, end_time=at(5))
    )
    [row] = list_builds(engine, job="deploy")
    assert (row["result"], row["start_time"], row["duration"]) == ("SKIPPED", None, None)


def test_artifacts_and_events_are_recorded_once(engine: Engine) -> None:
    bs, b = buildset(), build()
    paused = BuildEvent("paused", at(3), "waiting for children")
    record_build_event(engine, bs, b, paused)
    end = BuildEnd(
        bs,
        b,
        Result.SUCCESS,
        end_time=at(9),
        log_url="https://logs.example/b-1/",
        artifacts=(Artifact("docs", "https://logs.example/b-1/docs", {"type": "docs_site"}),),
        events=(paused, BuildEvent("resumed", at(6))),
        result_data={"coverage": 93.5},
    )
    for _ in range(2):
        SqlReporter(engine).record_build_end(end)
    assert count(engine, ArtifactRow) == 1
    assert count(engine, BuildEventRow) == 2
    row = build_row(engine, "b-1")
    assert row.log_url == "https://logs.example/b-1/"
    assert row.result_data == {"coverage": 93.5}
    with Session(engine) as session:
        artifact = session.scalars(select(ArtifactRow)).one()
        assert (artifact.name, artifact.meta) == ("docs", {"type": "docs_site"})
        events = session.execute(
            select(BuildEventRow.event_type, BuildEventRow.event_time).order_by(
                BuildEventRow.event_time
            )
        ).all()
    assert [tuple(e) for e in events] == [("paused", at(3)), ("resumed", at(6))]


def test_refs_are_linked_once(engine: Engine) -> None:
    other = RefInfo("org/lib", "main", "refs/heads/fix", change="refs/heads/fix", newrev="b" * 40)
    bs = replace(buildset(), refs=(other,))
    reporter = SqlReporter(engine)
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
    reporter.record_buildset_end(BuildsetEnd(bs, Result.SUCCESS, end_time=at(5)))
    reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
    assert count(engine, RefRow) == 2
    assert count(engine, BuildsetRefRow) == 2


def test_a_build_on_another_ref_keeps_its_own(engine: Engine) -> None:
    lib = RefInfo("org/lib", "stable", "refs/heads/stable", newrev="c" * 40)
    b = BuildInfo("b-lib", "lib-unit", ref=lib)
    SqlReporter(engine).record_build_start(BuildStart(buildset(), b, start_time=at(0)))
    [row] = list_builds(engine)
    assert (row["project"], row["branch"], row["newrev"]) == ("org/lib", "stable", "c" * 40)
    assert list_builds(engine, project="org/app") == []


def test_times_keep_their_instant_whatever_the_zone(engine: Engine) -> None:
    local = datetime.fromisoformat("2026-11-22T14:00:01+02:00")
    SqlReporter(engine).record_build_start(BuildStart(buildset(), build(), start_time=local))
    assert build_row(engine, "b-1").start_time == at(1)
    assert list_builds(engine)[0]["start_time"] == "2026-11-22T12:00:01Z"


def test_naive_times_and_bad_attempts_are_refused() -> None:
    with pytest.raises(ReportingError, match="timezone-aware"):
        BuildStart(buildset(), build(), start_time=datetime(2026, 1, 1))
    with pytest.raises(ReportingError, match="attempt"):
        build(attempt=0)


def test_prune_history_deletes_old_buildsets_with_their_builds(engine: Engine) -> None:
    reporter = SqlReporter(engine)
    for uuid, ref in (("old", "refs/heads/old"), ("new", "refs/heads/new")):
        bs = buildset(uuid, ref=ref)
        reporter.record_buildset_start(BuildsetStart(bs, start_time=at(0)))
        end = BuildEnd(
            bs,
            build(f"{uuid}-b"),
            Result.SUCCESS,
            end_time=at(5),
            artifacts=(Artifact("log", "https://logs.example/"),),
            events=(BuildEvent("paused", at(1)),),
        )
        reporter.record_build_end(end)
    with engine.begin() as connection:
        connection.execute(
            update(BuildsetRow).where(BuildsetRow.uuid == "old").values(updated=at(-86400))
        )
    assert prune_history(engine, older_than=at(0)) == 1
    assert [b["uuid"] for b in list_buildsets(engine)] == ["new"]
    assert [b["uuid"] for b in list_builds(engine)] == ["new-b"]
    assert (count(engine, ArtifactRow), count(engine, BuildEventRow)) == (1, 1)
    assert count(engine, RefRow) == 1
    assert prune_history(engine, older_than=at(0)) == 0


def test_concurrent_reports_of_one_build_make_one_row(engine: Engine) -> None:
    """A task and its redelivered copy racing: still one buildset row, one row per attempt."""
    reporter, bs = SqlReporter(engine), buildset()
    barrier = threading.Barrier(6)

    def report(attempt: int) -> None:
        b = build(attempt=attempt)
        barrier.wait(10)
        reporter.record_build_start(BuildStart(bs, b, start_time=at(attempt)))
        reporter.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(9)))

    with ThreadPoolExecutor(6) as pool:
        for future in [pool.submit(report, 1 + n % 2) for n in range(6)]:
            future.result()
    assert count(engine, BuildsetRow) == 1
    assert sorted(r["attempt"] for r in list_builds(engine)) == [1, 2]
