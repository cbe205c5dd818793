"""A pipeline's world for tests: fixed jobs, request formats, and a hand-played worker."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from scheduler.config.model import Dependency
from scheduler.manager import events as ev
from scheduler.manager.base import PipelineManager
from scheduler.manager.independent import IndependentManager
from scheduler.manager.intents import BuildIntent, MergeIntent
from scheduler.manager.settings import FreezeResult, PipelineSettings
from scheduler.model.build import JobInfo
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.processing import pipeline as processing
from scheduler.processing.environment import BuildOutcome, Environment, ItemReporter, NewRequest
from scheduler.state.store import PipelineStore
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.stores.ledger import TxnLedger
from scheduler.wire.events import JobResult
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.fixtures.services import ZooKeeperTarget

TENANT, PIPELINE = "t", "check"
JOBS = (JobInfo("lint"), JobInfo("unit", dependencies=(Dependency("lint"),)))


class Layout:
    def __init__(self, jobs: Sequence[JobInfo] = JOBS) -> None:
        self.jobs = tuple(jobs)

    def freeze(self, item: QueueItem, outcome: ev.MergeOutcome) -> FreezeResult:
        return FreezeResult(self.jobs)


class Managers:
    """Independent managers whose items all run ``jobs``."""

    def __init__(self, jobs: Sequence[JobInfo] = JOBS) -> None:
        self.jobs = tuple(jobs)

    def open(
        self, client: ZooKeeperClient, tenant: str, pipeline: str
    ) -> tuple[PipelineManager, TxnLedger]:
        ledger = TxnLedger(client, tenant)
        return IndependentManager(PipelineSettings(pipeline), Layout(self.jobs), ledger), ledger


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
        self.actions: list[str] = []

    def report(self, tenant: str, pipeline: str, item: QueueItem, action: str) -> None:
        self.items.append(item)
        self.actions.append(action)


class World:
    def __init__(self, client: ZooKeeperClient, reporters: Sequence[ItemReporter] = ()) -> None:
        self.client = client
        self.nudges: list[tuple[str, Sequence[Any], str | None]] = []
        self.reports = Reports()
        self.env = Environment(
            client,
            Managers(),
            Formats(),
            lambda task, args, queue, label="": self.nudges.append((task, args, queue)),
            [self.reports, *reporters],
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
