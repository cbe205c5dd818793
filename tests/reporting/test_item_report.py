"""A finished item reported at once: the rows the four calls make in turn, written once each.

Every case reports one history twice in one database, under two prefixes:
as the per-event calls (``record_buildset_start``, ``record_build_start``,
``record_build_end``, ``record_buildset_end``) and as one ``record_item``,
after the same earlier records (rows that exist already), and compares every
column of every row but ids and ``updated``, in the order of their ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.engine.interfaces import CacheStats

from scheduler.model.results import Result
from scheduler.reporting import (
    Artifact,
    BuildEnd,
    BuildEvent,
    BuildInfo,
    BuildsetEnd,
    BuildsetStart,
    BuildStart,
    ItemReport,
    RefInfo,
    ReporterSet,
    ReportingError,
    SqlReporter,
    record_build_end,
    record_build_event,
    record_build_start,
    record_buildset_end,
    record_buildset_start,
)
from scheduler.reporting.sql import (
    ARTIFACTS,
    BUILD_EVENTS,
    BUILDS,
    BUILDSET_REFS,
    BUILDSETS,
    REFS,
    record_item,
)
from tests.reporting.factories import at, build, buildset

Earlier = Callable[[Engine, ItemReport], None]


def item_report(prefix: str) -> ItemReport:
    """An item with every kind of build: run, skipped, retried, on another
    ref, started with a log URL it ends without, listed with another voting
    and nodeset at its end; and a ref URL known only at the item's end."""
    lib = RefInfo("org/lib", "main", f"refs/heads/{prefix}lib", newrev="b" * 40)
    started = replace(buildset(f"{prefix}bs", ref=f"refs/heads/{prefix}topic"), refs=(lib,))
    ended = replace(started, ref=replace(started.ref, ref_url="https://review.example/1"))
    lint, docs = build(f"{prefix}lint", "lint"), build(f"{prefix}docs", "docs")
    unit = BuildInfo(f"{prefix}unit", "unit", nodeset="")
    retried = [build(f"{prefix}integ", "integ", attempt=n) for n in (1, 2)]
    on_lib = BuildInfo(f"{prefix}lib", "lib-unit", ref=lib)
    return ItemReport(
        BuildsetStart(started, start_time=at(0)),
        (
            (
                BuildStart(started, lint, at(1), executor="ex-1"),
                BuildEnd(
                    ended,
                    lint,
                    Result.SUCCESS,
                    at(9),
                    start_time=at(1),
                    log_url=f"https://logs.example/{prefix}lint/",
                    result_data={"coverage": 93.5},
                    artifacts=(
                        Artifact("docs", "https://logs.example/docs", {"type": "docs_site"}),
                        Artifact("docs", "https://logs.example/docs2"),
                        Artifact("log", "https://logs.example/log"),
                    ),
                    events=(BuildEvent("paused", at(3), "children"), BuildEvent("resumed", at(6))),
                ),
            ),
            (
                BuildStart(started, unit, at(2), executor="ex-2", log_url="https://live/unit"),
                BuildEnd(
                    ended,
                    replace(unit, voting=False, nodeset="big"),
                    Result.FAILURE,
                    at(8),
                    start_time=at(3),
                    error_detail="exit 1",
                ),
            ),
            (None, BuildEnd(ended, docs, Result.SKIPPED, at(9))),
            (
                BuildStart(started, retried[0], at(2), executor="ex-1"),
                BuildEnd(ended, retried[0], Result.RETRY, at(4), error_detail="node lost"),
            ),
            (
                BuildStart(started, retried[1], at(5), executor="ex-3"),
                BuildEnd(ended, retried[1], Result.SUCCESS, at(9), start_time=at(5)),
            ),
            (
                BuildStart(started, on_lib, at(2)),
                BuildEnd(ended, on_lib, Result.SUCCESS, at(7), log_url="https://l/lib"),
            ),
        ),
        BuildsetEnd(ended, Result.FAILURE, "Build failed.", at(10)),
    )


def per_event(engine: Engine, report: ItemReport) -> None:
    record_buildset_start(engine, report.start)
    for start, end in report.builds:
        if start is not None:
            record_build_start(engine, start)
        record_build_end(engine, end)
    record_buildset_end(engine, report.end)


def nothing(engine: Engine, report: ItemReport) -> None:
    pass


def started_earlier(engine: Engine, report: ItemReport) -> None:
    """Every build had started elsewhere, the skipped one too, with other values."""
    for start, end in report.builds:
        early = BuildStart(
            report.start.buildset,
            replace(end.build, nodeset="early"),
            at(0.5),
            executor="early",
            log_url="https://early/",
        )
        record_build_start(engine, early if start is None else replace(early, build=start.build))


def ended_earlier(engine: Engine, report: ItemReport) -> None:
    """The buildset and every build had ended otherwise (artifacts, events, a
    result the late start must not erase), the buildset with an event id unknown."""
    bs = replace(report.start.buildset, event_id="")
    record_buildset_end(engine, BuildsetEnd(bs, Result.ERROR, "earlier", at(20)))
    for _, end in report.builds:
        record_build_end(
            engine,
            replace(
                end,
                result=Result.ABORTED,
                log_url="https://old/",
                start_time=at(0.25),
                artifacts=(Artifact("old", "https://old/art"), Artifact("log", "https://old/l")),
                events=(BuildEvent("paused", at(3), "children"), BuildEvent("old", at(1))),
            ),
        )


def touched_earlier(engine: Engine, report: ItemReport) -> None:
    """Only an event of one build came before: its buildset row has no times."""
    _, end = report.builds[0]
    record_build_event(engine, end.buildset, end.build, BuildEvent("paused", at(3), "x"))


EARLIER: dict[str, Earlier] = {
    "fresh": nothing,
    "reported before": per_event,
    "started earlier": started_earlier,
    "ended earlier": ended_earlier,
    "only touched": touched_earlier,
}


def rows(engine: Engine, prefix: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the history of ``prefix`` (its uuids), in order of ids, with
    foreign keys as the keys they point to, the prefix cut out of every string."""
    buildset, build, ref = BUILDSETS.c, BUILDS.c, REFS.c
    ours = buildset.uuid.startswith(prefix)
    build_key = (build.uuid, build.attempt)
    queries = {
        "buildsets": select(*_columns(BUILDSETS)).where(ours).order_by(buildset.id),
        "builds": select(buildset.uuid, *_columns(BUILDS))
        .join(BUILDSETS)
        .where(ours)
        .order_by(build.id),
        "refs": select(buildset.uuid, *_columns(REFS))
        .select_from(BUILDSET_REFS.join(BUILDSETS).join(REFS))
        .where(ours)
        .order_by(ref.id),
        "artifacts": select(*build_key, *_columns(ARTIFACTS))
        .join(BUILDS)
        .where(build.uuid.startswith(prefix))
        .order_by(ARTIFACTS.c.id),
        "events": select(*build_key, *_columns(BUILD_EVENTS))
        .join(BUILDS)
        .where(build.uuid.startswith(prefix))
        .order_by(BUILD_EVENTS.c.id),
    }
    with engine.connect() as connection:
        found = {name: connection.execute(query).all() for name, query in queries.items()}
    return {
        name: [tuple(_cut(value, prefix) for value in row) for row in got]
        for name, got in found.items()
    }


def _columns(table: Any) -> list[Any]:
    skip = {"id", "updated", "buildset_id", "build_id", "ref_id"}
    return [column for column in table.c if column.name not in skip]


def _cut(value: Any, prefix: str) -> Any:
    return value.replace(prefix, "") if isinstance(value, str) else value


@pytest.mark.parametrize("earlier", EARLIER.values(), ids=list(EARLIER))
def test_an_item_report_writes_the_rows_of_the_four_calls(engine: Engine, earlier: Earlier) -> None:
    for prefix, record in (("apart-", per_event), ("whole-", record_item)):
        report = item_report(prefix)
        earlier(engine, report)
        record(engine, report)
    apart, whole = rows(engine, "apart-"), rows(engine, "whole-")
    assert whole == apart
    assert len(whole["builds"]) == 6 and len(whole["refs"]) == 2
    assert [row[:4] for row in whole["artifacts"]] == [
        ("lint", 1, "docs", "https://logs.example/docs2"),
        ("lint", 1, "log", "https://logs.example/log"),
    ]


def test_a_build_listed_twice_is_written_as_in_turn(engine: Engine) -> None:
    """Not what the scheduler sends, but recorded as the calls in turn would be:
    the later end's artifacts, both ends' events."""
    for prefix, record in (("apart-", per_event), ("whole-", record_item)):
        report = item_report(prefix)
        (start, end), *others = report.builds
        assert start is not None
        again = (
            replace(start, executor="ex-9"),
            replace(end, artifacts=(Artifact("log", "https://again/"),), events=()),
        )
        record(engine, replace(report, builds=((start, end), again, *others)))
    assert rows(engine, "whole-") == rows(engine, "apart-")


def test_an_item_report_is_one_transaction_and_idempotent(engine: Engine) -> None:
    reporter, report = SqlReporter(engine), item_report("once-")
    commits: list[object] = []

    def committed(connection: object) -> None:
        commits.append(connection)

    event.listen(engine, "commit", committed)
    for _ in range(2):  # reported again after a crash: still one row each
        assert ReporterSet([reporter]).record_item(report) == ()
    event.remove(engine, "commit", committed)
    assert len(commits) == 2  # one transaction a report
    per_event(engine, item_report("apart-"))
    assert rows(engine, "once-") == rows(engine, "apart-")


def test_an_item_is_five_statements_all_cached(engine: Engine) -> None:
    """The buildset, its ref, the link, the builds in one statement, their
    artifacts cleared: each statement compiled once, values bound."""

    def plain(prefix: str) -> ItemReport:
        """As the scheduler reports a no-op change: three builds run and passed."""
        bs = buildset(f"{prefix}bs", ref=f"refs/heads/{prefix}topic")
        builds = []
        for n, job in enumerate(("lint", "unit", "docs")):
            b = build(f"{prefix}{job}", job)
            end = BuildEnd(bs, b, Result.SUCCESS, at(9), start_time=at(n), log_url=f"/{n}")
            builds.append((BuildStart(bs, b, at(n), executor="ex-1"), end))
        return ItemReport(
            BuildsetStart(bs, at(0)), tuple(builds), BuildsetEnd(bs, Result.SUCCESS, "", at(9))
        )

    record_item(engine, plain("first-"))
    sent: list[CacheStats] = []

    def executed(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        _params, context, _many = rest
        if context.compiled is not None:  # not the driver's own (SQLite's BEGIN)
            sent.append(context.cache_hit)

    event.listen(engine, "before_cursor_execute", executed)
    record_item(engine, plain("second-"))
    event.remove(engine, "before_cursor_execute", executed)
    assert sent == [CacheStats.CACHE_HIT] * 5


def test_an_item_report_is_of_one_buildset_and_its_builds() -> None:
    report = item_report("")
    other = replace(report.start.buildset, uuid="other")
    with pytest.raises(ReportingError, match="ends as other"):
        replace(report, end=replace(report.end, buildset=other))
    (start, end), *_ = report.builds
    assert start is not None
    with pytest.raises(ReportingError, match="of another buildset"):
        replace(report, builds=((start, replace(end, buildset=other)),))
    with pytest.raises(ReportingError, match="starts as another"):
        replace(report, builds=((replace(start, build=build(attempt=2)), end),))


def test_a_reporter_without_item_reports_gets_the_four_calls() -> None:
    calls: list[str] = []

    class Plain:
        name = "plain"

        def record_buildset_start(self, record: BuildsetStart) -> None:
            calls.append("buildset start")

        def record_build_start(self, record: BuildStart) -> None:
            calls.append(f"start {record.build.job} {record.build.attempt}")

        def record_build_end(self, record: BuildEnd) -> None:
            calls.append(f"end {record.build.job} {record.build.attempt}")

        def record_buildset_end(self, record: BuildsetEnd) -> None:
            calls.append("buildset end")

    assert ReporterSet([Plain()]).record_item(item_report("")) == ()
    assert calls == [
        "buildset start",
        *("start lint 1", "end lint 1", "start unit 1", "end unit 1", "end docs 1"),
        *("start integ 1", "end integ 1", "start integ 2", "end integ 2"),
        *("start lib-unit 1", "end lib-unit 1"),
        "buildset end",
    ]
