"""The log reporter: one structured ``logging`` line per reported moment.

Lines go to the ``sluice.reporting.log`` logger at INFO (a failed build at
WARNING). The message reads as ``key=value`` pairs for people and grep; the
same fields ride on the record as ``record.sluice`` (a dict) for a JSON
formatter. Logging never raises, so neither does this reporter.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from scheduler.model.results import Result
from scheduler.reporting.records import (
    BuildEnd,
    BuildInfo,
    BuildsetEnd,
    BuildsetInfo,
    BuildsetStart,
    BuildStart,
)

DEFAULT_LOGGER = "sluice.reporting.log"


def _buildset_fields(buildset: BuildsetInfo) -> dict[str, Any]:
    return {
        "tenant": buildset.tenant,
        "pipeline": buildset.pipeline,
        "project": buildset.ref.project,
        "branch": buildset.ref.branch,
        "ref": buildset.ref.ref,
        "buildset": buildset.uuid,
        "event_id": buildset.event_id,
    }


def _build_fields(buildset: BuildsetInfo, build: BuildInfo) -> dict[str, Any]:
    fields = _buildset_fields(buildset)
    if build.ref is not None:
        fields.update(project=build.ref.project, branch=build.ref.branch, ref=build.ref.ref)
    fields.update(build=build.uuid, job=build.job, attempt=build.attempt, voting=build.voting)
    return fields


class LogReporter:
    """Reports to a :mod:`logging` logger."""

    def __init__(self, logger: logging.Logger | None = None, name: str = "log") -> None:
        self.logger = logger or logging.getLogger(DEFAULT_LOGGER)
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def record_buildset_start(self, record: BuildsetStart) -> None:
        self._emit(logging.INFO, "buildset started", _buildset_fields(record.buildset))

    def record_build_start(self, record: BuildStart) -> None:
        fields = _build_fields(record.buildset, record.build)
        fields["executor"] = record.executor
        self._emit(logging.INFO, "build started", fields)

    def record_build_end(self, record: BuildEnd) -> None:
        fields = _build_fields(record.buildset, record.build)
        fields["result"] = record.result.value
        if record.error_detail:
            fields["error"] = record.error_detail
        level = logging.INFO if record.result in _QUIET_RESULTS else logging.WARNING
        self._emit(level, "build ended", fields)

    def record_buildset_end(self, record: BuildsetEnd) -> None:
        fields = _buildset_fields(record.buildset)
        fields["result"] = record.result.value
        if record.reason:
            fields["reason"] = record.reason.get("kind", "")
            fields["why"] = record.reason.get("message", "")
        if record.resets and record.resets.get("count"):
            fields["resets"] = record.resets["count"]
        if record.reset_cost and record.reset_cost.get("resets"):
            cost = record.reset_cost
            fields["reset_others"] = cost["resets"]
            fields["wasted_builds"] = cost.get("builds", 0)
            fields["wasted_ci_seconds"] = cost.get("ci_seconds", 0)
        self._emit(logging.INFO, "buildset ended", fields)

    def _emit(self, level: int, what: str, fields: dict[str, Any]) -> None:
        pairs = " ".join(f"{key}={_show(value)}" for key, value in fields.items() if value != "")
        self.logger.log(level, "%s %s", what, pairs, extra={"sluice": fields})


# Results that are part of normal operation, not worth a warning.
_QUIET_RESULTS = frozenset({Result.SUCCESS, Result.SKIPPED, Result.DEQUEUED})


# What makes a value need quotes in a ``key=value`` line (whitespace, quotes, ``=``).
_NEEDS_QUOTES = re.compile(r"[\s'\"=]")


def _show(value: Any) -> str:
    text = str(value)
    return repr(text) if (not text or _NEEDS_QUOTES.search(text)) else text
