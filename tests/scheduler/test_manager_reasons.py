"""Why an item left and what a reset cost, recorded by the managers (no services)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.drivers.reporter import summary
from scheduler.manager import events as ev
from scheduler.manager.retiring import RetiringManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model import reasons
from scheduler.model.build import JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.reasons import Waste
from scheduler.model.results import Result
from scheduler.model.tally import PassTally
from scheduler.views.status import item_status, pipeline_status, render_text
from scheduler.wire.events import Dequeue, Enqueue
from tests.scheduler.gate_harness import Gate, change

S, F = Result.SUCCESS, Result.FAILURE


def start_all(g: Gate, refs: str, at: float) -> None:
    """Every current build of ``refs`` starts at ``at``."""
    events = []
    for ref in refs:
        item = g.item(ref)
        for job in item.buildset.graph:
            assert job.current is not None
            events.append(
                ev.BuildStarted(job.current.uuid, item.uuid, item.buildset.uuid, job.name, at)
            )
    g.run(*events)


def end(g: Gate, ref: str, result: Result, start: float, at: float) -> None:
    g.now = at
    item = g.item(ref)
    event = g.build_event(item, "unit", result)
    g.run(
        ev.BuildCompleted(
            event.build, event.item, event.buildset, "unit", result, start_time=start, end_time=at
        )
    )


def gate_of_three_where_the_first_fails() -> tuple[Gate, PassTally]:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    start_all(g, "ABC", at=1000.0)
    end(g, "B", S, start=1000.0, at=1100.0)  # B passed on A: thrown away below
    g.manager.tally.take()
    end(g, "A", F, start=1000.0, at=1200.0)  # C still running since 1000
    return g, g.manager.tally.take()


def test_the_failure_says_which_job_failed_and_what_it_cost() -> None:
    g, _ = gate_of_three_where_the_first_fails()
    assert g.reported == [("A", F)]
    a = g.reported_items["A"]
    assert a.reason == reasons.LeaveReason(reasons.FAILED, "failed: unit", ("unit",))
    assert a.reason.verdict is None
    # B's finished build (100 s) and C's running one (200 s) were thrown away
    assert a.reset_cost == Waste(resets=2, builds=2, ci_seconds=300.0)


def test_the_items_behind_record_their_reset_and_its_cause() -> None:
    g, _ = gate_of_three_where_the_first_fails()
    a = g.reported_items["A"]
    b, c = g.item("B"), g.item("C")
    assert b.resets.total == Waste(1, 1, 100.0)
    assert c.resets.total == Waste(1, 1, 200.0)
    for behind in (b, c):
        cause = behind.resets.cause
        assert cause is not None
        assert (cause.item, cause.ref, cause.kind) == (a.uuid, "A", reasons.FAILED)
        assert cause.message == "failed: unit"
        assert behind.reason is None and behind.result is None
    # retested, then merged: the history stays with the report
    g.merge_all()
    g.finish("B")
    g.finish("C")
    assert g.reported == [("A", F), ("B", S), ("C", S)]
    assert g.reported_items["C"].resets.total == Waste(1, 1, 200.0)
    assert g.reported_items["C"].reason is None


def test_the_pass_tallies_resets_dequeues_and_time_in_queue() -> None:
    _, tally = gate_of_three_where_the_first_fails()
    assert tally.resets == {"app": Waste(2, 2, 300.0)}
    assert tally.dequeues == {reasons.FAILED: 1}
    assert tally.time_in_queue == {"app": [200.0]}  # A: enqueued at 1000, reported at 1200


def test_the_reset_history_survives_the_item_document() -> None:
    g, _ = gate_of_three_where_the_first_fails()
    b = g.item("B")
    copy = QueueItem.from_dict(b.to_dict(), b.buildset)
    assert copy == b
    old = {k: v for k, v in b.to_dict().items() if k not in ("reason", "resets", "reset_cost")}
    before = QueueItem.from_dict(old, b.buildset)
    assert before.reason is None and before.resets.total == Waste() and not before.reset_cost


def test_an_operator_dequeue_is_the_reason_and_the_cause_of_the_resets_behind() -> None:
    g = Gate()
    g.enqueue("A", "B", "C")
    g.merge_all()
    start_all(g, "ABC", at=1000.0)
    g.now = 1030.0
    g.run(Dequeue(change("B")))
    assert g.reported == [("B", Result.DEQUEUED)]
    b = g.reported_items["B"]
    assert b.reason is not None and b.reason.kind == reasons.OPERATOR
    assert b.reset_cost == Waste(1, 1, 30.0)
    cause = g.item("C").resets.cause
    assert cause is not None and (cause.ref, cause.kind) == ("B", reasons.OPERATOR)
    assert g.item("A").resets.total == Waste()  # ahead of B: untouched


def test_a_new_patchset_supersedes() -> None:
    g = Gate()
    g.enqueue("A")
    g.run(Enqueue(change("A", commit="c2")))
    assert g.reported == [("A", Result.DEQUEUED)]
    reason = g.reported_items["A"].reason
    assert reason is not None and reason.kind == reasons.SUPERSEDED


def test_a_merge_conflict() -> None:
    g = Gate()
    g.enqueue("A")
    g.run(g.merge_event(g.item("A"), ok=False))
    reason = g.reported_items["A"].reason
    assert reason == reasons.LeaveReason(reasons.MERGE_CONFLICT, "conflict")


def test_no_jobs_leaves_silently_with_its_reason_counted() -> None:
    g = Gate(jobs=())
    g.enqueue("A")
    g.merge_all()
    assert g.reported == [] and not g.state.items
    assert g.manager.tally.take().dequeues == {reasons.NO_JOBS: 1}


def test_a_refused_push_fails_the_item_and_resets_the_one_behind() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    g.push_answer = lambda item: "the branch moved" if item.change.ref == "A" else None
    g.enqueue("A", "B")
    g.merge_all()
    g.finish("B")
    g.finish("A")
    a = g.reported_items["A"]
    assert a.reason == reasons.LeaveReason(reasons.PUSH_FAILED, "merge failed: the branch moved")
    assert a.reset_cost.resets == 1
    cause = g.item("B").resets.cause
    assert cause is not None and cause.kind == reasons.PUSH_FAILED


def test_a_change_whose_dependency_failed() -> None:
    g = Gate()
    g.enqueue("A")
    g.run(Enqueue(replace(change("B"), needs=(change("A"),))))
    g.merge_all()
    g.finish("A", result=F)
    reasons_by_ref = {ref: item.reason for ref, item in g.reported_items.items()}
    b = reasons_by_ref["B"]
    assert b is not None and b.kind == reasons.DEPENDENCY_FAILED


def test_a_removed_pipeline_dequeues_with_its_reason() -> None:
    g = Gate()
    g.enqueue("A")
    retiring = RetiringManager(PipelineSettings("gate"), g.manager.layouts, g.ledger)
    retiring.advance(g.state)
    (uuid,) = retiring.intents.reports
    reason = g.state.items[uuid].reason
    assert reason is not None and reason.kind == reasons.PIPELINE_REMOVED


def test_fail_fast_names_the_failed_jobs() -> None:
    g = Gate(jobs=(JobInfo("unit"), JobInfo("lint")), fail_fast=True)
    g.enqueue("A")
    g.merge_all()
    g.finish("A", job="lint", result=F)
    reason = g.reported_items["A"].reason
    assert reason is not None and reason.kind == reasons.FAILED and reason.jobs == ("lint",)


def test_the_report_text_says_why_and_what_the_failure_cost() -> None:
    g, _ = gate_of_three_where_the_first_fails()
    text = summary(g.reported_items["A"], "t", "gate")
    assert "Reason: failed" in text
    assert "This failure reset 2 items behind it: 2 builds, 300 CI seconds thrown away." in text
    g.merge_all()
    g.finish("B")
    text = summary(g.reported_items["B"], "t", "gate")
    assert (
        "It was reset once (1 build, 100 CI seconds thrown away); the last by A (failed)." in text
    )


def test_the_report_text_of_an_operator_dequeue() -> None:
    g = Gate()
    g.enqueue("A")
    g.run(Dequeue(change("A")))
    text = summary(g.reported_items["A"], "t", "gate")
    assert "dequeued by request" in text and "Reason: operator" in text


def test_the_status_shows_the_reasons_and_the_resets() -> None:
    g = Gate()
    g.enqueue("A", "B")
    g.merge_all()
    start_all(g, "AB", at=1000.0)
    end(g, "B", F, start=1000.0, at=1050.0)  # B fails behind A: it stays, failing
    b = item_status(g.item("B"), 1100.0)
    assert b["failing_reasons"] == ["at least one job failed"]
    assert b["dequeue_reason"] == {
        "kind": "failed",
        "message": "failed: unit",
        "jobs": ["unit"],
        "verdict": None,
    }
    end(g, "A", F, start=1000.0, at=1100.0)  # A fails: B is retested on the tip
    b = item_status(g.item("B"), 1100.0)
    assert b["failing_reasons"] == [] and b["dequeue_reason"] is None
    assert b["resets"] == {
        "count": 1,
        "builds": 1,
        "ci_seconds": 50.0,
        "cause": {
            "item": g.reported_items["A"].uuid,
            "project": "app",
            "ref": "A",
            "kind": "failed",
            "message": "failed: unit",
        },
    }
    assert g.reported_items["A"].reset_cost == Waste(1, 1, 50.0)
    assert "reset 1x (1 builds, 50 CI seconds thrown away); last by A (failed)" in render_text(
        {"tenants": [{"name": "t", "pipelines": [pipeline_status(g.state, 1100.0)]}]}
    )
