"""failure-verdict: a gate failure's job runs again to say flaky, culprit or broken base."""

from __future__ import annotations

from scheduler.manager import events as ev
from scheduler.manager.settings import PipelineSettings
from scheduler.manager.verdicts import ALONE, SAME_STATE
from scheduler.model.build import JobInfo
from scheduler.model.item import MergeState, Probe, QueueItem
from scheduler.model.results import Result
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE


def judging_gate() -> Gate:
    settings = PipelineSettings("gate", "dependent", merge_on_success=True, failure_verdict=True)
    return Gate(settings=settings)


def probe(item: QueueItem, kind: str) -> Probe:
    (found,) = [p for p in item.probes if p.kind == kind]
    return found


def answer(g: Gate, ref: str, same: Result, alone: Result | None) -> None:
    """The alone probe's merge (None: it conflicts), then both probes' builds."""
    item = g.item(ref)
    lone = probe(item, ALONE)
    assert lone.merge_request is not None
    outcome = ev.MergeOutcome(
        ok=alone is not None, repo_state={"app": {"main": "lone"}}, error="conflict"
    )
    g.run(ev.MergeCompleted(item.uuid, lone.uuid, lone.merge_request, outcome))
    events = []
    for kind, result in ((SAME_STATE, same), (ALONE, alone)):
        run = probe(g.item(ref), kind)
        if run.build is not None:
            events.append(
                ev.BuildCompleted(run.build.uuid, item.uuid, run.uuid, run.job, result or F)
            )
    g.run(*events)


def failed_head(g: Gate) -> QueueItem:
    a, _ = g.enqueue("A", "B")
    g.merge_all()
    g.finish("A", result=F)
    return a


def test_a_failure_is_judged_before_it_is_reported() -> None:
    g = judging_gate()
    a = failed_head(g)
    assert a.result is F and g.reported == []
    same, lone = probe(a, SAME_STATE), probe(a, ALONE)
    # the same state again (no merge), and a merge of the change alone on the tip
    assert same.merge_state is MergeState.COMPLETE and same.build is not None
    (alone_merge,) = [m for m in g.merges if m.buildset == lone.uuid]
    assert [c.ref for c in alone_merge.changes] == ["A"]
    same_build = [b for b in g.builds if b.buildset == same.uuid]
    assert same_build and same_build[0].job.name == "unit"


def test_a_culprit() -> None:
    g = judging_gate()
    failed_head(g)
    answer(g, "A", same=F, alone=F)
    assert ("A", F) in g.reported
    assert "verdict: culprit" in g.messages["A"]


def test_a_flaky_failure() -> None:
    g = judging_gate()
    failed_head(g)
    answer(g, "A", same=S, alone=S)
    assert "verdict: flaky" in g.messages["A"]


def test_a_broken_base() -> None:
    g = judging_gate()
    failed_head(g)
    answer(g, "A", same=F, alone=S)
    assert "verdict: broken-base" in g.messages["A"]


def test_a_change_that_does_not_merge_alone_is_the_culprit() -> None:
    g = judging_gate()
    failed_head(g)
    answer(g, "A", same=F, alone=None)
    assert "verdict: culprit" in g.messages["A"]


def test_the_queue_goes_on_while_a_failure_is_judged() -> None:
    g = judging_gate()
    failed_head(g)
    g.merge_all()
    g.finish("B")
    assert g.pushed == ["B"] and g.reported == [("B", S)]


def test_the_verdict_is_kept_in_the_item_and_its_reason() -> None:
    g = judging_gate()
    a = failed_head(g)
    copy = QueueItem.from_dict(a.to_dict(), a.buildset)
    assert copy.probes == a.probes
    answer(g, "A", same=F, alone=F)
    assert a.verdict == "culprit" and a.reason is not None and a.reason.verdict == "culprit"


def test_a_dequeue_cancels_the_probes() -> None:
    g = judging_gate()
    a = failed_head(g)
    same = probe(a, SAME_STATE)
    assert same.build is not None
    g.manager.dequeue_change(g.state, a.change)
    g.run()
    assert same.build.uuid in g.cancels


def test_without_failure_verdict_nothing_runs_again() -> None:
    g = Gate(settings=PipelineSettings("gate", "dependent", merge_on_success=True))
    a = failed_head(g)
    assert a.probes == [] and ("A", F) in g.reported


def test_a_job_with_a_nodeset_is_judged_on_nodes_of_its_own() -> None:
    settings = PipelineSettings(
        "gate",
        "dependent",
        merge_on_success=True,
        failure_verdict=True,
        nodes_for=lambda job, choice: (("controller", "ubuntu"),),
    )
    g = Gate(settings=settings)
    g.enqueue("A")
    first = {"id": "n1", "label": "ubuntu"}
    for asked in list(g.node_requests):  # the gate build's nodes
        request = asked.build.node_request or ""
        g.run(
            ev.NodesAnswered(request, asked.item, asked.buildset, asked.job, True, nodes=(first,))
        )
    g.merge_all()
    g.finish("A", result=F)
    a = g.item("A")
    same = probe(a, SAME_STATE)
    # the probe asks for its own nodes first (the gate's went back with their build)
    (asked,) = [n for n in g.node_requests if n.buildset == same.uuid]
    assert asked.nodes == (("controller", "ubuntu"),) and not [
        b for b in g.builds if b.buildset == same.uuid
    ]
    node = {"id": "n2", "label": "ubuntu"}
    g.run(ev.NodesAnswered(asked.build.node_request or "", a.uuid, same.uuid, "unit", True,
                           nodes=(node,)))  # fmt: skip
    (started,) = [b for b in g.builds if b.buildset == same.uuid]
    assert started.build.nodes == [{**node, "name": "controller"}]
    # the alone probe's nodes fail: nothing can be said
    lone = probe(g.item("A"), ALONE)
    outcome = ev.MergeOutcome(ok=True, repo_state={"app": {"main": "lone"}})
    g.run(ev.MergeCompleted(a.uuid, lone.uuid, lone.merge_request or "", outcome))
    lone = probe(g.item("A"), ALONE)
    assert lone.build is not None and lone.build.node_request
    g.run(ev.NodesAnswered(lone.build.node_request, a.uuid, lone.uuid, "unit", False, "no quota"))
    g.run(ev.BuildCompleted(started.build.uuid, a.uuid, same.uuid, "unit", F))
    assert ("A", F) in g.reported
    assert "no verdict: the re-run ended alone NODE_FAILURE" in g.messages["A"]
    assert g.reported_items["A"].verdict == "unjudged"


def test_a_job_with_a_semaphore_is_judged_once_the_semaphore_is_free() -> None:
    g = Gate(
        settings=PipelineSettings("gate", "dependent", merge_on_success=True, failure_verdict=True),
        jobs=(JobInfo("unit", semaphores=("db",)),),
        semaphores={"db": 1},
    )
    g.enqueue("A")
    g.merge_all()
    g.ledger.maxima["db"] = 0  # (as if every place were taken by others)
    g.finish("A", result=F)
    same = probe(g.item("A"), SAME_STATE)
    assert same.build is None  # waits for the semaphore, as a build would
    g.ledger.maxima["db"] = 1
    g.run()
    same = probe(g.item("A"), SAME_STATE)
    assert same.build is not None and g.ledger.holders["db"] == {f"{same.uuid}/unit"}
    answer(g, "A", same=S, alone=S)
    # the two probes take the one place in turn: the alone run starts once the other ended
    lone = probe(g.item("A"), ALONE)
    assert lone.build is not None and g.ledger.holders["db"] == {f"{lone.uuid}/unit"}
    g.run(ev.BuildCompleted(lone.build.uuid, g.item("A").uuid, lone.uuid, "unit", S))
    assert "verdict: flaky" in g.messages["A"]
    assert g.ledger.holders["db"] == set()  # released once the probes ended
