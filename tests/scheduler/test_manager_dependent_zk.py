"""A gate through the processing layer and a real ZooKeeper (the test plays the workers).

Proves that the dependent manager's state (``ahead``, windows, reset
buildsets, pushes) survives the round trip through ZooKeeper between passes,
and that the results of a reset buildset are dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.manager.base import PipelineManager
from scheduler.manager.dependent import DependentManager
from scheduler.manager.settings import PipelineSettings
from scheduler.model.build import JobInfo
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result
from scheduler.processing.environment import Environment, NewRequest
from scheduler.stores.job_requests import JobRequest
from scheduler.stores.ledger import TxnLedger
from scheduler.wire.events import JobResult
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from tests.fixtures.services import ZooKeeperTarget
from tests.scheduler.gate_harness import GateLayout
from tests.scheduler.world import Formats, World


class GateManagers:
    def __init__(self, merge_on_success: bool = False) -> None:
        self.merge_on_success = merge_on_success

    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        ledger = TxnLedger(client, tenant)
        settings = PipelineSettings(pipeline, "dependent", merge_on_success=self.merge_on_success)
        return DependentManager(settings, GateLayout([JobInfo("unit")]), ledger), ledger


class GateFormats(Formats):
    """Push requests on the merger queue, answered ``{"pushed": bool, "why": str}``."""

    def push(
        self, tenant: str, pipeline: str, item: QueueItem, request_uuid: str, action: str
    ) -> NewRequest:
        request = JobRequest(
            request_uuid,
            tenant=tenant,
            pipeline=pipeline,
            buildset_uuid=item.buildset.uuid,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
        )
        return NewRequest(request, {"push": item.change.ref}, paths.merger_queue())

    def push_outcome(self, result: JobResult) -> tuple[bool, str]:
        return bool(result.result["pushed"]), str(result.result.get("why", ""))


def make_gate(zookeeper: ZooKeeperTarget, merge_on_success: bool) -> Iterator[World]:
    client = connect(zookeeper.settings())
    world = World(client)
    managers = GateManagers(merge_on_success)
    world.env = Environment(
        client, managers, GateFormats(), lambda *nudge, **label: None, [world.reports]
    )
    yield world
    client.stop()
    client.close()


@pytest.fixture
def gate(zookeeper: ZooKeeperTarget) -> Iterator[World]:
    yield from make_gate(zookeeper, merge_on_success=False)


@pytest.fixture
def merging_gate(zookeeper: ZooKeeperTarget) -> Iterator[World]:
    yield from make_gate(zookeeper, merge_on_success=True)


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


def answer_pushes(world: World, answers: dict[str, tuple[bool, str]]) -> list[str]:
    """Play the merger for the pending push requests of the named refs."""
    answered = []
    for request in world.merger.pending():
        ref = world.merger.params(request.uuid).get("push")
        if ref in answers:
            claimed = world.merger.claim(request.uuid, "test-merger")
            assert claimed is not None
            pushed, why = answers[ref]
            world.merger.complete(claimed, {"pushed": pushed, "why": why})
            answered.append(ref)
    return answered


def test_a_refused_push_fails_the_head_and_resets_the_item_behind(merging_gate: World) -> None:
    gate = merging_gate
    for ref in "AB":
        gate.enqueue(ref)
    gate.process()
    gate.run(gate.merger, {"ok": True})
    gate.process()
    finish_builds(gate, {"A": Result.SUCCESS, "B": Result.SUCCESS})
    gate.process()
    assert gate.reports.items == []  # A waits for its push, B for A
    assert answer_pushes(gate, {"A": (False, "main moved outside Sluice")}) == ["A"]
    gate.process()
    reported = [(i.change.ref, i.result, i.message) for i in gate.reports.items]
    assert reported == [("A", Result.FAILURE, "merge failed: main moved outside Sluice")]
    assert merged_refs(gate) == {"B": ["B"]}
    gate.run(gate.merger, {"ok": True})
    gate.process()
    finish_builds(gate, {"B": Result.SUCCESS})
    gate.process()
    assert answer_pushes(gate, {"B": (True, "")}) == ["B"]
    gate.process()
    assert [(i.change.ref, i.result) for i in gate.reports.items][1:] == [("B", Result.SUCCESS)]
    assert gate.state().items == {}
