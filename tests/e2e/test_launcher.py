"""Launchers (issue 19, part 1) as real ``celery worker`` processes, with real faults.

A launcher is a worker consuming the ``launcher`` queue: its tick nudges
waiting node requests, the ``sluice.launcher.serve`` task serves them from
the providers of ``nodes:``. These tests serve static and local nodes,
hold requests back by quota and host capacity, fail a label nobody serves
with a ``NODE_FAILURE`` reason, and kill a launcher holding a request so
that another serves it once the dead session has expired.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.settings.nodes import NodeSettings
from scheduler.stores.images import ImageBuildState, ImageStore, ImageUploadState
from scheduler.stores.node_records import NodeRequest, NodeRequestState, NodeState
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import WorkerProcess
from workers.launcher.addresses import AddressPool
from workers.launcher.boot import shutdown_all

NODES = """
nodes:
  check_interval: 1
  node_dir: {root}/nodes
  providers:
    - name: hosts
      driver: static
      labels: {{ubuntu: 3}}
      hosts:
        - name: h1.example.com
          labels: [ubuntu]
          max_parallel_jobs: 1
        - name: h2.example.com
          labels: [ubuntu]
          max_parallel_jobs: 2
    - name: sandbox
      driver: local
      image: base
      labels: {{sandbox: 1}}
"""


@pytest.fixture
def client(system: SluiceSystem) -> Iterator[ZooKeeperClient]:
    made = connect(system.environment.zookeeper.settings())
    yield made
    made.stop()
    made.close()
    # local nodes a failed test left booted (namespace, sshd)
    shutdown_all(system.root / "nodes", AddressPool(NodeSettings().local_network))


def _configure(system: SluiceSystem) -> None:
    system.config.write_text(system.config.read_text() + NODES.format(root=system.root))


def _launcher(system: SluiceSystem) -> WorkerProcess:
    return system.start_worker(("launcher",))


def _image(client: ZooKeeperClient, root: Path) -> str:
    """A ready upload of image ``base`` to ``local``: a root with a shell, cat and a motd."""
    for tool in ("/bin/sh", "/bin/cat"):
        libraries = subprocess.run(["ldd", tool], capture_output=True, text=True, check=False)
        found = [w for w in libraries.stdout.split() if w.startswith("/")]
        for path in [tool, *found]:
            subprocess.run(["cp", "--parents", "-L", path, str(root)], check=True)
    for folder in ("etc", "proc", "dev"):
        (root / folder).mkdir(exist_ok=True)
    (root / "etc" / "motd").write_text("the base image\n")
    images = ImageStore(client)
    held = images.lock_builds("base", "test")
    assert held is not None
    with held:
        build = images.start_build(held, "base", "test")
        build = images.finish_build(held, build, ImageBuildState.READY)
    upload_lock = images.lock_upload(build, "local", "test")
    assert upload_lock is not None
    with upload_lock:
        upload = images.start_upload(upload_lock, build, "local")
        images.finish_upload(upload_lock, upload, ImageUploadState.READY, str(root))
    return f"base/{build.id}/{upload.id}"


def _served(store: NodeStore, request_id: str, timeout: float = 30) -> NodeRequest:
    def final() -> NodeRequest | None:
        request = store.request(request_id)
        finished = (NodeRequestState.FULFILLED, NodeRequestState.FAILED)
        return request if request is not None and request.state in finished else None

    return wait_until(final, timeout, f"node request {request_id} served")


def test_static_and_local_nodes_quotas_and_a_label_nobody_serves(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    _configure(system)
    image_root = system.root / "image-root"
    image_root.mkdir()
    upload = _image(client, image_root)
    _launcher(system)
    store = NodeStore(client)

    # static: one node per label, spread over the hosts by their capacity
    first = _served(store, store.submit(["ubuntu", "ubuntu"], "t/check/a"))
    assert first.state == NodeRequestState.FULFILLED, first.reason
    nodes = store.nodes(first.nodes)
    assert sorted(n.host for n in nodes) == ["h1.example.com", "h2.example.com"]
    assert all(n.state == NodeState.READY and n.provider == "hosts" for n in nodes)
    assert nodes[0].connection["username"] == "zuul" and nodes[0].connection["port"] == 22

    # the quota (3 ubuntu nodes) holds the next request back until nodes are returned
    waiting_id = store.submit(["ubuntu", "ubuntu"], "t/check/b")
    time.sleep(3)
    waiting = store.request(waiting_id)
    assert waiting is not None and waiting.state == NodeRequestState.REQUESTED
    taken = store.accept(first.id, "executor-1")
    store.return_nodes(taken)
    second = _served(store, waiting_id)
    assert second.state == NodeRequestState.FULFILLED
    wait_until(lambda: store.nodes(first.nodes) == [], 30, "used nodes deleted")

    # local: a fresh root copied from the image's newest ready upload, booted
    local = _served(store, store.submit(["sandbox"], "t/check/c"))
    assert local.state == NodeRequestState.FULFILLED, local.reason
    (node,) = store.nodes(local.nodes)
    assert node.image_upload == upload and node.provider == "sandbox"
    assert node.connection["port"] == 22 and node.connection["username"] == "root"
    assert node.connection["host"] != node.host, "its own address; the launcher's host"
    root = Path(node.connection["root"])
    assert root.is_relative_to(system.root / "nodes")
    assert (root / "etc" / "motd").read_text() == "the base image\n"
    if shutil.which("bwrap"):
        sandbox = ["bwrap", "--bind", str(root), "/", "--proc", "/proc", "--dev", "/dev"]
        booted = subprocess.run(
            [*sandbox, "--unshare-all", "/bin/sh", "-c", "cat /etc/motd"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert booted.stdout == "the base image\n"
    (root / "etc" / "motd").write_text("changed by a job\n")
    assert (image_root / "etc" / "motd").read_text() == "the base image\n", "a copy"
    store.return_nodes(store.accept(local.id, "executor-1"))
    wait_until(lambda: not root.exists() and store.node(node.id) is None, 30, "root removed")

    # a label no provider serves fails at once, with the reason the job will show
    failed = _served(store, store.submit(["gpu", "ubuntu"], "t/check/d"))
    assert failed.state == NodeRequestState.FAILED
    assert failed.reason == "NODE_FAILURE: no provider serves label(s) gpu"
    mixed = _served(store, store.submit(["sandbox", "ubuntu"], "t/check/e"))
    assert mixed.reason == "NODE_FAILURE: no one provider serves all of sandbox, ubuntu"


def test_a_killed_launcher_holding_a_request_is_replaced_after_its_session(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    system.environment.session_timeout = 4.0
    _configure(system)
    store = NodeStore(client)
    # Hold the provider's allocation lock: the launcher that takes the request
    # waits for it while holding the request's lock.
    blocker = store.lock_provider("hosts", "test")
    assert blocker is not None
    doomed = _launcher(system)
    request_id = store.submit(["ubuntu"], "t/gate/a")
    holders = wait_until(lambda: store.request_lock_holders(request_id), 30, "a launcher holds it")
    doomed.kill(signal.SIGKILL)
    # checked at once: the dead session holds the lock only until it expires
    # (4 s), and starting a worker on a loaded machine can take longer than that
    held = store.request(request_id)
    assert held is not None and held.state == NodeRequestState.REQUESTED
    assert store.request_lock_holders(request_id) == holders, "the dead session still holds it"
    _launcher(system)
    blocker.release()
    served = _served(store, request_id, timeout=60)
    assert served.state == NodeRequestState.FULFILLED, served.reason
    assert served.launcher not in holders, "served by the other launcher"
    assert store.request_lock_holders(request_id) == []
