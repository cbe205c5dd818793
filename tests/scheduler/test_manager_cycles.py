"""Dependency cycles (allow-circular-dependencies): tested, reported and merged as one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from scheduler.config.model import BatchConfig
from scheduler.drivers.depends import Found, needs_of, url_pattern
from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.manager.cycles import changes_of
from scheduler.manager.dependent import DependentManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.retiring import NoLayout, RetiringManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.views.status import item_status
from scheduler.wire.events import Dequeue, Enqueue, Promote
from tests.config.test_invalid import load, messages
from tests.scheduler.gate_harness import Gate, change

S, F, E = Result.SUCCESS, Result.FAILURE, Result.ERROR


def member(ref: str, project: str = "app") -> Change:
    return Change("local", project, "main", ref, "c1", cycle=True)


def cyclic(ref: str, *others: str, project: str = "app") -> Change:
    """``ref`` in a cycle with ``others`` (as the driver finds it: it needs itself)."""
    me = member(ref, project)
    return replace(me, cycle=False, needs=(me, *(member(o) for o in others)))


def gate(
    allowed: bool = True,
    manager: type[PipelineManager] = DependentManager,
    merge: bool = True,
    **extra: Any,
) -> Gate:
    """A pipeline whose queues allow cycles (``allowed``), with ``extra`` settings."""
    settings = PipelineSettings(
        "gate",
        manager.kind,
        merge_on_success=merge,
        allows_cycles=lambda project, branch: allowed,
        **extra,
    )
    return Gate(manager=manager, settings=settings)


def live(g: Gate) -> list[QueueItem]:
    return [i for i in g.state.items.values() if not i.dequeued]


def merge_cycle(g: Gate) -> None:
    """Answer the outstanding merges: each change moves ``app`` main on, the last is the tip."""
    events = []
    for item in live(g):
        buildset = item.buildset
        if buildset.merge_request is None or buildset.jobs is not None:
            continue
        if item.cycle and item.uuid != item.cycle:
            continue
        (merge,) = [m for m in g.merges if m.request == buildset.merge_request]
        merged = tuple(
            ev.MergedChange(c.project, "main", f"m-{c.ref}", (f"{c.ref}.txt",))
            for c in merge.changes
        )
        outcome = ev.MergeOutcome(
            ok=True,
            repo_state={"app": {"main": merged[-1].commit}},
            base_state={"app": {"main": "tip"}},
            merged=merged,
        )
        events.append(ev.MergeCompleted(item.uuid, buildset.uuid, buildset.merge_request, outcome))
    g.run(*events)


def test_a_two_cycle_is_tested_once_on_both_changes_and_merged_together() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    assert g.queue() == ["B", "A"]
    b, a = (g.item(r) for r in "BA")
    assert a.cycle == b.cycle == a.uuid
    # the status shows the cycle each item is tested with
    assert item_status(b, 0.0)["cycle"] == item_status(a, 0.0)["cycle"] == a.uuid
    assert len(g.merges) == 1 and g.merged_on("A") == ("B", "A")  # one merge, both changes
    merge_cycle(g)
    assert [bi.item for bi in g.builds] == [a.uuid]  # the last change builds for the cycle
    # every item's buildset holds every change of the cycle
    assert g.item("B").buildset.repo_state == g.item("A").buildset.repo_state
    assert g.item("B").buildset.repo_state == {"app": {"main": "m-A"}}
    g.finish("A")
    assert g.pushed == ["B", "A"]
    assert g.reported == [("B", S), ("A", S)]
    assert "dependency cycle (app B, app A)" in g.messages["B"]
    assert live(g) == []


def test_a_three_cycle_merges_together_behind_its_other_dependencies() -> None:
    g = gate()
    outside = change("X")
    trigger = cyclic("A", "C", "B")
    trigger = replace(trigger, needs=(outside, *trigger.needs))
    g.run(Enqueue(trigger))
    assert g.queue() == ["X", "C", "B", "A"]
    assert not g.item("X").cycle
    assert g.merged_on("A") == ("X", "C", "B", "A")
    merge_cycle(g)
    g.finish("X")
    g.finish("A")
    assert g.pushed == ["X", "C", "B", "A"]
    assert g.reported == [("X", S), ("C", S), ("B", S), ("A", S)]


def test_the_same_cycle_enqueued_by_another_member_is_not_queued_twice() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    g.run(Enqueue(cyclic("B", "A")))
    assert g.queue() == ["B", "A"]


def test_a_change_queued_alone_joins_its_cycle_when_the_cycle_is_known() -> None:
    g = gate()
    g.enqueue("B")
    g.run(Enqueue(cyclic("A", "B")))
    assert [i.change.ref for i in live(g)] == ["B", "A"]
    assert all(i.cycle for i in live(g))
    assert g.reported == []  # the lone B left without a report


def test_one_failure_dequeues_the_whole_cycle_with_a_reason_naming_it() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "C", "B")))
    merge_cycle(g)
    g.finish("A", result=F)
    assert sorted(g.reported) == [("A", F), ("B", F), ("C", F)]
    assert g.pushed == []
    for ref in "ABC":
        assert "dependency cycle (app C, app B, app A)" in g.messages[ref]
    assert "failed: unit" in g.messages["A"]
    assert g.reported_items["B"].reason is not None
    assert g.reported_items["B"].reason.kind == "dependency-failed"
    assert live(g) == []


def test_items_behind_a_failed_cycle_are_tested_again_without_it() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    g.enqueue("Z")
    assert g.queue() == ["B", "A", "Z"]
    assert not g.item("Z").cycle  # a later change never joins a cycle
    merge_cycle(g)
    assert g.merged_on("Z") == ("B", "A", "Z")
    g.finish("A", result=F)
    z = g.item("Z")
    assert z.ahead is None
    merge_cycle(g)
    assert g.merged_on("Z") == ("Z",)


def test_a_cycle_behind_a_failing_change_is_retested_not_dequeued() -> None:
    g = gate()
    g.enqueue("X")
    g.run(Enqueue(cyclic("A", "B")))
    merge_cycle(g)
    g.finish("A", result=F)  # fails on top of X, which is still running
    assert g.reported == []
    g.finish("X", result=F)
    assert g.reported == [("X", F)]
    merge_cycle(g)  # the cycle is moved onto the branch tip and merged again
    assert g.merged_on("A") == ("B", "A")
    g.finish("A")
    assert g.reported[1:] == [("B", S), ("A", S)]


def test_a_push_refused_half_way_is_reported_on_every_change_and_the_rest_not_merged() -> None:
    g = gate()
    g.push_answer = lambda item: "the forge refused it" if item.change.ref == "B" else None
    g.run(Enqueue(cyclic("A", "C", "B")))
    merge_cycle(g)
    g.finish("A")
    assert g.pushed == ["C"]  # B was refused: A was never pushed
    assert sorted(g.reported) == [("A", F), ("B", F), ("C", F)]
    text = g.messages["A"]
    assert text == g.messages["B"] == g.messages["C"]
    assert "dependency cycle (app C, app B, app A) failed to merge" in text
    assert "app B: merge failed: the forge refused it" in text
    assert "merged: app C" in text and "not merged: app A" in text
    assert live(g) == []


def test_the_pushes_go_one_at_a_time() -> None:
    g = gate()
    g.hold_pushes = True
    g.run(Enqueue(cyclic("A", "B")))
    merge_cycle(g)
    g.finish("A")
    pending = [i.change.ref for i in live(g) if i.push.value == "PENDING"]
    assert pending == ["B"]  # A waits for B's push to land


def test_a_dequeue_of_one_change_dequeues_its_cycle() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    g.run(Dequeue(change("B")))
    assert sorted(g.reported) == [("A", Result.DEQUEUED), ("B", Result.DEQUEUED)]
    assert "dependency cycle (app B, app A): app B left" in g.messages["A"]


def test_a_cycle_is_refused_with_zuuls_message_where_the_queue_does_not_allow_it() -> None:
    g = gate(allowed=False)
    g.run(Enqueue(cyclic("A", "B")))
    assert g.reported == [("A", E)]
    assert g.messages["A"] == (
        "Dependency cycle detected and project app doesn't allow circular dependencies"
    )
    assert g.merges == []


def test_a_cycle_with_a_project_whose_queue_does_not_allow_it_is_refused() -> None:
    settings = PipelineSettings(
        "gate", "dependent", allows_cycles=lambda project, branch: project == "app"
    )
    g = Gate(settings=settings)
    trigger = replace(cyclic("A"), needs=(member("A"), member("L", "lib")))
    g.run(Enqueue(trigger))
    assert g.reported == [("A", E)]
    assert "project lib doesn't allow circular dependencies" in g.messages["A"]


def test_a_check_pipeline_tests_a_cycle_once_and_reports_every_change() -> None:
    g = gate(manager=IndependentManager, merge=False)
    g.run(Enqueue(cyclic("A", "C", "B")))
    assert len(g.state.queues) == 1
    assert len(g.merges) == 1 and g.merged_on("A") == ("C", "B", "A")
    merge_cycle(g)
    assert [bi.item for bi in g.builds] == [g.item("A").uuid]
    g.finish("A", result=F)
    assert sorted(g.reported) == [("A", F), ("B", F), ("C", F)]
    assert "dependency cycle (app C, app B, app A)" in g.messages["C"]


def test_a_check_pipeline_reports_a_passed_cycle_on_every_change() -> None:
    g = gate(manager=IndependentManager, merge=False)
    g.run(Enqueue(cyclic("A", "B")))
    merge_cycle(g)
    g.finish("A")
    assert sorted(g.reported) == [("A", S), ("B", S)]


def test_a_check_pipeline_refuses_a_cycle_it_does_not_allow() -> None:
    g = gate(allowed=False, manager=IndependentManager, merge=False)
    g.run(Enqueue(cyclic("A", "B")))
    assert g.reported == [("A", E)]
    assert "doesn't allow circular dependencies" in g.messages["A"]


def test_the_cycle_survives_a_round_trip_through_its_documents() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    for item in live(g):
        again = QueueItem.from_dict(item.to_dict(), item.buildset)
        assert again.cycle == item.cycle and again.batch == item.batch
    trigger = cyclic("A", "B")
    assert Change.from_dict(trigger.to_dict()) == trigger


def test_a_cycle_with_a_change_of_another_queue_is_an_error_and_stalls_nothing() -> None:
    g = gate()
    trigger = replace(cyclic("A"), needs=(member("A"), member("L", "lib")))
    g.run(Enqueue(trigger))
    assert g.reported == [("A", E)]
    assert "not in queue app" in g.messages["A"]
    g.enqueue("Z")
    merge_cycle(g)
    g.finish("Z")
    assert g.pushed == ["Z"]


def test_a_change_that_names_only_itself_is_a_cycle_of_one() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A")))
    assert g.queue() == ["A"]
    merge_cycle(g)
    g.finish("A")
    assert g.pushed == ["A"] and g.reported == [("A", S)]


def test_a_large_cycle_is_one_merge_and_one_buildset() -> None:
    g = gate()
    refs = [f"R{n}" for n in range(12)]  # pushed one a pass: the harness runs 20
    g.run(Enqueue(cyclic(refs[-1], *refs[:-1])))
    assert g.queue() == refs
    assert len(g.merges) == 1
    merge_cycle(g)
    assert len(g.builds) == 1
    g.finish(refs[-1])
    assert g.pushed == refs
    assert len(g.reported) == 12


def test_dependencies_by_topic_is_accepted_and_inert_and_bad_values_name_file_and_line() -> None:
    text = (
        "- queue:\n    name: q\n    allow-circular-dependencies: true\n"
        "    dependencies-by-topic: true\n"
    )
    result = load(text)
    assert messages(result) == []
    assert result.layout.queues["q"].allow_circular_dependencies
    assert messages(load("- queue:\n    name: q\n    dependencies-by-topic: maybe\n")) == [
        "zuul.d/extra.yaml:3: queue 'q': dependencies-by-topic: expected true/false, got string"
    ]
    bad = load("- queue:\n    name: q\n    allow-circular-dependencies: [1]\n")
    assert messages(bad) == [
        "zuul.d/extra.yaml:3: queue 'q': allow-circular-dependencies: expected true/false, got list"
    ]


def test_the_driver_marks_only_the_changes_of_the_cycle() -> None:
    # 1 -> 2 -> 1 is the cycle; 2 -> 3 is a plain dependency
    bodies = {
        1: "Depends-On: x/org/app/pull/2",
        2: "Depends-On: x/org/app/pull/1\nDepends-On: x/org/app/pull/3",
        3: "",
    }

    def fetch(project: str, number: int) -> Found:
        change = {"connection": "c", "project": project, "branch": "main"}
        return Found(False, bodies[number], {**change, "ref": f"refs/pull/{number}/head"})

    pattern = url_pattern(r"(?P<project>[^/\s]+/[^/\s]+)/pull/(?P<number>\d+)")
    needs = needs_of(pattern, fetch, "org/app", 1, bodies[1])
    marked = {n["ref"]: bool(n.get("cycle")) for n in needs}
    assert marked == {
        "refs/pull/1/head": True,
        "refs/pull/2/head": True,
        "refs/pull/3/head": False,
    }
    trigger = Change.from_dict(
        {
            "connection": "c",
            "project": "org/app",
            "branch": "main",
            "ref": "refs/pull/1/head",
            "needs": needs,
        }
    )
    assert [c.ref for c in changes_of(trigger)] == ["refs/pull/2/head", "refs/pull/1/head"]


def test_a_promote_of_one_change_moves_its_whole_cycle() -> None:
    g = gate()
    g.enqueue("X")
    g.run(Enqueue(cyclic("A", "B")))
    g.run(Promote((change("A"),)))
    assert g.queue() == ["B", "A", "X"]
    merge_cycle(g)
    assert g.merged_on("A") == ("B", "A")
    g.finish("A")
    assert g.pushed == ["B", "A"]


def test_a_promote_leaves_a_cycle_that_is_being_pushed_whole_in_front() -> None:
    g = gate()
    g.hold_pushes = True
    g.run(Enqueue(cyclic("A", "B")))
    g.enqueue("X")
    merge_cycle(g)
    g.finish("A")
    g.run(Promote((change("X"),)))
    assert g.queue() == ["B", "A", "X"]


def test_a_cycle_in_a_batched_queue_is_its_own_batch() -> None:
    batch = BatchConfig(size=4, max_wait=60.0, max_bisect_depth=1)
    g = gate(batch_for=lambda project, branch: batch)
    g.enqueue("X")
    g.run(Enqueue(cyclic("A", "B")))
    g.enqueue("Z")
    x, b, a, z = (g.item(r) for r in "XBAZ")
    assert b.batch == a.batch == a.cycle
    assert x.batch != a.batch and z.batch not in (a.batch, x.batch)
    g.now += 61  # X's and Z's batches waited enough
    g.run()
    merge_cycle(g)
    g.finish("X")
    g.finish("A", result=F)  # the cycle fails: dequeued whole, never split
    assert sorted(g.reported) == [("A", F), ("B", F), ("X", S)]
    assert all(i.bisect_depth == 0 for i in live(g))


def test_a_failing_cycle_under_pending_failure_depth_still_leaves_whole() -> None:
    g = gate(pending_failure_for=lambda project, branch: 1, failure_verdict=True)
    g.run(Enqueue(cyclic("A", "B")))
    g.enqueue("Z")
    merge_cycle(g)
    g.finish("A", result=F)
    assert sorted(g.reported) == [("A", F), ("B", F)]
    merge_cycle(g)
    g.finish("Z")
    assert g.pushed == ["Z"]


def test_a_cycle_that_grows_is_queued_again_as_the_bigger_cycle_without_reports() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    merge_cycle(g)
    g.run(Enqueue(cyclic("C", "A", "B")))
    assert [i.change.ref for i in live(g)] == ["A", "B", "C"]
    assert len({i.cycle for i in live(g)}) == 1
    assert g.reported == []
    assert g.cancels  # the old cycle's build was cancelled
    merge_cycle(g)
    g.finish("C")
    assert g.pushed == ["A", "B", "C"]


def test_a_removed_pipeline_takes_a_cycle_out_with_its_own_reason() -> None:
    g = gate()
    g.run(Enqueue(cyclic("A", "B")))
    g.manager = RetiringManager(PipelineSettings("gate"), NoLayout(), g.ledger)
    g.run()
    assert sorted(g.reported) == [("A", Result.DEQUEUED), ("B", Result.DEQUEUED)]
    for ref in "AB":
        reason = g.reported_items[ref].reason
        assert reason is not None and reason.kind == "pipeline-removed"


def test_a_gate_that_does_not_merge_reports_the_cycle_together_at_the_head() -> None:
    g = gate(merge=False)
    g.enqueue("X")
    g.run(Enqueue(cyclic("A", "B")))
    merge_cycle(g)
    g.finish("A")
    assert g.reported == []  # X ahead has not reported yet
    g.finish("X")
    assert g.reported == [("X", S), ("B", S), ("A", S)]
    assert g.pushed == []
