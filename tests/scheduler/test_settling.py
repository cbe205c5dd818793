"""Settled items (scheduler/manager/settling.py): a pass advances what can decide something.

Driven through real passes in ZooKeeper: which items a pass takes and
advances, that an item's place changing makes it advance again, and that
the pipeline document and the order document are written only as needed.
Every test here runs with SLUICE_VERIFY_QUIET (tests/conftest.py): each
skipped step is also run on a clone and must decide nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from scheduler.manager import settling
from scheduler.model.item import PipelineState, QueueItem, Settled
from scheduler.model.results import Result
from scheduler.state import codec, items
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.test_manager_dependent_zk import (
    finish_builds,
    item_of,
    make_gate,
    merged_refs,
)
from tests.scheduler.world import PIPELINE, TENANT, World


@pytest.fixture
def gate(zookeeper: ZooKeeperTarget) -> Iterator[World]:
    yield from make_gate(zookeeper, merge_on_success=False)


@pytest.fixture
def advanced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The uuids of the items whose step ran, in order."""
    seen: list[str] = []
    original = settling.advance

    def counting(manager: Any, state: PipelineState, uuid: str, step: Any) -> QueueItem:
        seen.append(uuid)
        return original(manager, state, uuid, step)

    monkeypatch.setattr(settling, "advance", counting)
    return seen


def settle(world: World) -> None:
    """Passes until one decides nothing: every item's step ran on it as stored."""
    world.process()
    world.process()


def complete_one(world: World, ref: str, result: Result = Result.SUCCESS) -> None:
    state = world.state()
    (request,) = [r for r in world.executor.pending() if item_of(state, r).change.ref == ref]
    claimed = world.executor.claim(request.uuid, "test-worker")
    assert claimed is not None
    world.executor.complete(claimed, {"result": result.value, "data": {}})


def uuid_of(world: World, ref: str) -> str:
    (found,) = [i.uuid for i in world.state().items.peek_values() if i.change.ref == ref]
    return str(found)


def test_a_build_result_advances_only_its_item(world: World, advanced: list[str]) -> None:
    for ref in "ABCD":
        world.enqueue(ref)
    world.process()
    world.run(world.merger, {"ok": True})
    settle(world)  # lint requested for each item; then a pass that decides nothing
    marks = items.snapshot(TENANT, PIPELINE).settled
    assert len(marks) == 4 and all(not mark.failing for mark in marks.values())
    advanced.clear()
    complete_one(world, "C")
    world.process()
    assert advanced[0] == uuid_of(world, "C")
    assert set(advanced) == {uuid_of(world, "C")}  # (and again once its unit build ran)


def test_a_settled_item_whose_place_changes_advances_again(
    gate: World, advanced: list[str]
) -> None:
    for ref in "ABC":
        gate.enqueue(ref)
    gate.process()
    gate.run(gate.merger, {"ok": True})
    settle(gate)
    assert len(items.snapshot(TENANT, PIPELINE).settled) == 3
    advanced.clear()
    finish_builds(gate, {"B": Result.FAILURE})
    gate.process()
    # C was tested on B: it moves onto A and is merged again
    assert uuid_of(gate, "C") in advanced
    assert uuid_of(gate, "A") not in advanced  # ahead of the failure: nothing changed for A
    assert merged_refs(gate) == {"C": ["A", "C"]}
    mark = items.snapshot(TENANT, PIPELINE).settled.get(uuid_of(gate, "B"))
    assert mark is None or mark.failing


def test_a_layout_change_advances_every_item(world: World, advanced: list[str]) -> None:
    for ref in "AB":
        world.enqueue(ref)
    world.process()
    world.run(world.merger, {"ok": True})
    settle(world)
    snapshot = items.snapshot(TENANT, PIPELINE)
    other = {
        uuid: Settled(("/layout/t", 99), mark.failing) for uuid, mark in snapshot.settled.items()
    }
    items.keep(
        TENANT, PIPELINE, type(snapshot)(snapshot.root_doc, snapshot.entries, snapshot.items, other)
    )
    advanced.clear()
    world.enqueue("C")
    world.process()
    assert {uuid_of(world, "A"), uuid_of(world, "B")} <= set(advanced)


def test_a_skipped_step_that_would_decide_fails_the_tests(world: World) -> None:
    world.enqueue("A")
    world.process()
    state = world.state()
    seen = state.items.peek(uuid_of(world, "A"))
    assert seen is not None
    manager, _ = world.env.managers.open(world.client, TENANT, PIPELINE)

    def deciding(item: QueueItem) -> None:
        manager.intents.reports.append(item.uuid)

    def changing(item: QueueItem) -> None:
        item.message = "x"

    for step in (deciding, changing):
        with pytest.raises(AssertionError, match="settled item"):
            settling.verify(manager, state, seen, step)
    settling.verify(manager, state, seen, lambda item: None)


# ------------------------------------------------------------------ documents


def stat_of(client: ZooKeeperClient, path: str) -> Any:
    stat = client.exists(path)
    assert stat is not None
    return stat


def test_a_build_result_leaves_the_order_document_alone(world: World) -> None:
    for ref in "AB":
        world.enqueue(ref)
    world.process()
    world.run(world.merger, {"ok": True})
    settle(world)
    root, order = codec.root_path(TENANT, PIPELINE), codec.order_path(TENANT, PIPELINE)
    order_version, root_version = (
        stat_of(world.client, order).version,
        stat_of(world.client, root).version,
    )
    complete_one(world, "A")
    world.process()
    assert stat_of(world.client, order).version == order_version
    assert stat_of(world.client, root).version > root_version
    raw, _ = world.client.kazoo.get(root)
    document = stored.decode(raw, root)
    assert document["schema"] == codec.ROOT_SCHEMA and "queues" not in document
    assert document["items"] == 2
    world.enqueue("C")  # an item joins: the order changes
    world.process()
    assert stat_of(world.client, order).version > order_version


def test_a_pipeline_document_of_schema_1_is_still_read(world: World) -> None:
    for ref in "AB":
        world.enqueue(ref)
    world.process()
    state = world.state()
    root, order = codec.root_path(TENANT, PIPELINE), codec.order_path(TENANT, PIPELINE)
    # as the previous version wrote it: the queues in the pipeline document, no order node
    old = {**state.summary(), **state.order()}
    del old["items"]
    world.client.kazoo.set(root, stored.encode(old, schema=1))
    world.client.kazoo.delete(order)
    items.forget(TENANT, PIPELINE)
    again = world.state()
    assert list(again.items) == list(state.items) and again.queues == state.queues
    world.run(world.merger, {"ok": True})
    world.process()  # a pass reads it, and writes the new form
    raw, _ = world.client.kazoo.get(root)
    assert "queues" not in stored.decode(raw, root)
    raw, _ = world.client.kazoo.get(order)
    written = [queue["items"] for queue in stored.decode(raw, order)["queues"]]
    assert written == [queue.items for queue in state.queues.values()]
    assert len(world.executor.pending()) == 2  # lint of A and B: nothing was lost


def test_the_idle_count_reads_both_forms(world: World) -> None:
    from scheduler.views.idle import items_in

    world.enqueue("A")
    world.process()
    assert items_in(world.client, TENANT, PIPELINE) == 1
    assert codec.item_count({"queues": [{"items": ["x", "y"]}, {"items": ["z"]}]}) == 3
    assert paths.pipeline_queues(TENANT, PIPELINE) == codec.order_path(TENANT, PIPELINE)
