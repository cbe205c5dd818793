"""The records of a job request queue: states, events, the request and its result.

Plain frozen data shared by the queue (:mod:`scheduler.stores.job_requests`),
its submitters and its workers; no ZooKeeper calls here.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


class RequestState(enum.StrEnum):
    REQUESTED = "REQUESTED"
    HOLD = "HOLD"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"


class RequestEvent(enum.StrEnum):
    """``type`` of the events a queue puts in a request's result queue."""

    STARTED = "request-started"
    PAUSED = "request-paused"
    COMPLETED = "request-completed"


@dataclass(frozen=True)
class JobRequest:
    """A build or merge request. ``version`` is the node version as read (not stored)."""

    uuid: str
    state: RequestState = RequestState.REQUESTED
    precedence: int = 200  # lower runs first
    tenant: str = ""
    pipeline: str = ""
    buildset_uuid: str = ""
    job_name: str = ""
    event_id: str = ""
    # Root of the event queue that gets started/paused/completed events ("" = none).
    result_queue: str = ""
    worker: str = ""
    created: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)
    # the parameters when they are small enough to travel in the request node
    # (the worker that claims it reads them with the request); None: in ``params/``
    params: Mapping[str, Any] | None = None
    version: int = -1

    def to_dict(self) -> dict[str, Any]:
        # Shallow on purpose (dataclasses.asdict deep-copies and is slow on a hot path).
        data = {name: getattr(self, name) for name in _STORED_FIELDS}
        data["state"] = self.state.value
        data["info"] = dict(self.info)
        if self.params is None:
            del data["params"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], version: int = -1) -> JobRequest:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["state"] = RequestState(known.get("state", RequestState.REQUESTED))
        known["version"] = version
        return cls(**known)


_STORED_FIELDS = tuple(f.name for f in fields(JobRequest) if f.name != "version")


@dataclass(frozen=True)
class RequestMessage:
    """The event a request emits into its result queue (``request-started`` ...).

    It names the request; a ``request-completed`` event also carries the
    result when it is small (``outcome``: the marker's ``completed`` and
    ``lost`` and the result, committed in the same transaction as the
    result data), so the scheduler applies it without reading the request
    queue. A large result is read from the queue (``outcome`` is None).
    Decoded by :func:`scheduler.wire.events.decode` like every queued event.
    """

    kind: RequestEvent
    queue: str
    request: str
    buildset: str = ""
    job: str = ""
    worker: str = ""
    outcome: JobResult | None = None
    # when the event happened (a build's start: its start time in the history)
    moment: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "type": self.kind.value,
            "queue": self.queue,
            "request": self.request,
            "buildset": self.buildset,
            "job": self.job,
        }
        if self.worker:
            payload["worker"] = self.worker  # who runs it (build history's executor)
        if self.moment:
            payload["time"] = self.moment
        if self.outcome is not None:
            payload["outcome"] = {
                "result": self.outcome.result,
                "completed": self.outcome.completed,
                "lost": self.outcome.lost,
            }
        return payload


@dataclass(frozen=True)
class JobResult:
    uuid: str
    result: dict[str, Any]
    completed: float
    lost: bool = False
