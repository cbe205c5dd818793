"""The records of a job request queue: the request and its states.

Plain frozen data shared by the queue (:mod:`scheduler.stores.job_requests`),
its submitters and its workers; no ZooKeeper calls here. The events a
request puts into its result queue and the result it completes with
(``RequestMessage``, ``RequestEvent``, ``JobResult``) are queued events:
:mod:`scheduler.wire.events`.
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
