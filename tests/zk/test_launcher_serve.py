"""The launcher's steps as plain calls against a real ZooKeeper (no Celery)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scheduler.settings.load import parse_settings
from scheduler.settings.sections import Settings
from scheduler.stores.node_records import Node, NodeRequestState, NodeState, PipelineRequestor
from scheduler.stores.nodes import NodeStore
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.context import Transaction
from scheduler.zk.event_queue import EventQueue
from tests.fixtures.waiting import wait_until
from workers.launcher.launcher import Launcher, RequestNudges

NODES = """
nodes:
  providers:
    - name: hosts
      driver: static
      labels: {ubuntu: 2}
      hosts:
        - name: h1
          labels: [ubuntu]
          max_parallel_jobs: 2
"""


def _settings(tmp_path: Path) -> Settings:
    return parse_settings(NODES, "sluice.yaml", tmp_path)


def test_a_pending_request_of_a_dead_launcher_is_taken_over(
    make_client: Callable[..., ZooKeeperClient], tmp_path: Path
) -> None:
    dying = make_client(session_timeout=1.0)
    store = NodeStore(make_client())
    request_id = store.submit(["ubuntu"], "r")
    held = NodeStore(dying).lock_request(request_id, "a")
    assert held is not None
    request = store.request(request_id)
    assert request is not None
    _, (orphan,) = NodeStore(dying).allocate(held, request, [Node("", "hosts", "ubuntu")], "a")
    generation = dying.session_generation
    twin = attach(dying.settings, *dying.kazoo.client_id)
    twin.stop()
    twin.close()
    wait_until(lambda: dying.session_generation > generation, 10, "the session ended")

    launcher = Launcher(_settings(tmp_path), store.client, "b")
    outcome = launcher.serve(request_id)
    assert outcome.result == NodeRequestState.FULFILLED
    assert orphan.id not in outcome.nodes
    left = store.node(orphan.id)
    assert left is not None and left.state == NodeState.USED
    served = store.request(request_id)
    assert served is not None and served.launcher == "b"
    assert launcher.serve(request_id).result == "done"

    # the check deletes the orphan, and the quota (2) holds the next request back
    nudged: list[str] = []
    report = launcher.check(nudged.append, RequestNudges(every=60))
    assert report["deleted"] == [orphan.id]
    waiting_id = store.submit(["ubuntu", "ubuntu"], "r2")
    outcome = launcher.serve(waiting_id)
    assert outcome.result == "waiting"
    assert outcome.reason == "provider hosts: quota of ubuntu reached (2 nodes)"
    launcher.check(nudged.append, RequestNudges(every=60))
    assert nudged == [waiting_id]
    store.return_nodes(store.accept(request_id, "executor"))
    launcher.check(nudged.append, RequestNudges(every=60))
    assert launcher.serve(waiting_id).result == NodeRequestState.FULFILLED


def test_a_busy_request_and_a_gone_one(zk: ZooKeeperClient, tmp_path: Path) -> None:
    store = NodeStore(zk)
    launcher = Launcher(_settings(tmp_path), zk, "b")
    request_id = store.submit(["ubuntu"], "r")
    other = store.lock_request(request_id, "a")
    assert other is not None
    assert launcher.serve(request_id).result == "busy"
    other.release()
    store.delete_request(request_id)
    assert launcher.serve(request_id).result == "gone"
    failed = launcher.serve(store.submit(["gpu"], "r"))
    assert failed.result == NodeRequestState.FAILED
    assert failed.reason == "NODE_FAILURE: no provider serves label(s) gpu"


def test_a_pipeline_jobs_request_names_the_pipeline_to_nudge(
    zk: ZooKeeperClient, tmp_path: Path
) -> None:
    store = NodeStore(zk)
    launcher = Launcher(_settings(tmp_path), zk, "b")
    txn = Transaction(zk)
    served_id = store.submit_ops(
        txn, ["ubuntu"], "r", notify=PipelineRequestor("t", "gate", "bs", "j1")
    )
    failed_id = store.submit_ops(
        txn, ["gpu"], "r", notify=PipelineRequestor("t", "gate", "bs", "j2")
    )
    txn.commit()
    served = launcher.serve(served_id)
    assert served.result == NodeRequestState.FULFILLED and served.pipeline == ("t", "gate")
    failed = launcher.serve(failed_id)
    assert failed.result == NodeRequestState.FAILED and failed.pipeline == ("t", "gate")
    assert failed.reason == "NODE_FAILURE: no provider serves label(s) gpu"
    assert launcher.serve(failed_id).pipeline is None, "served before: nothing new to tell"
    queue = EventQueue(zk, paths.pipeline_result_queue("t", "gate"))
    assert [e.payload["state"] for e in queue.read()] == ["fulfilled", "failed"]
    plain = launcher.serve(store.submit(["ubuntu"], "r"))
    assert plain.result == NodeRequestState.FULFILLED and plain.pipeline is None
