"""Reporters as hooks: the protocol, and a set that calls each in turn.

The scheduler reports four moments of a buildset's life to every configured
reporter (SQL, log, later code-review systems). A reporter is a hook, not a
step of the pipeline: :class:`ReporterSet` logs a failing reporter with its
traceback and goes on to the next one, and tells the caller which failed so
it may retry them later. Every reporter must be idempotent (a redelivered
task reports again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

from scheduler.reporting.records import (
    BuildEnd,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
    ItemReport,
)

log = logging.getLogger("sluice.reporting")


@runtime_checkable
class Reporter(Protocol):
    """What the scheduler calls; every method must be safe to call twice."""

    @property
    def name(self) -> str: ...

    def record_buildset_start(self, record: BuildsetStart) -> None: ...

    def record_build_start(self, record: BuildStart) -> None: ...

    def record_build_end(self, record: BuildEnd) -> None: ...

    def record_buildset_end(self, record: BuildsetEnd) -> None: ...


def _record_item(reporter: Reporter, report: ItemReport) -> None:
    at_once = getattr(reporter, "record_item", None)
    if at_once is not None:
        at_once(report)
        return
    reporter.record_buildset_start(report.start)
    for start, end in report.builds:
        if start is not None:
            reporter.record_build_start(start)
        reporter.record_build_end(end)
    reporter.record_buildset_end(report.end)


class ReporterSet:
    """Calls every reporter; a failure is logged, never raised.

    Each method returns the names of the reporters that failed (empty when
    all succeeded).
    """

    def __init__(self, reporters: Iterable[Reporter]) -> None:
        self.reporters: tuple[Reporter, ...] = tuple(reporters)

    def record_buildset_start(self, record: BuildsetStart) -> tuple[str, ...]:
        return self._each(
            "buildset start", record.buildset, lambda r: r.record_buildset_start(record)
        )

    def record_build_start(self, record: BuildStart) -> tuple[str, ...]:
        return self._each(
            f"build start {record.build.uuid}",
            record.buildset,
            lambda r: r.record_build_start(record),
        )

    def record_build_end(self, record: BuildEnd) -> tuple[str, ...]:
        return self._each(
            f"build end {record.build.uuid}", record.buildset, lambda r: r.record_build_end(record)
        )

    def record_buildset_end(self, record: BuildsetEnd) -> tuple[str, ...]:
        return self._each("buildset end", record.buildset, lambda r: r.record_buildset_end(record))

    def record_item(self, report: ItemReport) -> tuple[str, ...]:
        """A finished item's whole history: at once where a reporter can
        (``record_item``), else as the four calls in order (the first that
        fails stops that reporter's report: it is tried again whole)."""
        return self._each("item report", report.start.buildset, lambda r: _record_item(r, report))

    def _each(
        self, what: str, buildset: BuildsetInfo, call: Callable[[Reporter], None]
    ) -> tuple[str, ...]:
        failed: list[str] = []
        for reporter in self.reporters:
            try:
                call(reporter)
            except Exception:  # a hook boundary: log it, never stop the pipeline
                log.exception(
                    "reporter %s failed on %s (tenant=%s pipeline=%s buildset=%s)",
                    reporter.name,
                    what,
                    buildset.tenant,
                    buildset.pipeline,
                    buildset.uuid,
                )
                failed.append(reporter.name)
        return tuple(failed)
