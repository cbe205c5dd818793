"""The merge action of a gate: a passed head item is pushed before it is reported."""

from __future__ import annotations

from scheduler.manager.settings import PipelineSettings
from scheduler.model.item import PushState, QueueItem
from scheduler.model.results import Result
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE


def merging_gate() -> Gate:
    return Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))


def test_a_head_item_stays_until_the_push_is_confirmed() -> None:
    g = merging_gate()
    g.hold_pushes = True
    (a,) = g.enqueue("A")
    g.merge_all()
    g.finish("A")
    assert g.reported == [] and a.push is PushState.PENDING
    g.manager.advance(g.state)
    assert g.manager.intents.merges_to_push == [a.uuid]  # asked again every pass
    g.manager.merge_pushed(g.state, a.uuid)
    g.run()
    assert g.reported == [("A", S)] and g.queue() == []


def test_a_push_failure_fails_the_item_and_resets_the_queue_behind_it() -> None:
    def answer(item: QueueItem) -> str | None:
        return "main moved outside Sluice" if item.change.ref == "A" else None

    g = merging_gate()
    g.push_answer = answer
    a, _, _ = g.enqueue("A", "B", "C")
    g.merge_all()
    g.finish("B")
    g.finish("C")
    g.finish("A")
    assert g.reported == [("A", F)]
    assert a.message == "merge failed: main moved outside Sluice"
    assert g.merged_on("B") == ("B",) and g.merged_on("C") == ("B", "C")
    assert g.state.queues["app"].window == 10  # a failure at the head
    g.merge_all()
    g.finish("C")
    g.finish("B")
    assert g.pushed == ["B", "C"]
    assert g.reported == [("A", F), ("B", S), ("C", S)]


def test_without_a_merge_reporter_nothing_is_pushed() -> None:
    g = Gate()
    g.enqueue("A")
    g.merge_all()
    g.finish("A")
    assert g.pushed == [] and g.reported == [("A", S)]


def test_answers_for_items_not_waiting_for_a_push_change_nothing() -> None:
    g = merging_gate()
    (a,) = g.enqueue("A")
    g.manager.merge_failed(g.state, a.uuid, "late")
    g.manager.merge_pushed(g.state, a.uuid)
    assert a.result is None and a.push is PushState.NONE
