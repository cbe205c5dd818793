"""The estimate the scheduler sends with each build: from SQL, remembered a minute per job."""

from __future__ import annotations

from sqlalchemy import Engine, event

from scheduler.model.results import Result
from scheduler.reporting import BuildEnd, BuildStart, SqlReporter
from scheduler.reporting.estimates import ESTIMATE_SECONDS, JobEstimates
from tests.reporting.factories import at, build, buildset


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(engine: Engine, uuid: str, job: str, seconds: float) -> None:
    reporter, bs = SqlReporter(engine), buildset(project="org/app")
    b = build(uuid, job)
    reporter.record_build_start(BuildStart(bs, b, start_time=at(0)))
    reporter.record_build_end(BuildEnd(bs, b, Result.SUCCESS, end_time=at(seconds)))


def counted(engine: Engine) -> list[str]:
    """The statements ``engine`` runs from now on."""
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    return statements


def test_a_known_estimate_is_asked_once_a_minute(engine: Engine) -> None:
    finished(engine, "b-1", "unit", 30)
    clock = Clock()
    estimates = JobEstimates(engine, clock=clock)
    asked = counted(engine)

    assert estimates.of("acme", "unit", "org/app") == 30.0
    finished(engine, "b-2", "unit", 90)
    clock.now += ESTIMATE_SECONDS - 1
    assert estimates.of("acme", "unit", "org/app") == 30.0  # remembered
    selects = [s for s in asked if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) == 1
    clock.now += 2
    assert estimates.of("acme", "unit", "org/app") == 60.0  # asked again


def test_a_job_without_history_is_asked_again_at_its_next_build(engine: Engine) -> None:
    estimates = JobEstimates(engine, clock=Clock())
    assert estimates.of("acme", "unit", "org/app") is None
    finished(engine, "b-1", "unit", 12.34)
    assert estimates.of("acme", "unit", "org/app") == 12.3
    assert estimates.of("acme", "unit", "org/other") is None  # per project


def test_a_database_that_cannot_answer_is_left_alone_a_minute(bare_engine: Engine) -> None:
    """No schema: the query fails; the passes that follow do not ask again."""
    clock = Clock()
    estimates = JobEstimates(bare_engine, clock=clock)
    asked = counted(bare_engine)
    assert estimates.of("acme", "unit", "org/app") is None
    tries = len(asked)
    assert tries >= 1
    assert estimates.of("acme", "lint", "org/app") is None
    assert len(asked) == tries
    clock.now += ESTIMATE_SECONDS + 1
    assert estimates.of("acme", "lint", "org/app") is None
    assert len(asked) > tries
