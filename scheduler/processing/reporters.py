"""Reporting a finished item: its buildset and every build attempt, to each reporter.

Translates queue items into the records of :mod:`scheduler.reporting`
(one row per buildset and per build attempt in SQL, a log line each).
Every record is keyed by uuid (and attempt), so reporting an item twice,
after a crash between the report and the commit that removes the item,
writes nothing twice. A record that does not land (the database is down)
raises :class:`ReportNotLandedError`: the item stays in its pipeline and the
report is tried again later (``PipelineManager.report_failed``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.errors import SluiceError
from scheduler.model import artifacts
from scheduler.model.build import Build, JobState
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.reporting import (
    Artifact,
    BuildEnd,
    BuildInfo,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
    ItemReport,
    RefInfo,
    ReporterSet,
)


class ReportNotLandedError(SluiceError):
    """A reporter could not record an item; it must be reported again."""


def _landed(what: str, failed: tuple[str, ...]) -> None:
    if failed:
        raise ReportNotLandedError(f"{', '.join(failed)} could not record the {what}")


def _time(value: float | None, default: float) -> datetime:
    return datetime.fromtimestamp(value if value is not None else default, tz=UTC)


def buildset_info(tenant: str, pipeline: str, item: QueueItem) -> BuildsetInfo:
    change = item.change
    ref = RefInfo(
        project=change.project,
        branch=change.branch,
        ref=change.ref,
        change="" if change.is_branch_update else change.ref,
        newrev=change.commit,
    )
    return BuildsetInfo(item.buildset.uuid, tenant, pipeline, ref, event_id=item.event_id)


def attempt_result(job: JobState, build: Build) -> Result:
    """What one attempt is recorded as (a retried attempt is RETRY)."""
    if build.result is None:
        return Result.ABORTED
    if build is job.current and job.result is Result.RETRY_LIMIT:
        return Result.RETRY_LIMIT
    if build.result is Result.LOST:
        return Result.RETRY
    return build.result


class HistoryReporter:
    """Reports finished items to a :class:`~scheduler.reporting.ReporterSet`."""

    def __init__(self, reporters: ReporterSet) -> None:
        self.reporters = reporters

    def report(self, tenant: str, pipeline: str, item: QueueItem, action: str = "") -> None:
        """The item's buildset, every build attempt and the result, as one report
        (one SQL transaction: ``ReporterSet.record_item``), whatever the action:
        the history is kept for every item, as Zuul's database does."""
        info = buildset_info(tenant, pipeline, item)
        started = _time(item.enqueue_time, item.enqueue_time)
        builds = tuple(
            self._build_records(info, job, build, item.enqueue_time)
            for job in item.buildset.graph
            for build in job.builds
        )
        result = item.result or Result.ERROR
        ended = max(
            [b.end_time for j in item.buildset.graph for b in j.builds if b.end_time] or [0.0]
        )
        end = _time(ended or None, item.enqueue_time)
        finished = BuildsetEnd(
            info,
            result,
            item.message,
            end,
            reason=item.reason.to_dict() if item.reason else None,
            resets=item.resets.to_dict(),
            reset_cost=item.reset_cost.to_dict(),
        )
        report = ItemReport(BuildsetStart(info, started), builds, finished)
        _landed("item report", self.reporters.record_item(report))

    @staticmethod
    def _build_records(
        info: BuildsetInfo, job: JobState, build: Build, default: float
    ) -> tuple[BuildStart | None, BuildEnd]:
        record = BuildInfo(build.uuid, job.name, build.attempt, job.info.voting)
        start = None
        if build.start_time is not None:
            start = BuildStart(
                info, record, _time(build.start_time, default), executor=build.worker
            )
        end = BuildEnd(
            info,
            record,
            attempt_result(job, build),
            _time(build.end_time, default),
            start_time=_time(build.start_time, default) if build.start_time else None,
            log_url=build.log_path,
            error_detail=build.message,
            result_data=build.result_data,
            artifacts=tuple(
                Artifact(a["name"], a["url"], a.get("metadata", {}))
                for a in artifacts.returned(build.result_data)
            ),
        )
        return start, end
