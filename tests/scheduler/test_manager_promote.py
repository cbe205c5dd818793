"""Promote: named items move to the head of their queue, what must restart restarts."""

from __future__ import annotations

import pytest

from scheduler.manager.settings import PipelineSettings
from scheduler.model.results import Result
from scheduler.wire.events import MalformedEventError, Promote, decode
from tests.scheduler.gate_harness import Gate, change

S = Result.SUCCESS


def all_builds(g: Gate, refs: str) -> list[str]:
    return sorted(b.uuid for r in refs for job in g.item(r).buildset.graph for b in job.builds)


def test_promote_moves_items_to_the_head_in_order_and_restarts_the_queue() -> None:
    g = Gate()
    g.enqueue("A", "B", "C", "D")
    g.merge_all()
    running = all_builds(g, "ABCD")
    g.run(Promote((change("D"), change("C"))))
    assert g.queue() == ["D", "C", "A", "B"]
    assert sorted(g.cancels) == running
    assert [g.merged_on(r) for r in "DCAB"] == [
        ("D",),
        ("D", "C"),
        ("D", "C", "A"),
        ("D", "C", "A", "B"),
    ]
    g.merge_all()
    for ref in "BACD":
        g.finish(ref)
    assert g.reported == [("D", S), ("C", S), ("A", S), ("B", S)]


def test_promoting_the_items_already_at_the_head_restarts_nothing() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.run(Promote((change("A"), change("B"))))
    assert g.queue() == ["A", "B", "C"] and g.cancels == []


def test_promote_keeps_the_items_whose_items_ahead_are_unchanged() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    a_builds, others = all_builds(g, "A"), all_builds(g, "BC")
    g.run(Promote((change("A"), change("C"))))
    assert g.queue() == ["A", "C", "B"]
    assert sorted(g.cancels) == others and g.running("A") == ["unit"]
    assert not set(a_builds) & set(g.cancels)
    assert g.merged_on("C") == ("A", "C") and g.merged_on("B") == ("A", "C", "B")


def test_a_promote_event_is_decoded() -> None:
    payload = {
        "type": "promote",
        "changes": [{"connection": "local", "project": "app", "ref": "B", "branch": ""}],
        "result_id": "r1",
    }
    event = decode(payload)
    assert isinstance(event, Promote) and event.result_id == "r1"
    assert [c.ref for c in event.changes] == ["B"]
    with pytest.raises(MalformedEventError, match="'changes'"):
        decode({"type": "promote", "changes": []})


def test_an_item_being_pushed_stays_at_the_head() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    g.hold_pushes = True
    g.enqueue("A", "B")
    g.merge_all()
    g.finish("A")
    g.run(Promote((change("B"),)))
    assert g.queue() == ["A", "B"] and g.cancels == []
