"""Reporters are hooks: a failing one is logged and the others still run. The log reporter."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import Engine

from scheduler.model.results import Result
from scheduler.reporting import (
    BuildEnd,
    BuildsetEnd,
    BuildsetStart,
    BuildStart,
    LogReporter,
    Reporter,
    ReporterSet,
    SqlReporter,
    create_database_engine,
    list_builds,
    list_buildsets,
)
from tests.reporting.factories import at, build, buildset


class Exploding:
    """A reporter whose every call fails (a code-review system that is down)."""

    name = "exploding"

    def record_buildset_start(self, record: BuildsetStart) -> None:
        raise ConnectionError("review system unreachable")

    def record_build_start(self, record: BuildStart) -> None:
        raise ConnectionError("review system unreachable")

    def record_build_end(self, record: BuildEnd) -> None:
        raise ConnectionError("review system unreachable")

    def record_buildset_end(self, record: BuildsetEnd) -> None:
        raise ConnectionError("review system unreachable")


def test_reporters_satisfy_the_protocol(sqlite_url: str) -> None:
    engine = create_database_engine(sqlite_url)
    try:
        for reporter in (SqlReporter(engine), LogReporter(), Exploding()):
            assert isinstance(reporter, Reporter)
    finally:
        engine.dispose()


def test_a_failing_reporter_does_not_stop_the_others(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    reporters = ReporterSet([Exploding(), SqlReporter(engine), LogReporter()])
    bs, b = buildset(), build()
    with caplog.at_level(logging.INFO, logger="sluice.reporting"):
        assert reporters.record_buildset_start(BuildsetStart(bs, at(0))) == ("exploding",)
        assert reporters.record_build_start(BuildStart(bs, b, at(1))) == ("exploding",)
        assert reporters.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(2))) == (
            "exploding",
        )
        assert reporters.record_buildset_end(BuildsetEnd(bs, Result.SUCCESS)) == ("exploding",)
    assert [r["result"] for r in list_builds(engine)] == ["SUCCESS"]
    assert [r["result"] for r in list_buildsets(engine)] == ["SUCCESS"]
    failures = [r for r in caplog.records if r.name == "sluice.reporting"]
    assert len(failures) == 4
    assert all(r.levelno == logging.ERROR and r.exc_info for r in failures)
    assert "reporter exploding failed on build end b-1" in failures[2].getMessage()
    assert "tenant=acme pipeline=check buildset=bs-1" in failures[2].getMessage()
    logged = [r.getMessage() for r in caplog.records if r.name == "sluice.reporting.log"]
    assert len(logged) == 4  # the log reporter after the failing one still ran


def test_all_reporters_succeeding_report_no_failure() -> None:
    assert ReporterSet([LogReporter()]).record_buildset_start(BuildsetStart(buildset())) == ()
    assert ReporterSet([]).record_buildset_start(BuildsetStart(buildset())) == ()


def test_the_log_reporter_writes_structured_lines(caplog: pytest.LogCaptureFixture) -> None:
    reporter, bs = LogReporter(), buildset()
    b = build(voting=False)
    with caplog.at_level(logging.INFO, logger="sluice.reporting.log"):
        reporter.record_buildset_start(BuildsetStart(bs, at(0)))
        reporter.record_build_start(BuildStart(bs, b, at(1), executor="ex-1"))
        reporter.record_build_end(
            BuildEnd(bs, b, Result.FAILURE, end_time=at(2), error_detail="exit 1 in tox")
        )
        reporter.record_buildset_end(BuildsetEnd(bs, Result.SUCCESS, "Build succeeded."))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines[0] == (
        "INFO",
        "buildset started tenant=acme pipeline=check project=org/app branch=main "
        "ref=refs/heads/topic buildset=bs-1 event_id=event-bs-1",
    )
    assert lines[1][1].endswith("build=b-1 job=unit attempt=1 voting=False executor=ex-1")
    assert lines[2][0] == "WARNING"
    assert lines[2][1].endswith("result=FAILURE error='exit 1 in tox'")
    assert lines[3] == ("INFO", lines[0][1].replace("started", "ended") + " result=SUCCESS")
    fields = caplog.records[2].sluice  # type: ignore[attr-defined]
    assert fields["build"] == "b-1"
    assert fields["tenant"] == "acme"
    assert fields["result"] == "FAILURE"
