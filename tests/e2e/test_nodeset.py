"""Jobs with a nodeset on real workers (issue 19, part 1): node requests wired to builds.

With ``nodes:`` naming providers, a job whose nodeset names labelled nodes
gets them from a node request before its build request: the scheduler,
merger, executor and launcher are real ``celery worker`` processes. The
job sees its nodes (``SLUICE_NODES``, ``nodes.json``); a label no provider
serves ends the job ``NODE_FAILURE`` with the launcher's reason, unless the
nodeset has ``alternatives`` (the next one is asked for); two items
competing for one slot run one after the other; the nodes are returned
``used`` and deleted by the launcher.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scheduler.stores.nodes import NodeStore
from scheduler.zk.client import ZooKeeperClient, connect
from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

NODES = """
nodes:
  check_interval: 1
  providers:
    - name: hosts
      driver: static
      labels: {ubuntu: 1}
      hosts:
        - name: h1.example.com
          labels: [ubuntu]
"""

CHECK_NODES = r"""#!/bin/sh
set -e
case "$SLUICE_NODES" in
  *'"name": "n1"'*'"label": "ubuntu"'*'"host": "h1.example.com"'*) ;;
  *) echo "unexpected SLUICE_NODES: $SLUICE_NODES"; exit 1 ;;
esac
grep -q '"username": "zuul"' "$SLUICE_WORKSPACE/nodes.json"
echo "nodes: $SLUICE_NODES"
sleep 2
"""


def _app(jobs: str) -> dict[str, str]:
    return {
        ".zuul.yaml": f"""
            - job:
                name: uses-node
                run: ci/nodes.sh
                nodeset:
                  nodes:
                    - name: n1
                      label: ubuntu
            - job:
                name: needs-gpu
                run: ci/nodes.sh
                nodeset:
                  nodes:
                    - name: g1
                      label: gpu
            - job:
                name: no-nodes
                run: ci/plain.sh
            - nodeset:
                name: gpu-box
                nodes:
                  - name: n1
                    label: gpu
            - job:
                name: gpu-or-ubuntu
                run: ci/nodes.sh
                nodeset:
                  alternatives:
                    - gpu-box
                    - nodes:
                        - name: n1
                          label: ubuntu
            - project:
                check:
                  jobs: {jobs}
            """,
        "ci/nodes.sh": CHECK_NODES,
        "ci/plain.sh": '#!/bin/sh\ntest -z "$SLUICE_NODES"\n',
    }


@pytest.fixture
def client(system: SluiceSystem) -> Iterator[ZooKeeperClient]:
    made = connect(system.environment.zookeeper.settings())
    yield made
    made.stop()
    made.close()


def _start(system: SluiceSystem, jobs: str, refs: int) -> None:
    system.config.write_text(system.config.read_text() + NODES)
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CHECK_CONFIG)
    base = system.repos.commit("app", "main", _app(jobs))
    for n in range(refs):
        system.repos.commit("app", f"feature{n}", {"README": f"{n}\n"}, base=base)
    system.start_workers()
    system.start_worker(("launcher",), concurrency=1)
    system.sluice("reconfigure")


def _nodes_returned(client: ZooKeeperClient) -> None:
    """Every node ended: ``used``, then deleted by a launcher's check."""
    store = NodeStore(client)
    wait_until(lambda: not store.nodes(), timeout=30, what="the used nodes deleted")
    assert store.request_ids() == [], "every request accepted (deleted) or failed and gone"


def test_a_job_runs_on_its_node_and_an_unserved_label_is_a_node_failure(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    _start(system, "[uses-node, needs-gpu, no-nodes]", refs=1)
    system.enqueue("feature0")
    system.sluice("wait", "--idle", "--timeout", "120")
    builds = {b["job"]: b for b in system.builds()}
    assert {job: b["result"] for job, b in builds.items()} == {
        "uses-node": "SUCCESS",
        "needs-gpu": "NODE_FAILURE",
        "no-nodes": "SUCCESS",
    }
    assert "no provider serves label(s) gpu" in builds["needs-gpu"]["error_detail"]
    (buildset,) = system.buildsets()
    assert buildset["result"] == "FAILURE", "the item is reported"
    assert "needs-gpu" in buildset["message"]
    _nodes_returned(client)


def test_two_items_share_one_node_slot_one_after_the_other(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    _start(system, "[uses-node]", refs=2)
    system.enqueue("feature0")
    system.enqueue("feature1")
    system.sluice("wait", "--idle", "--timeout", "120")
    builds = sorted(system.builds(), key=lambda b: b["start_time"])
    assert [b["result"] for b in builds] == ["SUCCESS", "SUCCESS"]
    assert builds[0]["end_time"] <= builds[1]["start_time"], "quota 1: never both at once"
    assert [b["result"] for b in system.buildsets()] == ["SUCCESS", "SUCCESS"]
    _nodes_returned(client)


def test_a_nodeset_alternative_nobody_serves_gives_way_to_the_next(
    system: SluiceSystem, client: ZooKeeperClient
) -> None:
    _start(system, "[gpu-or-ubuntu]", refs=1)
    system.enqueue("feature0")
    system.sluice("wait", "--idle", "--timeout", "120")
    (build,) = system.builds()
    assert build["result"] == "SUCCESS", build  # on h1 as n1 (ci/nodes.sh checks)
    assert [b["result"] for b in system.buildsets()] == ["SUCCESS"]
    _nodes_returned(client)  # the failed first request deleted too
