"""Smoke tests of docker/compose.yaml against a real Docker engine.

Marked ``docker`` and left out of the default run (``-m 'not docker'`` in
pyproject.toml): these machines have no Docker engine. Where one exists::

    .venv/bin/pip install -e '.[docker]'
    .venv/bin/pytest -m docker tests/docker -v

The deployment is built and started once for the module under a project
name of its own, with Redis published on a free loopback port (the override
``compose.smoke.yaml``) and Flower on a free port, and removed with its
volumes at the end. The worker containers are driven through pytest-celery's
node API (logs, readiness); the round trips go through the real broker, the
real workers and the three-node ZooKeeper ensemble. Without a reachable
Docker engine the tests fail: they never skip.
"""

from __future__ import annotations

import base64
import importlib
import json
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from scheduler.nudge import task_names
from tests.docker.deployment import COMPOSE_FILE, load_compose, worker_services

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

SMOKE_OVERRIDE = Path(__file__).with_name("compose.smoke.yaml")
UP_TIMEOUT = 900  # seconds: the first run builds the image and pulls four others
ZOOKEEPER_NODES = ("zk1", "zk2", "zk3")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    """One running compose project and how to reach it."""

    project: str
    env: dict[str, str]
    flower_port: int
    flower_auth: str
    broker_url: str = ""
    workers: dict[str, list[str]] = field(default_factory=dict)

    def compose(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            "docker",
            "compose",
            "--project-name",
            self.project,
            "--file",
            str(COMPOSE_FILE),
            "--file",
            str(SMOKE_OVERRIDE),
            *args,
        ]
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(
                f"`{' '.join(argv)}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def container_ids(self, service: str) -> list[str]:
        ids = self.compose("ps", "--quiet", service).stdout.split()
        assert ids, f"no running container for service {service}"
        return ids

    def published(self, service: str, port: int) -> tuple[str, int]:
        address = self.compose("port", service, str(port)).stdout.strip()
        host, _, number = address.rpartition(":")
        return host, int(number)

    def zookeeper_mode(self, node: str) -> str:
        """The ``Mode:`` line of ``srvr`` on ``node`` (leader, follower, ...)."""
        script = "exec 3<>/dev/tcp/127.0.0.1/2181; printf srvr >&3; cat <&3"
        output = self.compose("exec", "-T", node, "bash", "-c", script, check=False).stdout
        for line in output.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return "not serving"


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    if shutil.which("docker") is None:
        pytest.fail("the docker tests need the docker CLI with the compose plugin")
    import os

    env = dict(os.environ)
    flower_port = _free_port()
    flower_auth = f"smoke:{secrets.token_hex(12)}"
    redis_password = secrets.token_hex(16)
    env.update(
        POSTGRES_PASSWORD=secrets.token_hex(16),
        REDIS_PASSWORD=redis_password,
        ZOOKEEPER_PASSWORD=secrets.token_hex(16),
        FLOWER_BASIC_AUTH=flower_auth,
        FLOWER_PORT=str(flower_port),
        SLUICE_IMAGE_TAG="smoke",
    )
    deployment = Deployment(
        project=f"sluice-smoke-{uuid.uuid4().hex[:8]}",
        env=env,
        flower_port=flower_port,
        flower_auth=flower_auth,
        workers=worker_services(load_compose()),
    )
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, check=False)
    if info.returncode != 0:
        pytest.fail(f"no reachable Docker engine: {info.stderr.strip()}")
    try:
        deployment.compose("build", timeout=UP_TIMEOUT)
        deployment.compose(
            "up", "--detach", "--wait", "--wait-timeout", str(UP_TIMEOUT), timeout=UP_TIMEOUT + 60
        )
        host, port = deployment.published("redis", 6379)
        deployment.broker_url = f"redis://:{redis_password}@{host}:{port}/0"
        yield deployment
    finally:
        logs = deployment.compose("logs", "--no-color", "--tail", "50", check=False).stdout
        print(logs)  # shown by pytest when a test failed
        deployment.compose("down", "--volumes", "--remove-orphans", "--timeout", "30", check=False)


@pytest.fixture(scope="module")
def client_app(deployment: Deployment) -> Iterator[Celery]:
    """A plain Celery client on the published broker (results in the same Redis)."""
    app = Celery("sluice-smoke", broker=deployment.broker_url, backend=deployment.broker_url)
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    yield app
    app.close()


@pytest.fixture(scope="module")
def docker_client() -> Any:
    # docker-py, brought by pytest-celery (imported by name: ./docker is not it)
    docker = importlib.import_module("docker")
    return docker.from_env()


@dataclass(frozen=True)
class WorkerNode:
    """A worker container of the deployment, through pytest-celery's node API."""

    service: str
    node: Any  # pytest_celery.CeleryTestNode
    hostname: str

    @property
    def celery_name(self) -> str:
        return f"{self.service}@{self.hostname}"


def worker_nodes(
    deployment: Deployment, docker_client: Any, app: Celery, service: str
) -> list[WorkerNode]:
    from pytest_celery import CeleryTestContainer, CeleryTestNode  # type: ignore[import-not-found]

    nodes = []
    for container_id in deployment.container_ids(service):
        container = docker_client.containers.get(container_id)
        node = CeleryTestNode(CeleryTestContainer(container), app)
        assert node.ready(), f"{service}: container {container.name} is not running"
        nodes.append(WorkerNode(service, node, container.attrs["Config"]["Hostname"]))
    return nodes


def roundtrip(app: Celery, timeout: float = 60) -> tuple[str, dict[str, Any], str]:
    token = uuid.uuid4().hex
    result = app.send_task(task_names.ROUNDTRIP, args=[token], queue="maintenance")
    reply = result.get(timeout=timeout)
    assert reply["read"] == reply["written"], reply
    assert reply["read"]["token"] == token, reply
    return token, reply, str(result.id)


# --------------------------------------------------------------------------


def test_every_service_is_running_and_healthy(deployment: Deployment) -> None:
    listing = deployment.compose("ps", "--format", "json").stdout.strip()
    # One JSON object per line (compose >= 2.21) or one JSON array (older).
    rows = (
        json.loads(listing)
        if listing.startswith("[")
        else [json.loads(line) for line in listing.splitlines() if line.strip()]
    )
    expected = {
        name for name, service in load_compose()["services"].items() if not service.get("profiles")
    }
    assert {row["Service"] for row in rows} == expected
    for row in rows:
        assert row["State"] == "running", row
        assert row.get("Health") in ("healthy", ""), row


def test_the_zookeeper_nodes_form_one_ensemble(deployment: Deployment) -> None:
    modes = sorted(deployment.zookeeper_mode(node) for node in ZOOKEEPER_NODES)
    assert modes == ["follower", "follower", "leader"]


def test_every_worker_answers_a_ping_under_its_node_name(
    deployment: Deployment, docker_client: Any, client_app: Celery
) -> None:
    for service, argv in deployment.workers.items():
        prefix = argv[argv.index("-n") + 1].partition("@")[0]
        for worker in worker_nodes(deployment, docker_client, client_app, service):
            name = f"{prefix}@{worker.hostname}"
            replies = client_app.control.ping(destination=[name], timeout=5) or []
            assert any(name in reply for reply in replies), f"{service}: no pong from {name}"
            worker.node.assert_log_exists("ready.", timeout=5)


def test_a_round_trip_from_inside_the_deployment(deployment: Deployment) -> None:
    done = deployment.compose("exec", "-T", "maintenance", "sluice", "demo", "--timeout", "60")
    assert "round trip OK" in done.stdout, done.stdout


def test_a_round_trip_through_the_broker_reaches_the_maintenance_worker(
    deployment: Deployment, docker_client: Any, client_app: Celery
) -> None:
    _, reply, task_id = roundtrip(client_app)
    nodes = worker_nodes(deployment, docker_client, client_app, "maintenance")
    assert reply["read"]["hostname"] in {worker.hostname for worker in nodes}
    # The worker logged receiving exactly this task.
    for worker in nodes:
        if reply["read"]["hostname"] == worker.hostname:
            worker.node.assert_log_exists(task_id, timeout=10)


def test_the_cli_reads_build_history_from_postgres(deployment: Deployment) -> None:
    done = deployment.compose("run", "--rm", "--no-deps", "cli", "builds", "--json")
    assert isinstance(json.loads(done.stdout), list), done.stdout


def test_flower_refuses_requests_without_credentials(deployment: Deployment) -> None:
    url = f"http://127.0.0.1:{deployment.flower_port}/api/workers"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code == 401
    token = base64.b64encode(deployment.flower_auth.encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_scaled_schedulers_each_answer(
    deployment: Deployment, docker_client: Any, client_app: Celery
) -> None:
    deployment.compose(
        "up", "--detach", "--wait", "--no-recreate", "--scale", "scheduler=2", "scheduler"
    )
    nodes = worker_nodes(deployment, docker_client, client_app, "scheduler")
    assert len(nodes) == 2
    names = [worker.celery_name for worker in nodes]
    replies = client_app.control.ping(destination=names, timeout=5) or []
    answered = {name for reply in replies for name in reply}
    assert answered == set(names)


def test_a_round_trip_survives_stopping_the_zookeeper_leader(
    deployment: Deployment, client_app: Celery
) -> None:
    leader = next(n for n in ZOOKEEPER_NODES if deployment.zookeeper_mode(n) == "leader")
    deployment.compose("stop", leader)
    try:
        # The other two still form a quorum; the workers' sessions move over.
        deadline = time.monotonic() + 60
        while sorted(deployment.zookeeper_mode(n) for n in ZOOKEEPER_NODES if n != leader) != [
            "follower",
            "leader",
        ]:
            assert time.monotonic() < deadline, "no new leader within 60 s"
            time.sleep(1)
        roundtrip(client_app, timeout=90)
    finally:
        deployment.compose("up", "--detach", "--wait", "--no-deps", leader)
    roundtrip(client_app)
