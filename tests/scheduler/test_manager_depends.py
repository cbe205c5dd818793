"""Dependencies between changes (Depends-On), driven through the gate harness."""

from __future__ import annotations

from scheduler.manager.dependent import DependentManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.change import Change
from scheduler.model.results import Result
from scheduler.wire.events import Enqueue
from tests.scheduler.gate_harness import Gate, change

S, F, E = Result.SUCCESS, Result.FAILURE, Result.ERROR


def needing(ref: str, *needs: Change, project: str = "app") -> Change:
    return Change("local", project, "main", ref, "c1", needs=needs)


def test_check_tests_a_change_with_its_dependencies() -> None:
    g = Gate(manager=IndependentManager, settings=PipelineSettings("check", "independent"))
    g.run(Enqueue(needing("B", change("A"))))
    assert g.merged_on("B") == ("A", "B")  # tested together, the dependency first
    assert [i.change.ref for i in g.state.items.values()] == ["B"]  # only B is an item


def test_the_gate_enqueues_a_dependency_ahead_and_merges_it_first() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    g.run(Enqueue(needing("B", change("A"))))
    assert g.queue() == ["A", "B"]
    assert g.merged_on("B") == ("A", "B")
    g.merge_all()
    g.finish("B")
    g.finish("A")
    assert g.pushed == ["A", "B"]
    assert g.reported == [("A", S), ("B", S)]


def test_a_dependency_already_queued_is_not_enqueued_twice() -> None:
    g = Gate()
    g.enqueue("A")
    g.run(Enqueue(needing("B", change("A"))))
    assert g.queue() == ["A", "B"]


def test_a_change_whose_dependency_fails_is_not_merged() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    g.run(Enqueue(needing("B", change("A"))))
    g.merge_all()
    g.finish("A", result=F)
    g.merge_all()  # B is moved onto the branch tip and merged again, without A
    assert g.pushed == []
    assert g.reported == [("A", F), ("B", E)]
    assert "A was not merged" in g.messages["B"]


def test_a_change_fails_as_soon_as_its_dependency_fails_behind_the_head() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    g.enqueue("X")  # ahead of both: keeps A from the head for a while
    g.run(Enqueue(needing("B", change("A"))))
    assert g.queue() == ["X", "A", "B"]
    g.merge_all()
    g.finish("A", result=F)  # A fails while X is still running
    assert ("B", E) in g.reported  # at once: B is never retested without A
    assert "A was not merged" in g.messages["B"]
    g.finish("X")
    assert g.pushed == ["X"]


def test_a_cycle_is_an_error_unless_the_queue_allows_it() -> None:
    g = Gate()
    g.run(Enqueue(needing("A", needing("B"), change("A"))))
    assert g.reported == [("A", E)]
    assert "Dependency cycle detected and project app" in g.messages["A"]
    assert g.merges == []

    allowed = PipelineSettings("gate", "dependent", allows_cycles=lambda project, branch: True)
    g = Gate(manager=DependentManager, settings=allowed)
    g.run(Enqueue(needing("A", needing("B"), change("A"))))
    assert g.reported == []
    assert g.queue() == ["B", "A"]  # one unit: tests/scheduler/test_manager_cycles.py


def test_a_dependency_in_another_queue_is_an_error() -> None:
    g = Gate()
    g.run(Enqueue(needing("B", change("A", project="lib"))))
    assert g.reported == [("B", E)]
    assert "not in queue app" in g.messages["B"]
