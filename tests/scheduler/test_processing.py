"""A pipeline pass against a real ZooKeeper; the test plays merger and executor."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from scheduler import tasknames
from scheduler.manager import events as ev
from scheduler.manager.base import (
    BuildIntent,
    FreezeResult,
    MergeIntent,
    PipelineManager,
    PipelineSettings,
)
from scheduler.manager.independent import IndependentManager
from scheduler.model.build import Dependency, JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.processing import pipeline as processing
from scheduler.processing.environment import BuildOutcome, Environment, NewRequest
from scheduler.processing.semaphores import TxnLedger
from scheduler.state.store import PipelineStore
from scheduler.zk import flags, locks, paths, stored
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.job_requests import JobRequest, JobRequestQueue, JobResult
from tests.fixtures.services import ZooKeeperTarget

TENANT, PIPELINE = "t", "check"
JOBS = (JobInfo("lint"), JobInfo("unit", dependencies=(Dependency("lint"),)))


class Layout:
    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(JOBS)


class Managers:
    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        ledger = TxnLedger(client, tenant)
        return IndependentManager(PipelineSettings(pipeline), Layout(), ledger), ledger


class Formats:
    def merge(self, tenant: str, pipeline: str, item: QueueItem, intent: MergeIntent) -> NewRequest:
        request = JobRequest(
            intent.request,
            tenant=tenant,
            pipeline=pipeline,
            buildset_uuid=intent.buildset,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
        )
        changes = [c.to_dict() for c in intent.changes]
        return NewRequest(request, {"changes": changes}, paths.merger_queue())

    def build(self, tenant: str, pipeline: str, item: QueueItem, intent: BuildIntent) -> NewRequest:
        request = JobRequest(
            intent.build.uuid,
            tenant=tenant,
            pipeline=pipeline,
            buildset_uuid=intent.buildset,
            job_name=intent.job.name,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
        )
        params = {"job": intent.job.name, "parent_data": intent.parent_data}
        return NewRequest(request, params, paths.executor_queue())

    def merge_outcome(self, result: JobResult) -> ev.MergeOutcome:
        return ev.MergeOutcome(ok=bool(result.result["ok"]), repo_state={"app": {"main": "abc"}})

    def build_outcome(self, result: JobResult) -> BuildOutcome:
        return BuildOutcome(Result(result.result["result"]), result_data=result.result["data"])


class Reports:
    def __init__(self) -> None:
        self.items: list[QueueItem] = []

    def report(self, tenant: str, pipeline: str, item: QueueItem) -> None:
        self.items.append(item)


class World:
    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client
        self.nudges: list[tuple[str, Sequence[Any], str | None]] = []
        self.reports = Reports()
        self.env = Environment(
            client,
            Managers(),
            Formats(),
            lambda task, args, queue: self.nudges.append((task, args, queue)),
            [self.reports],
        )
        self.merger = JobRequestQueue(client, paths.merger_queue())
        self.executor = JobRequestQueue(client, paths.executor_queue())

    def enqueue(self, ref: str, commit: str = "c1") -> None:
        change = {
            "connection": "local",
            "project": "app",
            "branch": "main",
            "ref": ref,
            "commit": commit,
        }
        EventQueue(self.client, paths.pipeline_management_queue(TENANT, PIPELINE)).put(
            {"type": "enqueue", "change": change}
        )

    def process(self) -> bool:
        return processing.process_pipeline(self.env, TENANT, PIPELINE)

    def run(self, queue: JobRequestQueue, result: dict[str, Any]) -> list[str]:
        """Play the worker: claim and complete every pending request."""
        done = []
        for request in queue.pending():
            claimed = queue.claim(request.uuid, "test-worker")
            assert claimed is not None
            assert queue.complete(claimed, result)
            done.append(request.uuid)
        return done

    def state(self) -> Any:
        store = PipelineStore(self.client)
        return store.state(TENANT, PIPELINE, store.read(TENANT, PIPELINE))


@pytest.fixture
def world(zookeeper: ZooKeeperTarget) -> Iterator[World]:
    client = connect(zookeeper.settings())
    yield World(client)
    client.stop()
    client.close()


def test_an_item_goes_through_merge_builds_and_report(world: World) -> None:
    world.enqueue("feature")
    assert world.process()
    assert [n[0] for n in world.nudges] == [tasknames.MERGE]
    assert len(world.run(world.merger, {"ok": True})) == 1

    world.process()
    lint = world.run(world.executor, {"result": "SUCCESS", "data": {"artifact": "x"}})
    assert len(lint) == 1  # unit waits for lint
    assert world.nudges[-1] == (tasknames.BUILD, (lint[0], None), None)

    world.process()
    pending = world.executor.pending()
    assert [r.job_name for r in pending] == ["unit"]
    assert world.executor.params(pending[0].uuid)["parent_data"] == {"artifact": "x"}
    world.run(world.executor, {"result": "SUCCESS", "data": {}})

    world.process()
    assert [item.result for item in world.reports.items] == [Result.SUCCESS]
    assert world.state().items == {}
    for queue in processing.event_queues(world.env, TENANT, PIPELINE):
        assert queue.length() == 0
    assert not flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))


def test_a_busy_pipeline_coalesces_the_nudge(world: World) -> None:
    world.enqueue("feature")
    held = locks.acquire(world.client, paths.pipeline_lock(TENANT, PIPELINE))
    assert held is not None
    try:
        assert not world.process()  # another worker has it: flag raised, return
        assert flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))
    finally:
        held.release()
    assert world.process()
    assert len(world.merger.pending()) == 1
    assert not flags.is_raised(world.client, paths.pipeline_dirty(TENANT, PIPELINE))


def test_a_duplicate_result_event_is_applied_once(world: World) -> None:
    world.enqueue("feature")
    world.process()
    world.run(world.merger, {"ok": True})
    world.process()
    (lint,) = world.run(world.executor, {"result": "FAILURE", "data": {}})
    # The same completion announced twice (a redelivered event).
    EventQueue(world.client, paths.pipeline_result_queue(TENANT, PIPELINE)).put(
        {
            "type": "request-completed",
            "queue": paths.executor_queue(),
            "request": lint,
            "buildset": world.state().items[next(iter(world.state().items))].buildset.uuid,
            "job": "lint",
        }
    )
    world.process()
    assert [item.result for item in world.reports.items] == [Result.FAILURE]
    assert world.executor.pending() == []  # unit was skipped, never requested


def test_a_lost_merge_is_merged_again(world: World) -> None:
    world.enqueue("feature")
    world.process()
    (first,) = [r.uuid for r in world.merger.pending()]
    claimed = world.merger.claim(first, "doomed")
    assert claimed is not None
    claimed.lock.release()  # the merger died: its lock is gone, the request RUNNING
    (lost,) = world.merger.lost_requests()
    assert world.merger.recover_lost(lost)
    world.process()
    again = [r.uuid for r in world.merger.pending()]
    assert len(again) == 1 and again != [first]


def test_a_management_enqueue_records_its_item(world: World) -> None:
    change = {"connection": "local", "project": "app", "branch": "main", "ref": "f", "commit": "c1"}
    queue = EventQueue(world.client, paths.pipeline_management_queue(TENANT, PIPELINE))
    queue.put({"type": "enqueue", "change": change, "result_id": "r1"})
    queue.put({"type": "dequeue", "change": change, "result_id": "r2"})
    queue.put({"type": "dequeue", "change": change, "result_id": "r3"})
    world.process()
    item = stored.decode(world.client.get(paths.management_result("r1"))[0])
    assert set(item) == {"schema", "item"}
    dequeued = stored.decode(world.client.get(paths.management_result("r2"))[0])
    assert dequeued["dequeued"] == [item["item"]]
    missing = stored.decode(world.client.get(paths.management_result("r3"))[0])
    assert missing["error"] == "no such item in the pipeline"
