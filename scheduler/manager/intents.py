"""Intents: what a manager's pass asks of the outside world.

A manager does no I/O (:mod:`scheduler.manager.base`): it records the merge
and build requests, node requests, cancels, resumes, reports and merge
pushes it decided as :class:`Intents`, in the order it decided them. The
processing layer (:mod:`scheduler.processing`) commits them with the
changed state in one fenced transaction and acts on them after the commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.model.build import Build, JobInfo
from scheduler.model.change import Change
from scheduler.model.nodeset import NodeNames


@dataclass(frozen=True)
class MergeIntent:
    item: str
    buildset: str
    request: str
    changes: tuple[Change, ...]
    # projects to report besides the changes' (names in the tenant)
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildIntent:
    item: str
    buildset: str
    build: Build
    job: JobInfo
    parent_data: dict[str, Any]
    # what the job finds in zuul.artifacts (scheduler.manager.requirements)
    artifacts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class NodeIntent:
    """A build that needs nodes first: the pass submits its node request."""

    item: str
    buildset: str
    build: Build
    job: str
    nodes: NodeNames


@dataclass(frozen=True)
class CancelIntent:
    build: str
    zone: str = ""


@dataclass
class Intents:
    """What the pass asks of the outside world, in the order it was decided."""

    merges: list[MergeIntent] = field(default_factory=list)
    builds: list[BuildIntent] = field(default_factory=list)
    cancels: list[CancelIntent] = field(default_factory=list)
    # paused builds whose dependents finished: set their ``resume`` flag
    resumes: list[CancelIntent] = field(default_factory=list)
    reports: list[str] = field(default_factory=list)
    # uuids of head items whose tested merge the processing layer must push,
    # answering each with merge_pushed or merge_failed (see scheduler.manager.base)
    merges_to_push: list[str] = field(default_factory=list)
    # builds whose node request the pass submits (it records the request's id)
    node_requests: list[NodeIntent] = field(default_factory=list)
    # node requests to delete after the commit (their builds were cancelled)
    node_deletes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(
            self.merges
            or self.builds
            or self.node_requests
            or self.node_deletes
            or self.cancels
            or self.resumes
            or self.reports
            or self.merges_to_push
        )

    def size(self) -> int:
        """How many intents there are (a step that decided nothing leaves it as it was)."""
        return (
            len(self.merges)
            + len(self.builds)
            + len(self.node_requests)
            + len(self.node_deletes)
            + len(self.cancels)
            + len(self.resumes)
            + len(self.reports)
            + len(self.merges_to_push)
        )
