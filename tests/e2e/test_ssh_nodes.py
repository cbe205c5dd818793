"""Jobs that SSH into their nodes, on real workers (issue 19, parts 1 and 3).

* A **local** node is booted by the launcher from a directory image: the
  job reads its address from ``nodes.json`` and logs in with the node key
  (``nodes.ssh_key``; the test hands the job a copy, since the executor's
  agent is not part of this test), reads the image's ``/etc/image-release``
  and runs ``python3`` there.
* A **static** host is the ``ssh_host`` fixture (a real sshd on
  127.0.0.1): with ``max_parallel_jobs: 1`` two jobs log in to it one
  after the other.
* A launcher killed with SIGKILL leaves the node it booted running (its
  sshd is a daemon of the node); once the node is returned, another
  launcher's check shuts it down and removes it.

Every node a test booted is shut down at the end, even when it fails.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler import testhooks
from scheduler.settings.nodes import NodeSettings
from scheduler.stores.images import ImageBuildState, ImageStore, ImageUploadState
from scheduler.stores.node_records import NodeRequest, NodeRequestState
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import CHECK_CONFIG, NODE_NETWORK, TENANT_YAML, SluiceSystem
from tests.fixtures.services import missing_service
from tests.fixtures.sshd import SshHost, ssh_options
from tests.fixtures.waiting import wait_until
from workers.launcher.addresses import NETNS_DIR, AddressPool
from workers.launcher.boot import node_pid, shutdown_all
from workers.nodekey import ensure_node_key, public_key

LOCAL = """
nodes:
  check_interval: 1
  node_dir: {root}/nodes
  ssh_key: {root}/ssh/nodes_ed25519
  providers:
    - name: sandbox
      driver: local
      image: base
      labels: {{sandbox: 2}}
"""

STATIC = """
nodes:
  check_interval: 1
  ssh_key: {key}
  providers:
    - name: hosts
      driver: static
      labels: {{static: 2}}
      hosts:
        - name: 127.0.0.1
          labels: [static]
          port: {port}
          username: root
          max_parallel_jobs: 1
"""

# The job: the node's address from nodes.json, then SSH with the key the test gave it.
LOGIN = r"""#!/bin/sh
set -e
set -- $(python3 -c '
import json, os
node = json.load(open(os.path.join(os.environ["SLUICE_WORKSPACE"], "nodes.json")))[0]
c = node["connection"]
print(c["host"], c["port"], c["username"])
')
node() {{ ssh {options} -p "$2" "$3@$1" "$4"; }}
{body}
"""

LOCAL_BODY = """
release=$(node "$1" "$2" "$3" 'cat /etc/image-release')
test "$release" = "sluice test image 3" || { echo "unexpected: $release"; exit 1; }
test "$(node "$1" "$2" "$3" 'python3 -c "print(6 * 7)"')" = 42
echo "logged in to $1: $release"
"""

STATIC_BODY = """
node "$1" "$2" "$3" 'echo start >> {log}; sleep 2; echo end >> {log}'
"""


def _app(label: str, script: str) -> dict[str, str]:
    return {
        ".zuul.yaml": f"""
            - job:
                name: on-node
                run: ci/login.sh
                nodeset:
                  nodes:
                    - name: n1
                      label: {label}
            - project:
                check:
                  jobs: [on-node]
            """,
        "ci/login.sh": script,
    }


def _job_key(system: SluiceSystem, key: Path) -> Path:
    """A copy of the node key where the job's sandbox can read it."""
    ensure_node_key(key)
    copy = system.root / "job-key" / "id_ed25519"
    copy.parent.mkdir()
    shutil.copyfile(key, copy)
    copy.chmod(0o644)  # the job is a user of its own; ssh takes a key it does not own
    copy.parent.chmod(0o755)
    return copy


def _login_script(job_key: Path, body: str) -> str:
    return LOGIN.format(options=" ".join(ssh_options(job_key)), body=body)


def _publish_image(client: ZooKeeperClient, root: Path, *, broken: bool = False) -> None:
    """A ready upload of image ``base`` to ``local``: what an image script would make.

    ``broken``: its ``/etc/passwd`` is a dangling link, so the node's sshd
    finds no user to run as and exits.
    """
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "image-release").write_text("sluice test image 3\n")
    if broken:
        (root / "etc" / "passwd").symlink_to("nowhere")
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


@pytest.fixture
def client(system: SluiceSystem) -> Iterator[ZooKeeperClient]:
    made = connect(system.environment.zookeeper.settings())
    yield made
    made.stop()
    made.close()


@pytest.fixture
def local_nodes(system: SluiceSystem) -> Iterator[Path]:
    """The node folder of the test's local nodes; whatever was booted there is shut down."""
    for tool in ("bwrap", "ip", "ssh"):
        if shutil.which(tool) is None:
            missing_service(tool)
    node_dir = system.root / "nodes"
    try:
        yield node_dir
    finally:
        shutdown_all(node_dir, AddressPool(NodeSettings().local_network))


def _start(system: SluiceSystem, nodes: str, app: dict[str, str], refs: int = 1) -> None:
    system.config.write_text(system.config.read_text() + NODE_NETWORK + nodes)
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", app)
    for n in range(refs):
        system.repos.commit("app", f"feature{n}", {"README": f"{n}\n"}, base=base)
    system.start_workers()
    system.start_worker(("launcher",), concurrency=1)
    system.sluice("reconfigure")


def _no_node_left(client: ZooKeeperClient, node_dir: Path | None = None) -> None:
    store = NodeStore(client)
    wait_until(lambda: not store.nodes(), timeout=30, what="the used nodes deleted")
    if node_dir is not None:
        assert not any(node_dir.glob("*")), "every node folder removed"
        pool = AddressPool(NodeSettings().local_network)
        assert [x for x in pool.leases() if x.folder.parent == node_dir] == []


def test_a_job_logs_in_to_its_local_node_and_reads_the_image(
    system: SluiceSystem, client: ZooKeeperClient, local_nodes: Path
) -> None:
    job_key = _job_key(system, system.root / "ssh" / "nodes_ed25519")
    _publish_image(client, system.root / "image")
    _start(
        system,
        LOCAL.format(root=system.root),
        _app("sandbox", _login_script(job_key, LOCAL_BODY)),
    )
    system.enqueue("feature0")
    system.sluice("wait", "--idle", "--timeout", "120")
    (build,) = system.builds()
    assert build["result"] == "SUCCESS", build
    _no_node_left(client, local_nodes)


def test_two_jobs_use_a_static_host_one_after_the_other(
    system: SluiceSystem, client: ZooKeeperClient, ssh_host: SshHost
) -> None:
    log = system.root / "static-host.log"
    job_key = _job_key(system, ssh_host.key)
    nodes = STATIC.format(key=ssh_host.key, port=ssh_host.port)
    script = _login_script(job_key, STATIC_BODY.format(log=log))
    _start(system, nodes, _app("static", script), refs=2)
    # what the operator installed on the host is what `sluice nodes pubkey` prints
    assert system.sluice("nodes", "pubkey").strip() == public_key(ssh_host.key)
    system.enqueue("feature0")
    system.enqueue("feature1")
    system.sluice("wait", "--idle", "--timeout", "120")
    builds = sorted(system.builds(), key=lambda b: b["start_time"])
    assert [b["result"] for b in builds] == ["SUCCESS", "SUCCESS"]
    assert log.read_text().split() == ["start", "end", "start", "end"], "one job at a time"
    _no_node_left(client)


def test_a_node_that_cannot_boot_fails_its_request_and_leaves_nothing(
    system: SluiceSystem, client: ZooKeeperClient, local_nodes: Path
) -> None:
    _publish_image(client, system.root / "image", broken=True)
    system.config.write_text(
        system.config.read_text() + NODE_NETWORK + LOCAL.format(root=system.root)
    )
    system.start_worker(("launcher",), concurrency=1)
    store = NodeStore(client)
    failed = _served(store, store.submit(["sandbox"], "t/check/a"))
    assert failed.state == NodeRequestState.FAILED
    assert failed.reason.startswith("NODE_FAILURE: booting node-"), failed.reason
    assert "the node's sshd exited" in failed.reason
    store.delete_request(failed.id)
    _no_node_left(client, local_nodes)


def _served(store: NodeStore, request_id: str) -> NodeRequest:
    def final() -> NodeRequest | None:
        request = store.request(request_id)
        done = (NodeRequestState.FULFILLED, NodeRequestState.FAILED)
        return request if request is not None and request.state in done else None

    served = wait_until(final, 60, f"node request {request_id} served")
    assert served is not None
    return served


def test_a_killed_launcher_leaves_its_node_running_and_another_removes_it(
    system: SluiceSystem, client: ZooKeeperClient, local_nodes: Path
) -> None:
    key = system.root / "ssh" / "nodes_ed25519"
    _publish_image(client, system.root / "image")
    system.config.write_text(
        system.config.read_text() + NODE_NETWORK + LOCAL.format(root=system.root)
    )
    doomed = system.start_worker(("launcher",), concurrency=1)
    store = NodeStore(client)
    served = _served(store, store.submit(["sandbox"], "t/check/a"))
    assert served.state == NodeRequestState.FULFILLED, served.reason
    (node,) = store.nodes(served.nodes)
    folder = local_nodes / node.id
    doomed.kill(signal.SIGKILL)
    time.sleep(1)
    assert node_pid(folder) is not None, "the node outlives its launcher"
    host = SshHost(
        node.connection["host"], node.connection["port"], "root", key, folder / "sshd.log"
    )
    login = host.ssh("cat /etc/image-release")
    assert login.stdout == "sluice test image 3\n", login.stderr
    listed = json.loads(system.sluice("nodes", "list", "--json"))
    (shown,) = listed["nodes"]
    assert (shown["id"], shown["state"]) == (node.id, "ready")
    assert shown["connection"]["host"] == node.connection["host"]
    store.return_nodes(store.accept(served.id, "executor-1"))
    system.start_worker(("launcher",), concurrency=1)
    started = time.monotonic()
    _no_node_left(client, local_nodes)
    print(f"node removed {time.monotonic() - started:.1f} s after the new launcher was up")
    assert not (NETNS_DIR / str(node.connection["netns"])).exists()
    assert host.ssh("true", timeout=10).returncode == 255, "nothing answers any more"


def test_a_launcher_killed_mid_boot_leaves_nothing_once_another_recovers(
    system: SluiceSystem, client: ZooKeeperClient, local_nodes: Path
) -> None:
    """SIGKILL with the node's address leased and its network made, before its sshd."""
    _publish_image(client, system.root / "image")
    system.config.write_text(
        system.config.read_text() + NODE_NETWORK + LOCAL.format(root=system.root)
    )
    flag = system.root / "hold-boot"
    flag.write_text("")
    doomed = system.start_worker(("launcher",), concurrency=1, env={testhooks.HOLD_BOOT: str(flag)})
    store = NodeStore(client)
    request_id = store.submit(["sandbox"], "t/check/a")
    wait_until(lambda: list(system.root.glob("hold-boot.held-*")), 60, "a boot held")
    (half,) = store.nodes()
    assert half.state == "building"
    pool = AddressPool(NodeSettings().local_network)
    (lease,) = [x for x in pool.leases() if x.folder == local_nodes / half.id]
    assert (NETNS_DIR / lease.netns).exists(), "the node's namespace was made"
    doomed.kill(signal.SIGKILL)
    flag.unlink()
    system.start_worker(("launcher",), concurrency=1)  # after the dead one's session
    served = _served(store, request_id)
    assert served.state == NodeRequestState.FULFILLED, served.reason
    assert half.id not in served.nodes, "a fresh node, not the half-booted one"
    wait_until(  # the half-booted node: found abandoned, deleted by a check
        lambda: half.id not in [node.id for node in store.nodes()], 30, "the half node deleted"
    )
    assert not (local_nodes / half.id).exists(), "its folder is gone"
    assert lease not in pool.leases(), "its address is free"
    (fresh,) = store.nodes(served.nodes)
    if (NETNS_DIR / lease.netns).exists():  # the address went to the fresh node
        assert fresh.connection["netns"] == lease.netns
    store.return_nodes(store.accept(served.id, "executor-1"))
    _no_node_left(client, local_nodes)
