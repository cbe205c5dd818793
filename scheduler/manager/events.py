"""Pipeline events: what a pipeline manager applies.

The management events (``Enqueue``, ``Dequeue``, ``Promote``) travel
through the event queues: they are defined with every queued event in
:mod:`scheduler.wire.events`, and a manager applies them as decoded. Build
and merge events (:class:`MergeCompleted`, :class:`BuildStarted`, ...) are
made by the processing layer from the request events of the job request
queues: they never travel as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from scheduler.model.results import Result
from scheduler.wire.events import Dequeue, Enqueue, Promote


class MergedChange(NamedTuple):
    """One change of a merge: its branch's commit after it, and the files it touches."""

    project: str
    branch: str
    commit: str
    files: tuple[str, ...] = ()


@dataclass(frozen=True)
class MergeOutcome:
    """What a merge job produced for one buildset."""

    ok: bool
    repo_state: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    # config file path -> text per "project@branch", from the merged tree
    config_files: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    error: str = ""
    # the merger died mid-merge: merge again rather than fail the item
    lost: bool = False
    # project -> branch -> commit before the changes, for the branches they moved
    base_state: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # each change merged, in merge order (a batch's members get their own state from it)
    merged: tuple[MergedChange, ...] = ()


@dataclass(frozen=True)
class MergeCompleted:
    item: str
    buildset: str
    request: str
    outcome: MergeOutcome


@dataclass(frozen=True)
class BuildStarted:
    build: str
    item: str
    buildset: str
    job: str
    time: float
    worker: str = ""


@dataclass(frozen=True)
class BuildPaused:
    build: str
    item: str
    buildset: str
    job: str
    # the result data the job returned when it paused (for its dependents)
    result_data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BuildPreFailed:
    """A line of the build's run output matched its job's failure-output."""

    build: str
    item: str
    buildset: str
    job: str


@dataclass(frozen=True)
class BuildCompleted:
    build: str
    item: str
    buildset: str
    job: str
    result: Result
    message: str = ""
    start_time: float | None = None
    end_time: float | None = None
    result_data: Mapping[str, Any] = field(default_factory=dict)
    log_path: str = ""


@dataclass(frozen=True)
class NodesAnswered:
    """A build's node request was fulfilled (``nodes`` set) or failed (``reason``)."""

    request: str
    item: str
    buildset: str
    job: str
    fulfilled: bool
    reason: str = ""
    # [{name, id, label, host, connection}] in the nodeset's order
    nodes: tuple[Mapping[str, Any], ...] = ()


PipelineEvent = (
    Enqueue
    | Dequeue
    | Promote
    | MergeCompleted
    | BuildStarted
    | BuildPaused
    | BuildCompleted
    | NodesAnswered
    | BuildPreFailed
)
