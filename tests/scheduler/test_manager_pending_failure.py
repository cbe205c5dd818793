"""pending-failure-depth: a failure is judged by the items behind it before it resets them."""

from __future__ import annotations

from scheduler.manager.settings import PipelineSettings
from scheduler.model.results import Result
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE


def judging_gate(depth: int = 2) -> Gate:
    settings = PipelineSettings(
        "gate",
        "dependent",
        merge_on_success=True,
        pending_failure_for=lambda project, branch: depth,
    )
    return Gate(settings=settings)


def test_a_flaky_failure_merges_when_an_item_behind_it_passes() -> None:
    g = judging_gate()
    a, b, c = g.enqueue("A", "B", "C")
    g.merge_all()
    g.finish("A", result=F)
    # A waits: B and C stay on top of it, nothing is reset
    assert g.reported == [] and b.ahead == a.uuid and c.ahead == b.uuid
    assert a.result is F and a.verdict == ""
    g.finish("B")
    assert a.verdict == "flaky" and a.result is S
    assert "judged flaky: B passed on top of it" in a.message
    g.finish("C")
    assert g.reported == [("A", S), ("B", S), ("C", S)]
    assert g.pushed == ["A", "B", "C"]
    assert len(g.merges) == 3  # nobody was merged again


def test_a_failure_the_items_behind_repeat_is_confirmed_and_resets_them() -> None:
    g = judging_gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.finish("A", result=F)
    g.finish("C", result=F)
    assert g.reported == []
    g.finish("B", result=F)
    assert g.reported == [("A", F)] and g.item("B").ahead is None
    assert g.merged_on("B") == ("B",) and g.merged_on("C") == ("B", "C")
    g.merge_all()
    g.finish("B")
    g.finish("C")
    assert g.reported == [("A", F), ("B", S), ("C", S)]


def test_with_nothing_behind_it_a_failure_is_confirmed_at_once() -> None:
    g = judging_gate()
    g.enqueue("A")
    g.merge_all()
    g.finish("A", result=F)
    assert g.reported == [("A", F)]


def test_only_the_nearest_k_items_count() -> None:
    g = judging_gate(depth=1)
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.finish("A", result=F)
    g.finish("C")  # beyond the depth: it does not clear A
    assert g.reported == []
    g.finish("B", result=F)
    assert g.reported == [("A", F)]
