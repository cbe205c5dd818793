"""Pipeline events: what a pipeline manager applies.

Management events (:class:`Enqueue`, :class:`Dequeue`, :class:`Promote`)
travel through the event queues; :func:`scheduler.wire.events.decode` is
their one decoder and ``to_dict`` their wire form. Build and merge events
(:class:`MergeCompleted`, :class:`BuildStarted`, ...) are made by the
processing layer from the request events of the job request queues: they
never travel as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.errors import SluiceError
from scheduler.model.change import Change
from scheduler.model.results import Result


class MalformedEventError(SluiceError):
    """A queued event does not have the shape its type requires."""


def _ids(event: Enqueue | Dequeue | Promote) -> dict[str, Any]:
    """The optional routing fields of a management event, when set."""
    found = {"pipeline": event.pipeline, "event_id": event.event_id, "result_id": event.result_id}
    return {key: value for key, value in found.items() if value}


@dataclass(frozen=True)
class Enqueue:
    change: Change
    event_id: str = ""
    # management events from the CLI or API: where to record the outcome
    result_id: str = ""
    # the pipeline a management event is for (tenant queues route by it)
    pipeline: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": "enqueue", "change": self.change.to_dict(), **_ids(self)}


@dataclass(frozen=True)
class Dequeue:
    """Remove the live items of ``change``'s ref (any target branch if it names none).

    ``current``: the forge says the change is now at this commit, targeting
    ``change.branch``; only the items of another version leave (a new
    patchset where ``dequeue-on-new-patchset`` holds, or another target
    branch), each with the reason.
    """

    change: Change
    event_id: str = ""
    result_id: str = ""
    pipeline: str = ""
    current: str = ""

    def to_dict(self) -> dict[str, Any]:
        found = {"type": "dequeue", "change": self.change.to_dict(), **_ids(self)}
        if self.current:
            found["current"] = self.current
        return found


@dataclass(frozen=True)
class Promote:
    """Move the items of ``changes`` to the head of their queues, in this order."""

    changes: tuple[Change, ...]
    event_id: str = ""
    result_id: str = ""
    pipeline: str = ""

    def to_dict(self) -> dict[str, Any]:
        changes = [change.to_dict() for change in self.changes]
        return {"type": "promote", "changes": changes, **_ids(self)}


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
)
