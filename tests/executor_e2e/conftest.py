"""Fixtures of the end-to-end executor tests: git, a ZooKeeper client, submitting builds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.stack import process, workers
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.executor.conftest import git_env  # noqa: F401  (autouse: git without user config)
from tests.executor.helpers import Repo
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory, WorkerProcess
from workers.executor import BuildSpec

TENANT = "tenant-one"
PIPELINE = "check"
RESULTS = paths.pipeline_result_queue(TENANT, PIPELINE)
# Short enough that a killed worker's lock vanishes quickly.
SESSION_TIMEOUT = 4.0


@pytest.fixture
def test_environment(
    zookeeper: ZooKeeperTarget, redis_url: str, state_dir: Path
) -> ServiceEnvironment:
    """Workers of these tests use a short ZooKeeper session timeout."""
    return ServiceEnvironment(
        zookeeper=zookeeper,
        redis_url=redis_url,
        state_dir=state_dir,
        session_timeout=SESSION_TIMEOUT,
    )


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo.create(tmp_path / "repos" / "project")


@dataclass
class Builds:
    """The scheduler's side, played by the test: submit build requests, read results."""

    environment: ServiceEnvironment
    client: ZooKeeperClient
    settings: Settings

    def queue(self, zone: str | None = None) -> JobRequestQueue:
        return JobRequestQueue(self.client, paths.executor_queue(zone))

    def submit(self, spec: BuildSpec, zone: str | None = None) -> JobRequest:
        request = JobRequest(
            uuid=uuid.uuid4().hex,
            tenant=spec.context.tenant,
            pipeline=spec.job.pipeline,
            buildset_uuid="buildset-1",
            job_name=spec.job.name,
            result_queue=RESULTS,
        )
        return self.queue(zone).submit(request, spec.to_dict())

    def events(self) -> list[tuple[str, str]]:
        """(type, request uuid) of every event in the pipeline's result queue."""
        return [
            (e.payload["type"], e.payload["request"])
            for e in EventQueue(self.client, RESULTS).read()
        ]

    def start_sweeper(self, factory: WorkerFactory, interval: float) -> WorkerProcess:
        """A maintenance worker running the beat timer with a short sweep interval."""
        node = f"sweeper-{uuid.uuid4().hex[:8]}@localhost"
        schedule = self.environment.state_dir / "run" / f"{node}.schedule"
        schedule.parent.mkdir(parents=True, exist_ok=True)
        argv = workers.worker_command(
            ["maintenance"], node, extra=["--beat", "--schedule", str(schedule)]
        )
        env = self.environment.env()
        env["SLUICE_SWEEP_INTERVAL"] = str(interval)
        log = self.environment.state_dir / "logs" / f"{node.split('@', maxsplit=1)[0]}.log"
        proc = process.spawn(argv, log, env=env, cwd=self.environment.state_dir)
        worker = WorkerProcess(node, proc.pid, log, ("maintenance",))
        factory.started.append(worker)
        factory.wait_ready(worker)
        return worker


@pytest.fixture
def builds(test_environment: ServiceEnvironment) -> Iterator[Builds]:
    settings = load_settings(environ=test_environment.env())
    client = connect(settings.zookeeper)
    yield Builds(test_environment, client, settings)
    client.stop()
    client.close()
