"""Batches in a dependent pipeline: N changes tested as one, a failed batch bisected."""

from __future__ import annotations

from scheduler.config.model import BatchConfig
from scheduler.manager import events as ev
from scheduler.manager.settings import PipelineSettings
from scheduler.model.item import ChangeQueue, MergeState, QueueItem
from scheduler.model.results import Result
from tests.scheduler.gate_harness import Gate

S, F = Result.SUCCESS, Result.FAILURE
REFS = tuple("ABCDEFGH")


def batched_gate(size: int = 8, max_wait: float = 60.0, depth: int = 3) -> Gate:
    batch = BatchConfig(size=size, max_wait=max_wait, max_bisect_depth=depth)
    settings = PipelineSettings(
        "gate", "dependent", merge_on_success=True, batch_for=lambda project, branch: batch
    )
    return Gate(settings=settings)


def merge_event(g: Gate, item: QueueItem) -> ev.MergeCompleted:
    return g.stack_merge_event(item)


def settle(g: Gate, culprits: set[str]) -> int:
    """Answer merges and builds until nothing is pending; a build fails iff its
    merge stacks a culprit. Returns how many builds ran."""
    builds = 0
    for _ in range(200):
        live = [i for i in g.state.items.values() if not i.dequeued]
        merging = [i for i in live if i.buildset.merge_state is MergeState.PENDING]
        if merging:
            g.run(*(merge_event(g, i) for i in merging))
            continue
        running = [(i, j) for i in live for j in i.buildset.graph if j.running and i.buildset.jobs]
        if not running:
            return builds
        events = []
        for item, job in running:
            stacked = set(g.merged_on(item.change.ref))
            builds += 1
            events.append(g.build_event(item, job.name, F if stacked & culprits else S))
        g.run(*events)
    raise AssertionError("the gate does not settle")


def test_a_full_batch_is_one_merge_and_one_buildset_and_merges_each_change_in_order() -> None:
    g = batched_gate()
    items = g.enqueue(*REFS)
    assert len(g.merges) == 1 and g.merged_on("H") == REFS
    assert all(i.batch == items[0].batch for i in items)
    assert settle(g, set()) == 1
    assert g.reported == [(ref, S) for ref in REFS]
    assert g.pushed == list(REFS)
    # each change is pushed at the commit its own merge made
    assert [i.buildset.repo_state for i in items[:2]] == [
        {"app": {"main": "m-A"}},
        {"app": {"main": "m-B"}},
    ]


def test_a_batch_waits_for_more_changes_until_its_max_wait() -> None:
    g = batched_gate(size=4, max_wait=30.0)
    g.enqueue("A", "B")
    assert g.merges == []
    assert g.state.queues["app"].wake_at == 1030.0
    g.manager.clock = lambda: 1031.0
    g.run()
    assert g.merged_on("B") == ("A", "B")
    assert g.state.queues["app"].wake_at is None
    g.enqueue("C")  # the batch started: C begins its own
    assert g.item("C").batch != g.item("A").batch


def test_one_culprit_is_found_by_bisection_and_the_other_seven_merge_in_order() -> None:
    g = batched_gate()
    g.enqueue(*REFS)
    builds = settle(g, {"C"})
    assert g.reported == [("A", S), ("B", S), ("C", F), *((r, S) for r in "DEFGH")]
    assert g.pushed == ["A", "B", "D", "E", "F", "G", "H"]
    assert "culprit" in g.messages["C"]
    # 8 -> 4+4 -> (2+2) -> 1+1, the halves behind a failing half tested again
    assert builds < 8 + 4


def test_two_culprits_in_one_batch() -> None:
    g = batched_gate()
    g.enqueue(*REFS)
    settle(g, {"B", "G"})
    results = dict(g.reported)
    assert results == {r: (F if r in "BG" else S) for r in REFS}
    assert g.pushed == ["A", "C", "D", "E", "F", "H"]


def test_past_the_bisect_depth_the_changes_are_tested_one_by_one() -> None:
    g = batched_gate(size=4, depth=0)
    g.enqueue(*"ABCD")
    settle(g, {"D"})
    batches = {g.state.items[u].batch for u in g.state.queues["app"].items}
    assert g.reported == [("A", S), ("B", S), ("C", S), ("D", F)]
    assert batches == set()  # all reported and gone


def test_the_split_is_kept_in_the_items_documents() -> None:
    g = batched_gate(size=4)
    items = g.enqueue(*"ABCD")
    g.run(merge_event(g, items[-1]))
    g.run(g.build_event(g.item("D"), "unit", F))
    first, second = {g.item(r).batch for r in "AB"}, {g.item(r).batch for r in "CD"}
    assert len(first) == len(second) == 1 and first != second
    copy = QueueItem.from_dict(g.item("B").to_dict(), g.item("B").buildset)
    assert (copy.batch, copy.bisect_depth) == (g.item("B").batch, 1)
    queue = g.state.queues["app"]
    assert ChangeQueue.from_dict(queue.to_dict()) == queue


def test_a_dequeued_tail_leaves_its_riders_to_be_tested_again() -> None:
    g = batched_gate(size=3)
    g.enqueue(*"ABC")
    g.run(merge_event(g, g.item("C")))
    assert g.item("B").buildset.merge_state is MergeState.COMPLETE  # shared from C's merge
    g.manager.dequeue_change(g.state, g.item("C").change)
    g.run()
    assert g.item("B").buildset.merge_state is MergeState.NEW  # A and B wait out max-wait
    g.manager.clock = lambda: 1061.0
    g.run()
    assert g.merged_on("B") == ("A", "B")
    settle(g, set())
    assert g.reported == [("C", Result.DEQUEUED), ("A", S), ("B", S)]


def test_a_batch_that_fails_behind_a_running_one_waits_and_is_not_split_for_its_fault() -> None:
    g = batched_gate(size=4)
    g.enqueue(*REFS)  # two batches: ABCD, EFGH on top of it
    g.run(*(merge_event(g, g.item(r)) for r in "DH"))
    # EFGH fails first (it stacks C): it waits, unsplit, for ABCD
    g.run(g.build_event(g.item("H"), "unit", F))
    assert {g.item(r).bisect_depth for r in "EFGH"} == {0}
    assert g.item("H").result is F
    # ABCD fails: it is split; EFGH moves onto the tip, whole, and is tested again
    g.run(g.build_event(g.item("D"), "unit", F))
    assert {g.item(r).bisect_depth for r in "ABCD"} == {1}
    assert {g.item(r).bisect_depth for r in "EFGH"} == {0}
    assert g.item("H").result is None
    settle(g, {"C"})
    assert g.reported == [*((r, S) for r in "AB"), ("C", F), *((r, S) for r in "DEFGH")]


def test_a_batch_takes_one_place_in_the_window() -> None:
    g = batched_gate(size=4)
    # 24 changes are six batches: six places of the window of 20, all active
    g.enqueue(*(f"c{n}" for n in range(24)))
    assert {g.item(f"c{n}").active for n in range(24)} == {True}


def test_the_batch_size_follows_the_failures() -> None:
    g = batched_gate(size=4)
    g.enqueue(*"ABCD")
    settle(g, {"B"})
    assert g.state.queues["app"].batch_size == 2  # a failed batch halves it
    g.enqueue(*"EFGH")
    assert g.item("E").batch == g.item("F").batch != g.item("G").batch == g.item("H").batch
    settle(g, set())
    assert g.state.queues["app"].batch_size == 4  # each passed batch doubles it, up to 4
    assert [ref for ref, result in g.reported if result is S] == list("ACDEFGH")


def test_batches_and_their_splits_are_counted_for_the_metrics() -> None:
    g = batched_gate()
    g.enqueue(*REFS)
    settle(g, {"C"})
    counted = g.manager.tally.batches["app"]
    assert counted.tested >= 4 and counted.changes >= 8  # 8, its halves, their halves...
    assert counted.bisections == 3  # 8 -> 4+4, ABCD -> AB+CD, CD -> C+D


def test_a_batch_failing_in_a_failing_queue_is_tested_one_by_one_at_once() -> None:
    g = batched_gate(size=4, depth=1)
    g.enqueue(*"ABCD")
    g.state.queues["app"].batch_size = 2  # an earlier batch failed and none passed since
    g.run(merge_event(g, g.item("D")))
    g.run(g.build_event(g.item("D"), "unit", F))
    # likely more than one culprit: no halves, each change on the one ahead of it at once
    assert len({g.item(r).batch for r in "ABCD"}) == 4
    assert {g.item(r).bisect_depth for r in "ABCD"} == {1}
    settle(g, {"B", "D"})
    assert g.reported == [("A", S), ("B", F), ("C", S), ("D", F)]
    assert g.pushed == ["A", "C"]


def test_behind_a_single_change_of_a_split_batch_the_next_batch_builds_at_once() -> None:
    g = batched_gate(size=2, depth=1)
    g.enqueue(*"ABCD")  # AB, CD on top of it
    g.run(*(merge_event(g, g.item(r)) for r in "BD"))
    g.run(g.build_event(g.item("B"), "unit", F))
    # AB is split into A and B (single changes): CD is tested on B at once, not after them
    assert g.item("A").bisect_depth == g.item("B").bisect_depth == 1
    g.merge_all()
    assert g.running("D") == ["unit"]
    assert g.running("B") == ["unit"] and g.running("A") == ["unit"]
