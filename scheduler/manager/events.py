"""Typed pipeline events, decoded from the pipeline's event queues.

A payload is a JSON mapping with a ``type``; :func:`decode` turns it into one
of the classes below or raises :class:`MalformedEventError` naming what is
wrong (the caller logs it with the event's path and acknowledges it, so a bad
event never wedges the queue).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.errors import SluiceError
from scheduler.model.change import Change
from scheduler.model.results import Result


class MalformedEventError(SluiceError):
    """A queued event does not have the shape its type requires."""


@dataclass(frozen=True)
class Enqueue:
    change: Change
    event_id: str = ""
    # management events from the CLI or API: where to record the outcome
    result_id: str = ""


@dataclass(frozen=True)
class Dequeue:
    change: Change
    event_id: str = ""
    result_id: str = ""


@dataclass(frozen=True)
class Promote:
    """Move the items of ``changes`` to the head of their queues, in this order."""

    changes: tuple[Change, ...]
    event_id: str = ""
    result_id: str = ""


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


PipelineEvent = (
    Enqueue | Dequeue | Promote | MergeCompleted | BuildStarted | BuildPaused | BuildCompleted
)


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedEventError(f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _change(data: Mapping[str, Any], keys: tuple[str, ...] = ("branch",)) -> Change:
    raw = data.get("change")
    if not isinstance(raw, Mapping):
        raise MalformedEventError(f"'change' must be a mapping, got {raw!r}")
    for key in ("connection", "project", "ref", *keys):
        _text(raw, key)
    return Change.from_dict(dict(raw))


def _enqueue(data: Mapping[str, Any]) -> PipelineEvent:
    return Enqueue(_change(data), str(data.get("event_id", "")), str(data.get("result_id", "")))


def _dequeue(data: Mapping[str, Any]) -> PipelineEvent:
    # A dequeue may leave the branch empty: any target branch of the ref.
    return Dequeue(
        _change(data, keys=()), str(data.get("event_id", "")), str(data.get("result_id", ""))
    )


def _promote(data: Mapping[str, Any]) -> PipelineEvent:
    raw = data.get("changes")
    if not isinstance(raw, list) or not raw:
        raise MalformedEventError(f"'changes' must be a non-empty list, got {raw!r}")
    # Like a dequeue, a change may leave the branch empty: any target branch of the ref.
    changes = tuple(_change({"change": one}, keys=()) for one in raw)
    return Promote(changes, str(data.get("event_id", "")), str(data.get("result_id", "")))


# Build and merge events are built by the processor from the request events
# of the job request queues, which only name the request (the result is read
# from the queue; see scheduler.processing.pipeline): nothing puts them as such.
_DECODERS: dict[str, Callable[[Mapping[str, Any]], PipelineEvent]] = {
    "enqueue": _enqueue,
    "dequeue": _dequeue,
    "promote": _promote,
}


def decode(payload: Mapping[str, Any]) -> PipelineEvent:
    kind = payload.get("type")
    decoder = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decoder is None:
        raise MalformedEventError(f"unknown event type {kind!r}")
    try:
        return decoder(payload)
    except (TypeError, ValueError, KeyError) as exc:
        raise MalformedEventError(f"{kind} event: {exc}") from None
