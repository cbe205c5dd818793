"""Zuul's pre_fail: a build whose output matched its job's failure-output fails its
item at once in the gate's walk, while it runs on to its end."""

from __future__ import annotations

from scheduler.manager import events as ev
from scheduler.model.build import Build, JobInfo
from scheduler.model.results import Result
from scheduler.views.status import item_status
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE


def prefail_event(g: Gate, ref: str, job: str = "unit") -> ev.BuildPreFailed:
    item = g.item(ref)
    assert item.buildset.jobs is not None
    build = item.buildset.jobs[job].current
    assert build is not None
    return ev.BuildPreFailed(build.uuid, item.uuid, item.buildset.uuid, job)


def test_a_pre_failed_build_resets_the_item_behind_onto_the_branch_tip_at_once() -> None:
    g = Gate()
    g.enqueue("A", "B")
    g.merge_all()
    a_build = g.item("A").buildset.graph.jobs["unit"].current
    assert a_build is not None
    old_b = [b.uuid for job in g.item("B").buildset.graph for b in job.builds]
    g.run(prefail_event(g, "A"))
    # A's build still runs, pre-failed; B was moved onto the branch tip and reset
    assert a_build.pre_fail and not a_build.done and g.running("A") == ["unit"]
    assert g.item("A").result is None and g.reported == []
    assert g.cancels == old_b
    assert g.merged_on("B") == ("B",)
    assert a_build.uuid not in g.cancels
    statuses = {j["name"]: j for j in item_status(g.item("A"), 1000.0)["jobs"]}
    assert statuses["unit"]["pre_fail"] is True and statuses["unit"]["result"] is None
    g.merge_all()
    g.finish("B")
    # on the branch tip, B is at the head: it reports while A still runs (Zuul)
    assert g.reported == [("B", S)] and g.running("A") == ["unit"]
    # A's result is decided when its build ends, as always
    g.finish("A", result=F)
    assert g.reported == [("B", S), ("A", F)]


def test_a_repeated_or_late_prefail_event_changes_nothing() -> None:
    g = Gate()
    g.enqueue("A", "B")
    g.merge_all()
    event = prefail_event(g, "A")
    g.run(event)
    cancels, merges = list(g.cancels), list(g.merges)
    g.run(event)
    assert g.cancels == cancels and g.merges == merges
    g.finish("A", result=F)
    g.run(event)  # after the build ended
    assert g.reported[0] == ("A", F)


def test_a_pre_failed_build_that_succeeds_anyway_is_a_failure() -> None:
    g = Gate()
    g.enqueue("A")
    g.merge_all()
    g.run(prefail_event(g, "A"))
    g.finish("A", result=S)
    assert g.reported == [("A", F)]


def test_a_pre_failed_build_that_ends_retryable_is_a_failure_not_a_retry() -> None:
    g = Gate()
    g.enqueue("A")
    g.merge_all()
    g.run(prefail_event(g, "A"))
    g.finish("A", result=Result.RETRY)
    assert g.reported == [("A", F)]
    assert len(g.builds) == 1  # not run again


def test_fail_fast_counts_a_pre_failed_build_and_cancels_the_rest() -> None:
    g = Gate(jobs=(JobInfo("unit"), JobInfo("docs")), fail_fast=True)
    g.enqueue("A")
    g.merge_all()
    builds = {j.name: j.current for j in g.item("A").buildset.graph}
    g.run(prefail_event(g, "A"))
    # Zuul's fail-fast: a pre-failed voting build fails the item now, the rest cancelled
    assert g.reported == [("A", F)]
    assert "unit" in g.messages["A"] and "fail-fast" in g.messages["A"]
    assert sorted(g.cancels) == sorted(b.uuid for b in builds.values() if b is not None)


def test_a_non_voting_jobs_pre_fail_never_fails_the_item() -> None:
    g = Gate(jobs=(JobInfo("unit"), JobInfo("lint", voting=False)))
    g.enqueue("A", "B")
    g.merge_all()
    old_b = [b.uuid for job in g.item("B").buildset.graph for b in job.builds]
    g.run(prefail_event(g, "A", "lint"))
    assert g.cancels == [] and old_b
    assert g.merged_on("B") == ("A", "B")
    g.finish("A", "lint", result=F)
    g.finish("A")
    g.finish("B", "lint")
    g.finish("B")
    assert g.reported == [("A", S), ("B", S)]


def test_old_build_documents_load_without_pre_fail() -> None:
    build = Build("u1", "unit", 1)
    data = build.to_dict()
    assert "pre_fail" not in data
    assert Build.from_dict(data).pre_fail is False
    build.pre_fail = True
    assert Build.from_dict(build.to_dict()).pre_fail is True
