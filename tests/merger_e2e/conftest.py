"""Fixtures of the end-to-end merger tests: remotes, a stand-in ssh, submitting merges.

Projects live under one base directory, reached through two git
connections: ``git`` (a local path) and ``review`` (``ssh://``, through a
stand-in ssh that runs the remote command on this host, logs each call and
stalls while a flag file exists: a slow remote, which makes a merge job as
slow as a test needs; ``git merge-tree`` runs no hooks, so the transport is
where to slow a merge down). The workers get both connections from a
``sluice.yaml`` (``SLUICE_CONFIG``) and the stand-in through
``GIT_SSH_COMMAND``, which the merger passes through to git.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cli.stack import process, workers
from scheduler.nudge import dispatch
from scheduler.settings.load import load_settings
from scheduler.settings.sections import ConnectionSettings, Settings
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.stores.merge_requests import merger_queue, submit_merge_job
from scheduler.wire.merger import MergerJob, job_kind
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from tests.fixtures.services import ZooKeeperTarget
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory, WorkerProcess
from tests.merger.gitrepos import Remotes
from workers.merger import RepoCache

TENANT = "tenant-one"
PIPELINE = "gate"
RESULTS = paths.pipeline_result_queue(TENANT, PIPELINE)
# Short enough that a killed worker's lock vanishes quickly.
SESSION_TIMEOUT = 4.0

_SSH = """#!/bin/sh
# A stand-in ssh: run the remote command (the last argument) on this host.
for last; do :; done
echo "$last" >> {log}
if [ -e {flag} ]; then
    echo $$ > {pid}.tmp && mv {pid}.tmp {pid}
    while [ -e {flag} ]; do sleep 0.1; done
fi
exec sh -c "$last"
"""


@dataclass(frozen=True)
class FakeSsh:
    """The stand-in ssh (``path``), its call log, stall flag and the pid of a stalled call."""

    path: Path
    log: Path
    flag: Path
    pid_file: Path

    @classmethod
    def create(cls, folder: Path) -> FakeSsh:
        folder.mkdir(parents=True)
        ssh = cls(folder / "ssh", folder / "calls.log", folder / "stall", folder / "stalled.pid")
        ssh.path.write_text(_SSH.format(log=ssh.log, flag=ssh.flag, pid=ssh.pid_file))
        ssh.path.chmod(0o755)
        return ssh

    def calls(self, project: str) -> list[str]:
        """The remote commands run for ``project`` so far."""
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text().splitlines() if f"/{project}'" in line]

    def stall(self) -> None:
        self.flag.touch()

    def release(self) -> None:
        self.flag.unlink(missing_ok=True)

    def stalled_pid(self) -> int:
        """The pid of the stalled call, once there is one (0 until then)."""
        text = self.pid_file.read_text() if self.pid_file.exists() else ""
        return int(text) if text.strip() else 0


@pytest.fixture
def remotes(tmp_path: Path) -> Remotes:
    return Remotes(tmp_path / "remotes", tmp_path / "home")


def local_cache(folder: Path, remotes: Remotes) -> RepoCache:
    """A repo cache in ``folder`` whose connection ``git`` reaches ``remotes`` by path."""
    return RepoCache(folder, {"git": ConnectionSettings("git", "git", str(remotes.base))})


@pytest.fixture
def cache(tmp_path: Path, remotes: Remotes) -> RepoCache:
    """A worker's repo cache, for the service called without Celery."""
    return local_cache(tmp_path / "worker", remotes)


@pytest.fixture
def fake_ssh(tmp_path: Path) -> FakeSsh:
    return FakeSsh.create(tmp_path / "ssh")


@pytest.fixture
def config_file(state_dir: Path, remotes: Remotes) -> Path:
    path = state_dir / "sluice.yaml"
    path.write_text(
        "connections:\n"
        f"  git: {{driver: git, baseurl: '{remotes.base}'}}\n"
        f"  review: {{driver: git, baseurl: 'ssh://git@localhost{remotes.base}'}}\n"
    )
    return path


@pytest.fixture
def test_environment(
    zookeeper: ZooKeeperTarget,
    redis_url: str,
    state_dir: Path,
    config_file: Path,
    fake_ssh: FakeSsh,
) -> ServiceEnvironment:
    """Workers with both connections, the stand-in ssh and a short session timeout."""
    return ServiceEnvironment(
        zookeeper=zookeeper,
        redis_url=redis_url,
        state_dir=state_dir,
        session_timeout=SESSION_TIMEOUT,
        extra={"SLUICE_CONFIG": str(config_file), "GIT_SSH_COMMAND": str(fake_ssh.path)},
    )


@dataclass
class Merges:
    """The scheduler's side, played by the test: submit merge requests, read results."""

    environment: ServiceEnvironment
    client: ZooKeeperClient
    settings: Settings

    @property
    def queue(self) -> JobRequestQueue:
        return merger_queue(self.client)

    def submit(self, job: MergerJob, *, wait: bool = False) -> JobRequest:
        return submit_merge_job(
            self.client,
            job_kind(job),
            job,
            tenant=TENANT,
            pipeline=PIPELINE,
            buildset=f"buildset-{job.job_id}",
            result_queue=RESULTS,
            wait=wait,
        )

    def send(self, request_uuid: str) -> Any:
        """Nudge a merger (``sluice.merger.run`` on the ``merger`` queue); an AsyncResult.

        A merge stores no result when it succeeds (tasks/merger.py): its
        outcome is read from its ``task-succeeded`` event (``published``).
        """
        return dispatch.send_merge(request_uuid, settings=self.settings)

    def events(self) -> list[tuple[str, str]]:
        """(type, request uuid) of every event in the pipeline's result queue."""
        return [
            (e.payload["type"], e.payload["request"])
            for e in EventQueue(self.client, RESULTS).read()
        ]

    def start_mergers(
        self, factory: WorkerFactory, count: int, *, concurrency: int = 1
    ) -> list[WorkerProcess]:
        """``count`` merger workers, started side by side."""
        started = [
            factory.start(["merger"], concurrency=concurrency, wait=False) for _ in range(count)
        ]
        for worker in started:
            factory.wait_ready(worker)
        return started

    def start_sweeper(
        self, factory: WorkerFactory, interval: float, *, wait: bool = True
    ) -> WorkerProcess:
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
        if wait:
            factory.wait_ready(worker)
        return worker


@pytest.fixture
def merges(test_environment: ServiceEnvironment, config_file: Path) -> Iterator[Merges]:
    settings = load_settings(config_file, environ=test_environment.env())
    client = connect(settings.zookeeper)
    yield Merges(test_environment, client, settings)
    client.stop()
    client.close()


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents, read from /proc."""
    chain = []
    while pid > 1:
        chain.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def worker_of(request: JobRequest | None, nodes: Sequence[WorkerProcess]) -> WorkerProcess:
    """The worker whose node claimed ``request``."""
    assert request is not None
    return next(w for w in nodes if request.worker.startswith(f"{w.node}:"))
