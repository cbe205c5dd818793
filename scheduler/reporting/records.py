"""What the scheduler tells reporters: frozen dataclasses, no I/O.

Every record carries the identity of its buildset (:class:`BuildsetInfo`),
and every build record the identity of its build (:class:`BuildInfo`), so a
reporter can act on any record alone: a build that ends before its start
was reported (a reporter failed, a task was redelivered out of order) is
still recorded in full.

Times are timezone-aware; naive datetimes are refused, since a naive time
read back on another worker would silently mean another instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from scheduler.model.results import Result
from scheduler.reporting.errors import ReportingError


def utcnow() -> datetime:
    return datetime.now(UTC)


def require_aware(name: str, value: datetime | None) -> None:
    if value is not None and value.utcoffset() is None:
        raise ReportingError(f"{name} must be timezone-aware, got {value.isoformat()}")


@dataclass(frozen=True)
class RefInfo:
    """A ref tested by a buildset: a branch tip, a commit or a change.

    For a git connection a change is a ref (branch or commit) to be merged
    into ``branch``; ``newrev`` is the commit tested. Empty strings stand for
    "not applicable" (a branch tip has no ``change``).
    """

    project: str
    branch: str
    ref: str
    change: str = ""
    patchset: str = ""
    oldrev: str = ""
    newrev: str = ""
    ref_url: str = ""


@dataclass(frozen=True)
class BuildsetInfo:
    """The identity of a buildset (one per item and layout attempt)."""

    uuid: str
    tenant: str
    pipeline: str
    # The item's own ref; ``refs`` lists any further refs it tests with it.
    ref: RefInfo
    event_id: str = ""
    refs: tuple[RefInfo, ...] = ()

    @property
    def all_refs(self) -> tuple[RefInfo, ...]:
        return (self.ref, *(r for r in self.refs if r != self.ref))


@dataclass(frozen=True)
class BuildInfo:
    """The identity of one build attempt: ``(uuid, attempt)`` is unique."""

    uuid: str
    job: str
    attempt: int = 1
    voting: bool = True
    # The ref the build ran on when it differs from its buildset's.
    ref: RefInfo | None = None
    nodeset: str = ""

    def __post_init__(self) -> None:
        if self.attempt < 1:
            raise ReportingError(f"build {self.uuid}: attempt must be >= 1, got {self.attempt}")


@dataclass(frozen=True)
class Artifact:
    """A named result of a build (a log, a report, an image)."""

    name: str
    url: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildEvent:
    """A notable moment in a build's life (paused, resumed, node assigned)."""

    event_type: str
    event_time: datetime
    description: str = ""

    def __post_init__(self) -> None:
        require_aware("event_time", self.event_time)


@dataclass(frozen=True)
class BuildsetStart:
    buildset: BuildsetInfo
    start_time: datetime = field(default_factory=utcnow)

    def __post_init__(self) -> None:
        require_aware("start_time", self.start_time)


@dataclass(frozen=True)
class BuildsetEnd:
    buildset: BuildsetInfo
    result: Result
    message: str = ""
    end_time: datetime = field(default_factory=utcnow)
    # why the item failed or left ({kind, message, jobs, verdict}; None: it passed)
    reason: Mapping[str, Any] | None = None
    # the resets it went through ({count, builds, ci_seconds, cause})
    resets: Mapping[str, Any] | None = None
    # what its failure or dequeue cost the items behind it ({resets, builds, ci_seconds})
    reset_cost: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        require_aware("end_time", self.end_time)


@dataclass(frozen=True)
class BuildStart:
    buildset: BuildsetInfo
    build: BuildInfo
    start_time: datetime = field(default_factory=utcnow)
    # The executor that runs the build, and where its log will be.
    executor: str = ""
    log_url: str = ""

    def __post_init__(self) -> None:
        require_aware("start_time", self.start_time)


@dataclass(frozen=True)
class BuildEnd:
    """The end of a build attempt; ``start_time`` None for builds never run."""

    buildset: BuildsetInfo
    build: BuildInfo
    result: Result
    end_time: datetime = field(default_factory=utcnow)
    start_time: datetime | None = None
    log_url: str = ""
    error_detail: str = ""
    result_data: Mapping[str, Any] = field(default_factory=dict)
    artifacts: tuple[Artifact, ...] = ()
    events: tuple[BuildEvent, ...] = ()

    def __post_init__(self) -> None:
        require_aware("end_time", self.end_time)
        require_aware("start_time", self.start_time)


@dataclass(frozen=True)
class ItemReport:
    """A finished item's whole history at once: its buildset's start, each build
    attempt's start (None if it never ran) and end, in order, and its end.

    Recorded exactly as the four calls in that order would be; a reporter
    that can (SQL) records it in one transaction. Every record is of the
    same buildset, and a build's start and end of the same attempt.
    """

    start: BuildsetStart
    builds: tuple[tuple[BuildStart | None, BuildEnd], ...]
    end: BuildsetEnd

    def __post_init__(self) -> None:
        uuid = self.start.buildset.uuid
        if self.end.buildset.uuid != uuid:
            raise ReportingError(f"item report {uuid}: it ends as {self.end.buildset.uuid}")
        for build_start, build_end in self.builds:
            attempt = (build_end.build.uuid, build_end.build.attempt)
            records = (build_end,) if build_start is None else (build_start, build_end)
            if any(record.buildset.uuid != uuid for record in records):
                raise ReportingError(f"item report {uuid}: build {attempt} of another buildset")
            if build_start is not None and attempt != (
                build_start.build.uuid,
                build_start.build.attempt,
            ):
                raise ReportingError(f"item report {uuid}: build {attempt} starts as another")
