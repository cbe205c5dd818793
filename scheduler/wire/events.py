"""Every event that moves between Sluice's event queues: frozen dataclasses, one decoder.

An event queue (``scheduler.zk.event_queue``) holds JSON mappings with a
``type``. Whoever puts an event builds one of these classes and puts its
``to_dict()``; whoever reads one calls :func:`decode`, the only place that
turns a queued mapping back into an event. A mapping that fits no class
raises :class:`MalformedEventError` naming what is wrong, and the reader
logs it with the event's path and acknowledges it: a bad event never wedges
a queue.

* ``ref-updated`` and other forge events: :class:`TriggerEvent`, put by
  drivers, read by the connection and tenant hops
  (``scheduler/processing/forwarding.py``);
* ``enqueue``, ``dequeue``, ``promote``: :class:`Enqueue`, :class:`Dequeue`,
  :class:`Promote` (the management events), put by the ``sluice`` CLI, the
  web admin and the tenant hop, read by the pipeline pass;
* ``reconfigure``: :class:`ReconfigureEvent`, put by a pipeline pass or the
  sweep, read by ``sluice.merger.reconfigure``;
* ``request-started``, ``-paused``, ``-completed``, ``-prefailed``
  (:class:`RequestEvent`):
  :class:`RequestMessage`, put by the job request queues
  (:mod:`scheduler.stores.job_requests`, in the transaction that changes
  the request), read by the pipeline pass; a completion carries the
  request's :class:`JobResult` when it is small;
* ``node-request``: :class:`NodeRequestMessage`, put by a launcher (in the
  transaction that fulfils or fails a node request a pipeline job made),
  read by the pipeline pass.

Data only: nothing here does I/O or imports ``scheduler.stores`` (the
stores import these classes to put them). The wire form keeps the keys
events always had, so events queued by an earlier version still decode.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from scheduler.errors import SluiceError
from scheduler.model.change import Change

__all__ = [
    "NODE_REQUEST_EVENT",
    "NODE_REQUEST_OUTCOMES",
    "Dequeue",
    "Enqueue",
    "JobResult",
    "MalformedEventError",
    "NodeRequestMessage",
    "Promote",
    "ReconfigureEvent",
    "RequestEvent",
    "RequestMessage",
    "TriggerEvent",
    "WireEvent",
    "decode",
    "decode_as",
    "decode_management",
]

# The trigger event types of the git driver (Zuul's names); drivers add theirs.
TRIGGER_TYPES = frozenset({"ref-updated", "ref-created", "ref-deleted"})
# Events of a ref that moved (git, GitHub and GitLab pushes): nothing to merge.
REF_UPDATES = frozenset({"ref-updated", "push", "gl_push"})


class MalformedEventError(SluiceError):
    """A queued event does not have the shape its type requires."""


# ----------------------------------------------------------------- management


def _routing(event: Enqueue | Dequeue | Promote) -> dict[str, Any]:
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
        return {"type": "enqueue", "change": self.change.to_dict(), **_routing(self)}


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
        found = {"type": "dequeue", "change": self.change.to_dict(), **_routing(self)}
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
        return {"type": "promote", "changes": changes, **_routing(self)}


# ------------------------------------------------------------- job requests


class RequestEvent(enum.StrEnum):
    """``type`` of the events a job request queue puts in a request's result queue."""

    STARTED = "request-started"
    PAUSED = "request-paused"
    COMPLETED = "request-completed"
    # a line of a build's run output matched its job's failure-output
    PREFAILED = "request-prefailed"


@dataclass(frozen=True)
class JobResult:
    """What a job request completed with: the result, when, and whether its worker was lost.

    Read from the request queue (``JobRequestQueue.get_result``) or carried
    by the ``request-completed`` event (:attr:`RequestMessage.outcome`).
    """

    uuid: str
    result: dict[str, Any]
    completed: float
    lost: bool = False


@dataclass(frozen=True)
class RequestMessage:
    """The event a request emits into its result queue (``request-started`` ...).

    It names the request; a ``request-completed`` event also carries the
    result when it is small (``outcome``: the marker's ``completed`` and
    ``lost`` and the result, committed in the same transaction as the
    result data), so the scheduler applies it without reading the request
    queue. A large result is read from the queue (``outcome`` is None).
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


# ------------------------------------------------------------ node requests

# The event type a fulfilled or failed node request puts into its pipeline's result queue.
NODE_REQUEST_EVENT = "node-request"
# The states such an event reports: the final states of a node request
# (the values of ``scheduler.stores.node_records.FINAL_REQUEST_STATES``).
NODE_REQUEST_OUTCOMES = frozenset({"fulfilled", "failed"})


@dataclass(frozen=True)
class NodeRequestMessage:
    """A node request's outcome as its pipeline reads it (``type: node-request``).

    ``state`` is ``fulfilled`` or ``failed``; ``reason`` says why it failed
    (``NODE_FAILURE: ...``). The nodes themselves are read from the request.
    """

    request: str
    state: str
    buildset: str
    job: str
    reason: str = ""
    nodes: tuple[str, ...] = ()
    time: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": NODE_REQUEST_EVENT,
            "request": self.request,
            "state": self.state,
            "buildset": self.buildset,
            "job": self.job,
            "reason": self.reason,
            "nodes": list(self.nodes),
            "time": self.time,
        }


@dataclass(frozen=True)
class TriggerEvent:
    """Something happened in a repository (a forge's event, normalised).

    ``connection`` and ``event_id`` are set by the connection hop (the
    connection whose queue held it, the id of the queued event); ``extra``
    keeps what a driver adds beyond these fields.
    """

    type: str
    project: str
    connection: str = ""
    branch: str = ""
    ref: str = ""
    oldrev: str = ""
    newrev: str = ""
    deleted: bool = False
    event_id: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {**self.extra, "type": self.type, "project": self.project}
        for key in ("connection", "branch", "ref", "oldrev", "newrev", "event_id"):
            value = getattr(self, key)
            if value:
                data[key] = value
        if self.deleted:
            data["deleted"] = True
        return data

    def change(self) -> Change:
        """The change it enqueues: a branch update, or a proposed ref (with what it needs)."""
        needs = tuple(
            Change.from_dict({**dict(n), "connection": n.get("connection") or self.connection})
            for n in self.extra.get("needs") or ()
            if isinstance(n, Mapping)
        )
        return Change(
            connection=self.connection,
            project=self.project,
            branch=self.branch,
            ref=self.ref or self.branch,
            commit=self.newrev,
            is_branch_update=self.type in REF_UPDATES,
            needs=needs,
        )


@dataclass(frozen=True)
class ReconfigureEvent:
    """A tenant's layout should be rebuilt (``why``: what asked)."""

    why: str
    time: float

    def to_dict(self) -> dict[str, Any]:
        return {"type": "reconfigure", "why": self.why, "time": self.time}


WireEvent = (
    TriggerEvent
    | Enqueue
    | Dequeue
    | Promote
    | ReconfigureEvent
    | RequestMessage
    | NodeRequestMessage
)


def _text(data: Mapping[str, Any], key: str, *, required: bool = True) -> str:
    value = data.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str) or (required and not value):
        raise MalformedEventError(f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _change(raw: object, keys: tuple[str, ...] = ("branch",)) -> Change:
    if not isinstance(raw, Mapping):
        raise MalformedEventError(f"'change' must be a mapping, got {raw!r}")
    for key in ("connection", "project", "ref", *keys):
        _text(raw, key)
    return Change.from_dict(dict(raw))


def _ids(data: Mapping[str, Any]) -> dict[str, str]:
    return {k: _text(data, k, required=False) for k in ("event_id", "result_id", "pipeline")}


def _enqueue(data: Mapping[str, Any]) -> WireEvent:
    return Enqueue(_change(data.get("change")), **_ids(data))


def _dequeue(data: Mapping[str, Any]) -> WireEvent:
    # A dequeue may leave the branch empty: any target branch of the ref.
    current = data.get("current", "")
    if not isinstance(current, str):
        raise MalformedEventError(f"dequeue: current must be a commit, got {current!r}")
    return Dequeue(_change(data.get("change"), keys=()), current=current, **_ids(data))


def _promote(data: Mapping[str, Any]) -> WireEvent:
    raw = data.get("changes")
    if not isinstance(raw, list) or not raw:
        raise MalformedEventError(f"'changes' must be a non-empty list, got {raw!r}")
    # Like a dequeue, a change may leave the branch empty: any target branch of the ref.
    return Promote(tuple(_change(one, keys=()) for one in raw), **_ids(data))


def _reconfigure(data: Mapping[str, Any]) -> WireEvent:
    return ReconfigureEvent(_text(data, "why", required=False), _moment(data.get("time", 0.0)))


def _request(data: Mapping[str, Any]) -> WireEvent:
    request = _text(data, "request")
    return RequestMessage(
        RequestEvent(data["type"]),
        _text(data, "queue"),
        request,
        _text(data, "buildset", required=False),
        _text(data, "job", required=False),
        _text(data, "worker", required=False),
        _outcome(request, data.get("outcome")),
        _moment(data.get("time", 0.0)),
    )


def _node_request(data: Mapping[str, Any]) -> WireEvent:
    state = _text(data, "state")
    if state not in NODE_REQUEST_OUTCOMES:
        raise MalformedEventError(f"'state' must be fulfilled or failed, got {state!r}")
    nodes = data.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        raise MalformedEventError(f"'nodes' must be a list of node ids, got {nodes!r}")
    return NodeRequestMessage(
        _text(data, "request"),
        state,
        _text(data, "buildset"),
        _text(data, "job"),
        _text(data, "reason", required=False),
        tuple(nodes),
        _moment(data.get("time", 0.0)),
    )


def _moment(raw: object) -> float:
    if not isinstance(raw, int | float) or isinstance(raw, bool):
        raise MalformedEventError(f"'time' must be a number, got {raw!r}")
    return float(raw)


def _outcome(request: str, raw: object) -> JobResult | None:
    """The result a completion event carries (None: read it from the request queue)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("result"), Mapping):
        raise MalformedEventError(f"'outcome' must be a mapping with a result, got {raw!r}")
    completed = raw.get("completed")
    if not isinstance(completed, int | float) or isinstance(completed, bool):
        raise MalformedEventError(f"'outcome.completed' must be a number, got {completed!r}")
    return JobResult(request, dict(raw["result"]), float(completed), bool(raw.get("lost")))


_TRIGGER_KEYS = ("type", "event", "project", "connection", "branch", "ref", "oldrev", "newrev")


def _trigger(data: Mapping[str, Any]) -> WireEvent:
    known = {*_TRIGGER_KEYS, "deleted", "event_id"}
    return TriggerEvent(
        type=_text(data, "type"),
        project=_text(data, "project"),
        connection=_text(data, "connection", required=False),
        branch=_text(data, "branch", required=False),
        ref=_text(data, "ref", required=False),
        oldrev=_text(data, "oldrev", required=False),
        newrev=_text(data, "newrev", required=False),
        deleted=bool(data.get("deleted", False)),
        event_id=_text(data, "event_id", required=False),
        extra={k: v for k, v in data.items() if k not in known},
    )


_DECODERS: dict[str, Callable[[Mapping[str, Any]], WireEvent]] = {
    "enqueue": _enqueue,
    "dequeue": _dequeue,
    "promote": _promote,
    "reconfigure": _reconfigure,
    NODE_REQUEST_EVENT: _node_request,
    **{kind.value: _request for kind in RequestEvent},
}


def decode(payload: Mapping[str, Any]) -> WireEvent:
    """The event a queued mapping holds; :class:`MalformedEventError` if none fits."""
    kind = payload.get("type")
    if kind is None and isinstance(payload.get("event"), str):
        payload = {**payload, "type": payload["event"]}  # the git driver's older spelling
        kind = payload["type"]
    if not isinstance(kind, str) or not kind:
        raise MalformedEventError(f"event without a type: {dict(payload)!r}")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        if kind in TRIGGER_TYPES or "project" in payload:
            decoder = _trigger
        else:
            raise MalformedEventError(f"unknown event type {kind!r}")
    try:
        return decoder(payload)
    except (TypeError, ValueError, KeyError) as exc:
        raise MalformedEventError(f"{kind} event: {exc}") from None


E = TypeVar("E")


def decode_as(payload: Mapping[str, Any], kind: type[E]) -> E:
    """:func:`decode`, and the event must be a ``kind`` (else MalformedEventError)."""
    event = decode(payload)
    if not isinstance(event, kind):
        raise MalformedEventError(f"expected a {kind.__name__}, got a {type(event).__name__}")
    return event


def decode_management(payload: Mapping[str, Any]) -> Enqueue | Dequeue | Promote:
    """:func:`decode`, and the event must be a management event."""
    event = decode(payload)
    if not isinstance(event, Enqueue | Dequeue | Promote):
        raise MalformedEventError(f"expected a management event, got a {type(event).__name__}")
    return event
