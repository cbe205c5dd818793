"""The dependent manager's rules, each a behaviour of Zuul's gate, driven directly."""

from __future__ import annotations

from scheduler.manager.dependent import DependentManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.build import JobInfo
from scheduler.model.results import Result
from scheduler.wire.events import Dequeue
from tests.scheduler.gate_harness import Gate, change

S, F = Result.SUCCESS, Result.FAILURE


def build_uuids(gate: Gate, ref: str) -> list[str]:
    item = gate.item(ref)
    return [b.uuid for job in item.buildset.graph for b in job.builds]


def test_each_item_is_merged_on_every_item_ahead() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    assert [g.merged_on(r) for r in "ABC"] == [("A",), ("A", "B"), ("A", "B", "C")]
    g.merge_all()
    assert [g.running(r) for r in "ABC"] == [["unit"]] * 3
    g.finish("C")
    g.finish("B")
    assert g.reported == []  # passed, but not at the head yet
    g.finish("A")
    assert g.reported == [("A", S), ("B", S), ("C", S)]
    assert g.queue() == []


def test_gate_of_three_where_the_first_fails() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    aborted = build_uuids(g, "B") + build_uuids(g, "C")
    g.finish("A", result=F)
    assert g.reported == [("A", F)]
    assert sorted(g.cancels) == sorted(aborted)
    # B is tested on the branch tip, C on B
    assert g.merged_on("B") == ("B",) and g.merged_on("C") == ("B", "C")
    g.merge_all()
    g.finish("B")
    g.finish("C")
    assert g.reported == [("A", F), ("B", S), ("C", S)]


def test_gate_of_three_where_the_middle_fails() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    old_c = build_uuids(g, "C")
    g.finish("B", result=F)
    # B stays in place (not at the head); C is retested without B
    assert g.queue() == ["A", "B", "C"] and g.reported == []
    assert g.cancels == old_c
    assert g.merged_on("C") == ("A", "C")
    g.merge_all()
    g.finish("C")
    assert g.reported == []  # C waits for A
    g.finish("A")
    assert g.reported == [("A", S), ("B", F), ("C", S)]


def test_two_failures_in_one_gate() -> None:
    g = Gate()
    g.enqueue("A", "B", "C", "D")
    g.merge_all()
    g.finish("B", result=F)
    assert g.merged_on("C") == ("A", "C") and g.merged_on("D") == ("A", "C", "D")
    g.merge_all()
    g.finish("C", result=F)
    assert g.merged_on("D") == ("A", "D")
    g.merge_all()
    g.finish("D")
    g.finish("A")
    assert g.reported == [("A", S), ("B", F), ("C", F), ("D", S)]


def test_a_failing_item_is_retested_when_the_item_ahead_fails_too() -> None:
    g = Gate()
    g.enqueue("A", "B")
    g.merge_all()
    g.finish("B", result=F)
    assert g.item("B").result is F and g.reported == []
    g.finish("A", result=F)
    # B failed on top of A; without A it may pass
    assert g.reported == [("A", F)]
    assert g.item("B").result is None and g.merged_on("B") == ("B",)
    g.merge_all()
    g.finish("B")
    assert g.reported == [("A", F), ("B", S)]


def test_a_change_ahead_dequeued_by_hand_resets_the_items_behind() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    old_b, old_c = build_uuids(g, "B"), build_uuids(g, "C")
    g.run(Dequeue(change("B")))
    assert g.reported == [("B", Result.DEQUEUED)]
    assert sorted(g.cancels) == sorted(old_b + old_c)
    assert g.merged_on("C") == ("A", "C")
    g.merge_all()
    g.finish("A")
    g.finish("C")
    assert g.reported == [("B", Result.DEQUEUED), ("A", S), ("C", S)]


def test_dequeuing_the_head_retests_the_rest_on_the_branch_tip() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.run(Dequeue(change("A")))
    assert g.merged_on("B") == ("B",) and g.merged_on("C") == ("B", "C")


def test_a_merge_conflict_ahead_resets_the_items_behind() -> None:
    g = Gate()
    g.enqueue("A", "B")
    stale_merge = g.merge_event(g.item("B"))
    g.run(g.merge_event(g.item("A"), ok=False))
    assert g.reported == [("A", Result.MERGE_CONFLICT)]
    assert g.merged_on("B") == ("B",)
    g.run(stale_merge)  # the merge of B on A answers late: ignored
    assert g.item("B").buildset.jobs is None


def test_stale_results_after_a_reset_are_ignored() -> None:
    g = Gate()
    g.enqueue("A", "B")
    g.merge_all()
    stale = g.build_event(g.item("B"), "unit", S)
    g.finish("A", result=F)
    g.run(stale)
    assert g.item("B").result is None and g.item("B").buildset.jobs is None
    g.merge_all()
    g.run(stale)
    assert g.running("B") == ["unit"] and g.item("B").result is None
    g.finish("B")
    assert g.reported == [("A", F), ("B", S)]


def test_non_voting_failure_in_the_gate_changes_nothing() -> None:
    g = Gate([JobInfo("unit"), JobInfo("experimental", voting=False)])
    g.enqueue("A", "B")
    g.merge_all()
    g.finish("A", "experimental", F)
    assert g.cancels == []
    g.finish("A")
    g.finish("B", "experimental", F)
    g.finish("B")
    assert g.reported == [("A", S), ("B", S)]


def test_fail_fast_cancels_the_rest_and_fails_the_item_at_once() -> None:
    jobs = [JobInfo("unit"), JobInfo("lint"), JobInfo("slow")]
    g = Gate(jobs, fail_fast=True)
    g.enqueue("A", "B")
    g.merge_all()
    a = g.item("A")
    a_rest = build_uuids(g, "A")[1:]  # lint and slow
    b_all = build_uuids(g, "B")
    g.finish("A", "unit", F)
    assert g.reported == [("A", F)]
    assert a.message == "failed: unit (fail-fast: remaining builds cancelled)"
    assert sorted(g.cancels) == sorted(a_rest + b_all)
    assert g.merged_on("B") == ("B",)


def test_fail_fast_behind_the_head_resets_the_items_behind_at_once() -> None:
    g = Gate([JobInfo("unit"), JobInfo("slow")], fail_fast=True)
    g.enqueue("A", "B", "C")
    g.merge_all()
    g.finish("B", "unit", F)
    assert g.item("B").result is F and g.running("B") == []
    assert g.merged_on("C") == ("A", "C") and g.reported == []


def test_without_fail_fast_a_failing_item_waits_for_its_jobs() -> None:
    g = Gate([JobInfo("unit"), JobInfo("slow")])
    g.enqueue("A")
    g.merge_all()
    g.finish("A", "unit", F)
    assert g.reported == [] and g.running("A") == ["slow"]
    g.finish("A", "slow")
    assert g.reported == [("A", F)]


def test_fail_fast_in_an_independent_pipeline() -> None:
    g = Gate([JobInfo("unit"), JobInfo("slow")], manager=IndependentManager, fail_fast=True)
    g.enqueue("A")
    g.merge_all()
    item = g.item("A")
    g.finish("A", "unit", F)
    assert g.reported == [("A", F)]
    assert "fail-fast" in item.message and item.message.startswith("failed: unit")


def test_a_semaphore_of_one_across_two_gate_items() -> None:
    g = Gate([JobInfo("deploy", semaphores=("prod",))], semaphores={"prod": 1})
    g.enqueue("A", "B")
    g.merge_all()
    assert [b.item for b in g.builds] == [g.item("A").uuid]
    b_jobs = g.item("B").buildset.jobs
    assert b_jobs is not None and b_jobs["deploy"].waiting_for_semaphore == "prod"
    g.finish("A", "deploy")
    assert [b.item for b in g.builds][-1] == g.item("B").uuid
    g.finish("B", "deploy")
    assert g.reported == [("A", S), ("B", S)] and g.ledger.peak["prod"] == 1


def test_a_reset_releases_the_semaphores_of_the_old_buildset() -> None:
    g = Gate([JobInfo("deploy", semaphores=("prod",))], semaphores={"prod": 1})
    g.enqueue("A", "B")
    g.merge_all()
    g.run(Dequeue(change("A")))
    assert not g.ledger.holders["prod"]
    g.merge_all()
    assert g.running("B") == ["deploy"]


def test_an_item_moved_to_the_branch_tip_does_not_wait_for_a_failing_item_still_running() -> None:
    # Zuul: the failing item will never merge, so the item behind it is at the head.
    g = Gate([JobInfo("unit"), JobInfo("slow")])
    g.enqueue("A", "B")
    g.merge_all()
    g.finish("A", "unit", F)
    assert g.merged_on("B") == ("B",)
    g.merge_all()
    g.finish("B", "unit")
    g.finish("B", "slow")
    assert g.reported == [("B", S)] and g.queue() == ["A"]
    g.finish("A", "slow")
    assert g.reported == [("B", S), ("A", F)]


def test_a_new_patchset_or_target_branch_takes_old_versions_out() -> None:
    """The forge says a change moved: its old version leaves; items behind are retested."""
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    old_c = build_uuids(g, "C")
    # B force-pushed during the gate (a synchronize): B leaves, C is tested without it
    g.run(Dequeue(change("B"), current="c2"))
    assert g.queue() == ["A", "C"] and g.reported == [("B", Result.DEQUEUED)]
    assert "new patchset (c2)" in g.messages["B"]
    assert set(old_c) <= set(g.cancels)
    assert g.merged_on("C") == ("A", "C")
    # the forge repeats what it said, and names A's current commit: nothing moves
    g.run(Dequeue(change("A"), current="c1"))
    assert g.queue() == ["A", "C"]
    # C retargeted to another branch: it leaves whatever its commit
    g.run(Dequeue(change("C", branch="stable"), current="c1"))
    assert g.queue() == ["A"] and g.reported[-1] == ("C", Result.DEQUEUED)
    assert "target branch changed from main to stable" in g.messages["C"]


def test_old_versions_stay_without_dequeue_on_new_patchset() -> None:
    settings = PipelineSettings("gate", DependentManager.kind, dequeue_on_new_patchset=False)
    g = Gate(settings=settings)
    g.enqueue("A")
    g.run(Dequeue(change("A"), current="c2"))
    assert g.queue() == ["A"] and g.reported == []
