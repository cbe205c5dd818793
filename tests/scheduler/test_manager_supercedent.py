"""The supercedent manager: per project-branch-ref, the running item and the newest one."""

from __future__ import annotations

from scheduler.manager.settings import PipelineSettings
from scheduler.manager.supercedent import SupercedentManager
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.wire.events import Enqueue
from tests.scheduler.gate_harness import Gate

S = Result.SUCCESS


def update(commit: str, ref: str = "refs/heads/main") -> Change:
    return Change("local", "app", "main", ref, commit, is_branch_update=True)


def promote() -> Gate:
    settings = PipelineSettings("promote", "supercedent", dequeue_on_new_patchset=True)
    return Gate(manager=SupercedentManager, settings=settings)


def by_commit(g: Gate, commit: str) -> QueueItem:
    (found,) = [i for i in g.state.items.values() if i.change.commit == commit]
    return found


def test_only_the_newest_item_of_a_ref_runs_next() -> None:
    g = promote()
    g.run(Enqueue(update("c1")), Enqueue(update("c2")))
    first = by_commit(g, "c1")
    assert [m.changes[0].commit for m in g.merges] == ["c1"]
    g.run(Enqueue(update("c3")))
    assert g.reported == [("refs/heads/main", Result.DEQUEUED)]  # c2 superseded
    assert [i.change.commit for i in g.state.items.values()] == ["c1", "c3"]
    g.merge_all()
    assert g.cancels == []  # the running item is not interrupted
    g.run(g.build_event(first, "unit", S))
    assert [m.changes[0].commit for m in g.merges] == ["c1", "c3"]
    g.merge_all()
    g.run(g.build_event(by_commit(g, "c3"), "unit", S))
    assert [r for _, r in g.reported] == [Result.DEQUEUED, S, S]
    assert g.state.queues == {}  # a queue per ref leaves with its last item


def test_different_refs_run_side_by_side() -> None:
    g = promote()
    g.run(Enqueue(update("c1")), Enqueue(update("t1", ref="refs/tags/v1")))
    assert sorted(m.changes[0].commit for m in g.merges) == ["c1", "t1"]


def test_a_new_patchset_of_a_change_still_dequeues_the_running_item() -> None:
    g = promote()
    g.run(Enqueue(Change("local", "app", "main", "feature", "p1")))
    g.merge_all()
    g.run(Enqueue(Change("local", "app", "main", "feature", "p2")))
    assert g.reported == [("feature", Result.DEQUEUED)] and len(g.cancels) == 1
    assert [m.changes[0].commit for m in g.merges] == ["p1", "p2"]
