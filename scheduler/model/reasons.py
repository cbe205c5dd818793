"""Why an item left its pipeline, and what resets cost.

Every item that leaves without success, or ends with a result that is not
SUCCESS, carries a :class:`LeaveReason`: a machine-readable ``kind`` (the
constants below) and the human message. A reset of a shared queue's item
(:mod:`scheduler.manager.reset`) throws away the builds of its buildset
that ran; :class:`Waste` counts them and the CI seconds they used, both on
the item that was reset (``QueueItem.resets``, with the last
:class:`ResetCause`) and on the item whose failure or dequeue caused it
(``QueueItem.reset_cost``).

All of these are frozen: an item's copy (``QueueItem.clone``) shares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# voting jobs ended without success (``jobs`` names them)
FAILED = "failed"
MERGE_CONFLICT = "merge-conflict"
CONFIG_ERROR = "config-error"
# a change it depends on failed or left without merging
DEPENDENCY_FAILED = "dependency-failed"
# a dependency cycle its queue refuses, or a dependency in another queue
DEPENDENCY_ERROR = "dependency-error"
# a new patchset, a newer ref, another target branch
SUPERSEDED = "superseded"
# `sluice dequeue`, the REST API's dequeue
OPERATOR = "operator"
# no jobs to run in the pipeline (left without a report)
NO_JOBS = "no-jobs"
PIPELINE_REMOVED = "pipeline-removed"
# the forge or the branch refused the merge of a passed item
PUSH_FAILED = "push-failed"
# the queue's order changed (a promote): a reset only, never a leave
REORDERED = "reordered"
# a dequeue whose caller gave no kind
DEQUEUED = "dequeued"

KINDS = (
    FAILED,
    MERGE_CONFLICT,
    CONFIG_ERROR,
    DEPENDENCY_FAILED,
    DEPENDENCY_ERROR,
    SUPERSEDED,
    OPERATOR,
    NO_JOBS,
    PIPELINE_REMOVED,
    PUSH_FAILED,
    DEQUEUED,
)


@dataclass(frozen=True)
class LeaveReason:
    """Why an item failed or was dequeued."""

    kind: str
    message: str
    # FAILED: the voting jobs that ended without success
    jobs: tuple[str, ...] = ()
    # what a failure is judged to be (flaky, culprit, broken-base); None: not judged
    verdict: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "jobs": list(self.jobs),
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> LeaveReason | None:
        if not data:
            return None
        verdict = data.get("verdict")
        return cls(
            kind=str(data.get("kind", DEQUEUED)),
            message=str(data.get("message", "")),
            jobs=tuple(str(j) for j in data.get("jobs") or ()),
            verdict=None if verdict is None else str(verdict),
        )


@dataclass(frozen=True)
class ResetCause:
    """The item ahead whose failure or dequeue reset an item, and its reason."""

    item: str
    project: str
    ref: str
    kind: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "project": self.project,
            "ref": self.ref,
            "kind": self.kind,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ResetCause | None:
        if not data:
            return None
        return cls(
            item=str(data.get("item", "")),
            project=str(data.get("project", "")),
            ref=str(data.get("ref", "")),
            kind=str(data.get("kind", "")),
            message=str(data.get("message", "")),
        )


@dataclass(frozen=True)
class Waste:
    """Resets and what they threw away: builds that ran and their CI seconds."""

    resets: int = 0
    builds: int = 0
    ci_seconds: float = 0.0

    def __add__(self, other: Waste) -> Waste:
        return Waste(
            self.resets + other.resets,
            self.builds + other.builds,
            round(self.ci_seconds + other.ci_seconds, 3),
        )

    def __bool__(self) -> bool:
        return bool(self.resets)

    def to_dict(self) -> dict[str, Any]:
        return {"resets": self.resets, "builds": self.builds, "ci_seconds": self.ci_seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Waste:
        if not data:
            return cls()
        return cls(
            resets=int(data.get("resets", 0)),
            builds=int(data.get("builds", 0)),
            ci_seconds=float(data.get("ci_seconds", 0.0)),
        )


@dataclass(frozen=True)
class ResetHistory:
    """The resets an item went through: their total and the last one's cause."""

    total: Waste = field(default_factory=Waste)
    cause: ResetCause | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.total.resets,
            "builds": self.total.builds,
            "ci_seconds": self.total.ci_seconds,
            "cause": self.cause.to_dict() if self.cause else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ResetHistory:
        if not data:
            return cls()
        total = Waste(
            resets=int(data.get("count", 0)),
            builds=int(data.get("builds", 0)),
            ci_seconds=float(data.get("ci_seconds", 0.0)),
        )
        return cls(total, ResetCause.from_dict(data.get("cause")))


def describe_waste(waste: Waste) -> str:
    """``5 builds, 240 CI seconds`` (for reports)."""
    builds = "1 build" if waste.builds == 1 else f"{waste.builds} builds"
    return f"{builds}, {waste.ci_seconds:.0f} CI seconds"
