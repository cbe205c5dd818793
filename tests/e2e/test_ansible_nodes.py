"""The whole Nodepool side at once, on real workers (issue 19, parts 1 to 3).

An image builder builds image ``base`` with a script; a launcher boots a
local node from its upload; the executor runs the job's playbook on that
node over SSH with the deployment's node key (in an agent: the job never
sees the key); the playbook reads what the image script wrote and the
variables Zuul's jobs know. Then the node is returned and deleted.

And the executor killed (SIGKILL) while its playbook runs on the only node
its label's quota allows: the dead executor's node is recovered and
deleted, so the retried build gets a fresh one and succeeds.
"""

from __future__ import annotations

import shutil
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.settings.nodes import NodeSettings
from scheduler.stores.images import ImageBuildState, ImageStore
from scheduler.stores.node_records import NodeState
from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import CHECK_CONFIG, NODE_NETWORK, TENANT_YAML, SluiceSystem
from tests.fixtures.services import missing_service
from tests.fixtures.waiting import wait_until
from workers.launcher.addresses import AddressPool
from workers.launcher.boot import shutdown_all

# The image: a release file naming the build (the node has the host's /usr).
IMAGE_SCRIPT = """\
#!/bin/sh
set -e
mkdir -p "$SLUICE_IMAGE_ROOT/etc"
echo "$SLUICE_IMAGE build $SLUICE_IMAGE_BUILD" > "$SLUICE_IMAGE_ROOT/etc/image-release"
"""

SETTINGS = """
images:
  check_interval: 1
  build_dir: {root}/builds
  providers:
    local:
      image_dir: {root}/uploads
  diskimages:
    - name: base
      script: {root}/build-image.sh
      rebuild_interval: 0
      providers: [local]
nodes:
  check_interval: 1
  node_dir: {root}/nodes
  ssh_key: {root}/ssh/nodes_ed25519
  providers:
    - name: sandbox
      driver: local
      image: base
      labels: {{sandbox: 1}}
"""

PLAYBOOK = """\
- hosts: web
  tasks:
    - name: read the image
      command: cat /etc/image-release
      register: release
    - name: the node was booted from the image the builder made
      assert:
        that: release.stdout.startswith('base build ')
    - name: greet
      command: echo "{{ greeting }} from {{ zuul.project.name }} on {{ nodepool.label }}"
    - name: leave a mark on the node
      copy:
        content: "{{ zuul.build }}"
        dest: /root/built-by
- hosts: localhost
  tasks:
    - name: the executor's side sees the node's facts
      debug:
        msg: "image of n1: {{ hostvars['n1'].release.stdout }}"
"""

APP = {
    ".zuul.yaml": """
        - job:
            name: on-node
            run: playbooks/run.yaml
            vars:
              greeting: hello
            nodeset:
              nodes:
                - name: n1
                  label: sandbox
              groups:
                - name: web
                  nodes: [n1]
        - project:
            check:
              jobs: [on-node]
        """,
    "playbooks/run.yaml": PLAYBOOK,
}


@pytest.fixture
def client(system: SluiceSystem) -> Iterator[ZooKeeperClient]:
    made = connect(system.environment.zookeeper.settings())
    yield made
    made.stop()
    made.close()


@pytest.fixture
def node_dir(system: SluiceSystem) -> Iterator[Path]:
    """The test's local nodes; whatever was booted there is shut down, even on failure."""
    for tool in ("bwrap", "ip", "ssh", "ssh-agent"):
        if shutil.which(tool) is None:
            missing_service(tool)
    folder = system.root / "nodes"
    try:
        yield folder
    finally:
        shutdown_all(folder, AddressPool(NodeSettings().local_network))


def test_a_playbook_runs_on_a_node_booted_from_a_built_image(
    system: SluiceSystem, client: ZooKeeperClient, node_dir: Path
) -> None:
    script = system.root / "build-image.sh"
    script.write_text(IMAGE_SCRIPT)
    script.chmod(0o755)
    settings = textwrap.dedent(SETTINGS).format(root=system.root)
    system.config.write_text(system.config.read_text() + NODE_NETWORK + settings)
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "feature0", {"README": "0\n"}, base=base)
    system.start_workers()
    system.start_worker(("builder",), concurrency=1)
    system.start_worker(("launcher",), concurrency=1)
    system.sluice("reconfigure")
    images = ImageStore(client)
    (built,) = wait_until(
        lambda: [b for b in images.builds("base") if b.state == ImageBuildState.READY],
        90,
        "image base built by the builder",
    )

    system.enqueue("feature0")
    system.sluice("wait", "--idle", "--timeout", "180")
    (build,) = system.builds()
    log = _job_log(system, build["uuid"])
    assert build["result"] == "SUCCESS", log
    assert "n1 | hello from app on sandbox" in log
    assert f"image of n1: base build {built.id}" in log
    # the key never reached the job: its agent did
    key = (system.root / "ssh" / "nodes_ed25519").read_text()
    assert key.strip() and key.strip() not in log
    wait_until(lambda: not NodeStore(client).nodes(), 60, "the used node deleted")
    assert not any(node_dir.glob("*")), "the node's folder removed"


# Runs on the node, then waits on the executor for the test's go (the first attempt dies here).
WAITING_PLAYBOOK = """\
- hosts: all
  tasks:
    - command: cat /etc/image-release
- hosts: localhost
  tasks:
    - name: wait for the test
      shell: "echo {{{{ zuul.build }}}} >> {markers}; while [ ! -e {go} ]; do sleep 0.1; done"
"""


@pytest.mark.timeout(300)
def test_a_killed_executor_s_node_is_recovered_and_the_build_retried(
    system: SluiceSystem, client: ZooKeeperClient, node_dir: Path
) -> None:
    system.environment.session_timeout = 4.0
    markers, go = system.root / "markers", system.root / "go"
    script = system.root / "build-image.sh"
    script.write_text(IMAGE_SCRIPT)
    script.chmod(0o755)
    system.config.write_text(
        system.config.read_text()
        + NODE_NETWORK
        + textwrap.dedent(SETTINGS).format(root=system.root)
    )
    system.tenant(TENANT_YAML)
    playbook = WAITING_PLAYBOOK.format(markers=markers, go=go)
    base = system.repos.commit("app", "main", {**APP, "playbooks/run.yaml": playbook})
    system.repos.commit("config", "main", CHECK_CONFIG)
    system.repos.commit("app", "feature0", {"README": "0\n"}, base=base)
    system.start_worker(
        ("scheduler", "merger", "maintenance"), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True
    )
    system.start_worker(("builder",), concurrency=1)
    system.start_worker(("launcher",), concurrency=1)
    doomed = system.start_worker(("executor",), concurrency=1)
    system.sluice("reconfigure")
    images = ImageStore(client)
    wait_until(
        lambda: any(b.state == ImageBuildState.READY for b in images.builds("base")),
        90,
        "image base built",
    )
    markers.touch()
    markers.chmod(0o666)  # both attempts append: each build's job is a user of its own
    system.enqueue("feature0")
    wait_until(lambda: markers.read_text().strip(), 90, "the first attempt's playbook on its node")
    store = NodeStore(client)
    (first,) = [n.id for n in store.nodes() if n.state == NodeState.IN_USE]

    doomed.kill(signal.SIGKILL)
    go.touch()
    system.start_worker(("executor",), concurrency=1)
    system.sluice("wait", "--idle", "--timeout", "180")

    attempts = sorted(system.builds(), key=lambda b: b["attempt"])
    assert [b["result"] for b in attempts] == ["RETRY", "SUCCESS"], attempts
    assert markers.read_text().split() == [b["uuid"] for b in attempts]
    wait_until(lambda: not store.nodes(), 60, "every node deleted")
    assert store.node(first) is None
    assert not any(node_dir.glob("*")), "the nodes' folders removed"


def _job_log(system: SluiceSystem, build: str) -> str:
    found = [p for p in system.environment.state_dir.rglob("job-output.txt") if build in str(p)]
    return found[0].read_text() if found else f"(no job-output.txt for build {build})"
