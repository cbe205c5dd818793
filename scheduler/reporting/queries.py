"""Reading build history: the data of ``sluice builds`` / ``sluice buildsets``.

The dictionaries returned here are printed as-is by ``--json``: their keys
are a stable interface (keys may be added, never renamed or removed). Times
are ISO-8601 UTC strings, ``YYYY-MM-DDTHH:MM:SSZ``, or null; ``result`` is
one of :class:`~scheduler.model.results.Result`'s values, or null
while running. Lists are newest first.

:func:`build_times` lists finished builds by their end (Zuul's build
times). :func:`job_durations` gives the last successful durations of a job, the
basis of the status page's progress estimates (:func:`estimate_duration`,
or :func:`estimate_durations` for many jobs in one query).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypedDict, TypeVar

from sqlalchemy import Engine, Select, func, select
from sqlalchemy.orm import Session

from scheduler.model.results import RETRYABLE, Result
from scheduler.reporting.database import read_only_options
from scheduler.reporting.errors import ReportingError
from scheduler.reporting.models import ArtifactRow, BuildRow, BuildsetRow

S = TypeVar("S", bound="Select[*tuple[Any, ...]]")

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# How many successful runs a progress estimate averages (as Zuul does).
DURATION_SAMPLES = 10


class BuildDict(TypedDict):
    uuid: str
    attempt: int
    job: str
    tenant: str
    pipeline: str
    project: str
    branch: str
    ref: str
    change: str
    newrev: str
    buildset: str
    voting: bool
    nodeset: str
    executor: str
    result: str | None
    final: bool
    start_time: str | None
    end_time: str | None
    duration: float | None
    log_url: str
    error_detail: str
    # a failed voting build of a judged gate failure: flaky, culprit or broken-base
    verdict: str | None


class BuildsetDict(TypedDict):
    uuid: str
    tenant: str
    pipeline: str
    project: str
    branch: str
    ref: str
    change: str
    newrev: str
    event_id: str
    result: str | None
    message: str
    start_time: str | None
    end_time: str | None
    # why its item failed or left, its resets, what it cost others (null: not recorded)
    reason: dict[str, Any] | None
    resets: dict[str, Any] | None
    reset_cost: dict[str, Any] | None


def format_time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).strftime(TIME_FORMAT)


def _duration(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()


def _result(value: Result | None) -> str | None:
    return None if value is None else Result(value).value


def parse_result(value: Result | str | None) -> Result | None:
    """A result filter as given on a command line; an unknown value is an error."""
    if value is None:
        return None
    try:
        return Result(value)
    except ValueError:
        known = ", ".join(result.value for result in Result)
        raise ReportingError(f"unknown result {value!r}; one of {known}") from None


def build_dict(
    build: BuildRow, buildset_uuid: str, reason: Mapping[str, Any] | None = None
) -> BuildDict:
    failed = reason is not None and build.job in (reason.get("jobs") or ())
    return BuildDict(
        uuid=build.uuid,
        attempt=build.attempt,
        job=build.job,
        tenant=build.tenant,
        pipeline=build.pipeline,
        project=build.project,
        branch=build.branch,
        ref=build.ref,
        change=build.change,
        newrev=build.newrev,
        buildset=buildset_uuid,
        voting=build.voting,
        nodeset=build.nodeset,
        executor=build.executor,
        result=_result(build.result),
        final=build.result is not None and Result(build.result).is_final,
        start_time=format_time(build.start_time),
        end_time=format_time(build.end_time),
        duration=_duration(build.start_time, build.end_time),
        log_url=build.log_url,
        error_detail=build.error_detail,
        verdict=str(reason["verdict"]) if failed and reason and reason.get("verdict") else None,
    )


def buildset_dict(buildset: BuildsetRow) -> BuildsetDict:
    return BuildsetDict(
        uuid=buildset.uuid,
        tenant=buildset.tenant,
        pipeline=buildset.pipeline,
        project=buildset.project,
        branch=buildset.branch,
        ref=buildset.ref,
        change=buildset.change,
        newrev=buildset.newrev,
        event_id=buildset.event_id,
        result=_result(buildset.result),
        message=buildset.message,
        start_time=format_time(buildset.start_time),
        end_time=format_time(buildset.end_time),
        reason=buildset.reason,
        resets=buildset.resets,
        reset_cost=buildset.reset_cost,
    )


@contextmanager
def _reading(engine: Engine) -> Iterator[Session]:
    with (
        engine.connect().execution_options(**read_only_options()) as connection,
        Session(bind=connection) as session,
    ):
        yield session


def _where(stmt: S, filters: Mapping[Any, object]) -> S:
    for column, value in filters.items():
        if value is not None:
            stmt = stmt.where(column == value)
    return stmt


def _page(stmt: S, limit: int | None, offset: int) -> S:
    if offset:
        stmt = stmt.offset(offset)
    return stmt if limit is None else stmt.limit(limit)


def list_builds(
    engine: Engine,
    *,
    tenant: str | None = None,
    project: str | None = None,
    pipeline: str | None = None,
    job: str | None = None,
    branch: str | None = None,
    ref: str | None = None,
    change: str | None = None,
    result: Result | str | None = None,
    buildset: str | None = None,
    uuid: str | None = None,
    voting: bool | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[BuildDict]:
    """Build attempts matching every filter given, newest first."""
    filters: dict[Any, object] = {
        BuildRow.tenant: tenant,
        BuildRow.project: project,
        BuildRow.pipeline: pipeline,
        BuildRow.job: job,
        BuildRow.branch: branch,
        BuildRow.ref: ref,
        BuildRow.change: change,
        BuildRow.result: parse_result(result),
        BuildsetRow.uuid: buildset,
        BuildRow.uuid: uuid,
        BuildRow.voting: voting,
    }
    stmt = _page(_builds(filters).order_by(BuildRow.id.desc()), limit, offset)
    return _build_dicts(engine, stmt)


def build_artifacts(engine: Engine, tenant: str, uuid: str) -> list[dict[str, Any]]:
    """The artifacts a build returned (``zuul_return``), Zuul's ``{name, url, metadata}``,
    by name; every attempt's of that uuid (one, in practice)."""
    stmt = (
        select(ArtifactRow)
        .join(BuildRow, ArtifactRow.build_id == BuildRow.id)
        .where(BuildRow.tenant == tenant, BuildRow.uuid == uuid)
        .order_by(ArtifactRow.name)
    )
    with _reading(engine) as session:
        return [
            {"name": row.name, "url": row.url, "metadata": row.meta}
            for row in session.scalars(stmt)
        ]


def _builds(filters: Mapping[Any, object]) -> Select[tuple[BuildRow, str, Any]]:
    """Builds with their buildset's uuid and reason, matching ``filters``."""
    stmt = select(BuildRow, BuildsetRow.uuid, BuildsetRow.reason).join(BuildRow.buildset)
    return _where(stmt, filters)


def _build_dicts(engine: Engine, stmt: Select[tuple[BuildRow, str, Any]]) -> list[BuildDict]:
    with _reading(engine) as session:
        return [build_dict(build, uuid, reason) for build, uuid, reason in session.execute(stmt)]


def list_buildsets(
    engine: Engine,
    *,
    tenant: str | None = None,
    project: str | None = None,
    pipeline: str | None = None,
    branch: str | None = None,
    ref: str | None = None,
    change: str | None = None,
    result: Result | str | None = None,
    uuid: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    complete: bool | None = None,
) -> list[BuildsetDict]:
    """Buildsets matching every filter given, newest first (``complete``: reported or not)."""
    filters: dict[Any, object] = {
        BuildsetRow.tenant: tenant,
        BuildsetRow.project: project,
        BuildsetRow.pipeline: pipeline,
        BuildsetRow.branch: branch,
        BuildsetRow.ref: ref,
        BuildsetRow.change: change,
        BuildsetRow.result: parse_result(result),
        BuildsetRow.uuid: uuid,
    }
    stmt = _where(select(BuildsetRow), filters)
    if complete is not None:
        done = BuildsetRow.result.is_not(None)
        stmt = stmt.where(done if complete else BuildsetRow.result.is_(None))
    stmt = _page(stmt.order_by(BuildsetRow.id.desc()), limit, offset)
    with _reading(engine) as session:
        return [buildset_dict(row) for row in session.scalars(stmt)]


def build_times(
    engine: Engine,
    *,
    tenant: str,
    project: str | None = None,
    pipeline: str | None = None,
    branch: str | None = None,
    ref: str | None = None,
    job: str | None = None,
    result: Result | str | None = None,
    exclude_result: Result | str | None = None,
    final: bool | None = None,
    ended_after: datetime | None = None,
    ended_before: datetime | None = None,
    limit: int | None = None,
    offset: int = 0,
) -> list[BuildDict]:
    """Finished build attempts, latest end first (Zuul's build times).

    ``ended_after`` / ``ended_before`` bound the end time (inclusive), as
    Zuul's ``start_time`` / ``end_time`` filters do.
    """
    filters: dict[Any, object] = {
        BuildRow.tenant: tenant,
        BuildRow.project: project,
        BuildRow.pipeline: pipeline,
        BuildRow.job: job,
        BuildRow.branch: branch,
        BuildRow.ref: ref,
        BuildRow.result: parse_result(result),
    }
    stmt = _builds(filters).where(BuildRow.result.is_not(None))
    excluded = parse_result(exclude_result)
    if excluded is not None:
        stmt = stmt.where(BuildRow.result != excluded)
    if final is not None:
        retried = BuildRow.result.in_(sorted(RETRYABLE))
        stmt = stmt.where(~retried if final else retried)
    if ended_after is not None:
        stmt = stmt.where(BuildRow.end_time >= ended_after)
    if ended_before is not None:
        stmt = stmt.where(BuildRow.end_time <= ended_before)
    stmt = _page(stmt.order_by(BuildRow.end_time.desc(), BuildRow.id.desc()), limit, offset)
    return _build_dicts(engine, stmt)


def job_durations(
    engine: Engine,
    *,
    tenant: str,
    job: str,
    project: str | None = None,
    branch: str | None = None,
    limit: int = DURATION_SAMPLES,
) -> list[float]:
    """Seconds taken by the last ``limit`` successful runs of a job, newest first."""
    filters: dict[Any, object] = {
        BuildRow.tenant: tenant,
        BuildRow.job: job,
        BuildRow.project: project,
        BuildRow.branch: branch,
        BuildRow.result: Result.SUCCESS,
    }
    return _durations(engine, filters, limit)


def _durations(engine: Engine, filters: Mapping[Any, object], limit: int) -> list[float]:
    """Seconds taken by the latest ``limit`` finished builds that match, newest first."""
    stmt = (
        _where(select(BuildRow.start_time, BuildRow.end_time), filters)
        .where(BuildRow.start_time.is_not(None), BuildRow.end_time.is_not(None))
        .order_by(BuildRow.end_time.desc(), BuildRow.id.desc())
        .limit(limit)
    )
    with _reading(engine) as session:
        rows = session.execute(stmt).all()
    return [d for start, end in rows if (d := _duration(start, end)) is not None]


def estimate_duration(
    engine: Engine,
    *,
    tenant: str,
    job: str,
    project: str | None = None,
    branch: str | None = None,
) -> float | None:
    """The expected seconds of a job's next run (mean of recent successes), or None."""
    durations = job_durations(engine, tenant=tenant, job=job, project=project, branch=branch)
    return sum(durations) / len(durations) if durations else None


def estimate_durations(
    engine: Engine,
    *,
    tenant: str,
    jobs: Iterable[str],
    project: str | None = None,
    branch: str | None = None,
    samples: int = DURATION_SAMPLES,
) -> dict[str, float]:
    """Expected seconds for many jobs in one query (the status page's batch).

    Jobs without a successful run are absent from the answer.
    """
    names = sorted(set(jobs))
    if not names:
        return {}
    filters: dict[Any, object] = {
        BuildRow.tenant: tenant,
        BuildRow.project: project,
        BuildRow.branch: branch,
        BuildRow.result: Result.SUCCESS,
    }
    newest_first = (
        func.row_number()
        .over(
            partition_by=BuildRow.job,
            order_by=(BuildRow.end_time.desc(), BuildRow.id.desc()),
        )
        .label("age")
    )
    recent = (
        _where(select(BuildRow.job, BuildRow.start_time, BuildRow.end_time, newest_first), filters)
        .where(BuildRow.job.in_(names))
        .where(BuildRow.start_time.is_not(None), BuildRow.end_time.is_not(None))
        .subquery()
    )
    stmt = select(recent.c.job, recent.c.start_time, recent.c.end_time).where(
        recent.c.age <= samples
    )
    with _reading(engine) as session:
        rows = session.execute(stmt).all()
    durations: dict[str, list[float]] = {}
    for job, start, end in rows:
        durations.setdefault(job, []).append(_as_utc(end) - _as_utc(start))
    return {job: sum(values) / len(values) for job, values in durations.items()}


def _as_utc(value: datetime) -> float:
    # Subquery columns lose the UTC type decoration: naive values are UTC.
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    return aware.timestamp()


def count_by_result(engine: Engine, *, buildsets: bool) -> dict[str, int]:
    """How many builds (or buildsets) ended with each result (unfinished ones left out)."""
    column = BuildsetRow.result if buildsets else BuildRow.result
    stmt = select(column, func.count()).where(column.is_not(None)).group_by(column)
    with _reading(engine) as session:
        rows = session.execute(stmt).all()
    return {str(_result(result)): int(count) for result, count in rows}


def build_durations(engine: Engine, limit: int) -> list[float]:
    """Seconds taken by the latest ``limit`` finished builds, newest first."""
    return _durations(engine, {}, limit)
