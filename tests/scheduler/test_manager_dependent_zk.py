"""A gate through the processing layer and a real ZooKeeper (the test plays the workers).

Proves that the dependent manager's state (``ahead``, windows, reset
buildsets, pushes) survives the round trip through ZooKeeper between passes,
and that the results of a reset buildset are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.manager.base import PipelineManager, PipelineSettings
from scheduler.manager.dependent import DependentManager
from scheduler.model.build import JobInfo
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.processing.environment import Environment
from scheduler.processing.semaphores import TxnLedger
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.job_requests import JobRequest
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.gate_harness import GateLayout
from tests.scheduler.world import Formats, World


class GateManagers:
    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        ledger = TxnLedger(client, tenant)
        settings = PipelineSettings(pipeline, "dependent")
        return DependentManager(settings, GateLayout([JobInfo("unit")]), ledger), ledger


@pytest.fixture
def gate(zookeeper: ZooKeeperTarget) -> Iterator[World]:
    client = connect(zookeeper.settings())
    world = World(client)
    world.env = Environment(client, GateManagers(), Formats(), lambda *nudge: None, [world.reports])
    yield world
    client.stop()
    client.close()


def item_of(state: PipelineState, request: JobRequest) -> QueueItem:
    (item,) = [i for i in state.items.values() if i.buildset.uuid == request.buildset_uuid]
    return item


def finish_builds(world: World, results: dict[str, Result]) -> None:
    """Complete the pending build of each named ref with its result."""
    state = world.state()
    for request in world.executor.pending():
        ref = item_of(state, request).change.ref
        if ref in results:
            claimed = world.executor.claim(request.uuid, "test-worker")
            assert claimed is not None
            world.executor.complete(claimed, {"result": results[ref].value, "data": {}})


def merged_refs(world: World) -> dict[str, list[str]]:
    """The pending merges: item ref -> refs of the changes it stacks."""
    state = world.state()
    found = {}
    for request in world.merger.pending():
        changes = world.merger.params(request.uuid)["changes"]
        found[item_of(state, request).change.ref] = [c["ref"] for c in changes]
    return found


def test_a_gate_of_three_where_the_middle_fails_through_zookeeper(gate: World) -> None:
    for ref in "ABC":
        gate.enqueue(ref)
    gate.process()
    assert merged_refs(gate) == {"A": ["A"], "B": ["A", "B"], "C": ["A", "B", "C"]}
    gate.run(gate.merger, {"ok": True})
    gate.process()
    old_c = [r for r in gate.executor.pending() if item_of(gate.state(), r).change.ref == "C"]

    finish_builds(gate, {"B": Result.FAILURE})
    gate.process()
    assert merged_refs(gate) == {"C": ["A", "C"]}
    assert gate.executor.flag_set(old_c[0].uuid, "cancel")
    state = gate.state()
    by_ref = {i.change.ref: i for i in state.items.values()}
    assert by_ref["C"].ahead == by_ref["A"].uuid and by_ref["B"].result is Result.FAILURE

    # the cancelled build of C's old buildset answers anyway: dropped
    claimed = gate.executor.claim(old_c[0].uuid, "test-worker")
    assert claimed is not None
    gate.executor.complete(claimed, {"result": "SUCCESS", "data": {}})
    gate.run(gate.merger, {"ok": True})
    gate.process()
    finish_builds(gate, {"C": Result.SUCCESS})
    gate.process()
    assert gate.reports.items == []
    finish_builds(gate, {"A": Result.SUCCESS})
    gate.process()
    reported = [(i.change.ref, i.result) for i in gate.reports.items]
    assert reported == [("A", Result.SUCCESS), ("B", Result.FAILURE), ("C", Result.SUCCESS)]
    assert gate.state().items == {}
    assert gate.state().queues["app"].window == 11  # 20, +1 (A), halved (B), +1 (C)
