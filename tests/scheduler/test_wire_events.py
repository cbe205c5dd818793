"""Every queued event: a frozen dataclass, its wire form, and the one decoder."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.model.change import Change
from scheduler.wire.events import (
    Dequeue,
    Enqueue,
    MalformedEventError,
    NodeRequestMessage,
    Promote,
    ReconfigureEvent,
    RequestEvent,
    RequestMessage,
    TriggerEvent,
    WireEvent,
    decode,
    decode_as,
    decode_management,
)

CHANGE = Change("git", "app", "main", "refs/changes/1", "c" * 40)

EVENTS: list[WireEvent] = [
    TriggerEvent("ref-updated", "app", "git", "main", "refs/heads/main", "a" * 40, "b" * 40),
    TriggerEvent("ref-deleted", "app", deleted=True, event_id="e1", extra={"sender": "x"}),
    Enqueue(CHANGE),
    Enqueue(CHANGE, event_id="e2", result_id="r1", pipeline="check"),
    Dequeue(Change("git", "app", "", "refs/changes/1"), result_id="r2", pipeline="gate"),
    Promote((CHANGE, Change("git", "app", "", "refs/changes/2")), pipeline="gate"),
    ReconfigureEvent("config change merged", 1700000000.5),
    RequestMessage(RequestEvent.STARTED, "/executor/unzoned", "u1", "b1", "unit", "w1"),
    RequestMessage(RequestEvent.COMPLETED, "/merger", "u2", "b2", "u2"),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_event_survives_its_wire_form(event: WireEvent) -> None:
    assert decode(event.to_dict()) == event


def test_events_queued_by_an_earlier_version_decode() -> None:
    # the key layouts events always had
    old_enqueue = {"type": "enqueue", "change": CHANGE.to_dict(), "pipeline": "check"}
    assert decode(old_enqueue) == Enqueue(CHANGE, pipeline="check")
    git = {"event": "ref-updated", "project": "app", "branch": "main", "newrev": "f" * 40}
    trigger = decode_as(git, TriggerEvent)
    assert (trigger.type, trigger.branch) == ("ref-updated", "main")
    assert trigger.change() == Change("", "app", "main", "main", "f" * 40, True)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "without a type"),
        ({"type": "nope"}, "unknown event type 'nope'"),
        ({"type": "enqueue"}, "'change' must be a mapping"),
        ({"type": "enqueue", "change": {"project": "p"}}, "'connection' must be"),
        ({"type": "promote", "changes": []}, "'changes' must be a non-empty list"),
        ({"type": "request-completed", "request": "u"}, "'queue' must be"),
        ({"type": "reconfigure", "time": "soon"}, "'time' must be a number"),
        ({"type": "ref-updated"}, "'project' must be"),
        ({"type": "ref-updated", "project": 3}, "'project' must be"),
        ({"type": "build-completed", "build": "b"}, "unknown event type 'build-completed'"),
        ({"type": "node-request", "request": "100-1", "state": "pending"}, "'state' must be"),
        ({"type": "node-request", "request": "100-1", "state": "failed"}, "'buildset' must be"),
        (
            {
                "type": "node-request",
                "request": "r",
                "state": "fulfilled",
                "buildset": "b",
                "job": "j",
                "nodes": [3],
            },
            "'nodes' must be a list of node ids",
        ),
    ],
)
def test_malformed_events_say_what_is_wrong(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(MalformedEventError, match=message):
        decode(payload)


def test_a_reader_names_what_it_expects() -> None:
    with pytest.raises(MalformedEventError, match="expected a management event"):
        decode_management(ReconfigureEvent("x", 1.0).to_dict())
    with pytest.raises(MalformedEventError, match="expected a TriggerEvent, got a Enqueue"):
        decode_as(Enqueue(CHANGE).to_dict(), TriggerEvent)


def test_a_node_request_outcome_round_trips() -> None:
    message = NodeRequestMessage(
        "100-0000000004", "failed", "bs", "job", "NODE_FAILURE: no provider", (), 12.5
    )
    assert decode(message.to_dict()) == message
    fulfilled = NodeRequestMessage("100-5", "fulfilled", "bs", "job", nodes=("0000000001",))
    assert decode(fulfilled.to_dict()) == fulfilled
