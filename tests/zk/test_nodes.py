"""The node store against a real ZooKeeper: seed 000's ``/nodepool`` requests and nodes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from scheduler.settings.load import load_settings
from scheduler.stores.node_records import (
    FINAL_REQUEST_STATES,
    Node,
    NodeRequest,
    NodeRequestState,
    NodeState,
    NodeStoreError,
    PipelineRequestor,
)
from scheduler.stores.node_requests import UnknownRequestError
from scheduler.stores.nodes import NodeStore, UnknownNodeError
from scheduler.sweep import node_steps
from scheduler.wire.events import NODE_REQUEST_OUTCOMES, NodeRequestMessage, decode
from scheduler.zk import paths, paths_nodepool, stored
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.context import OpFailedError, Transaction
from scheduler.zk.errors import FencedWriteError, LockLostError
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.locks import HeldLock
from tests.fixtures.waiting import wait_until


def _end_session(client: ZooKeeperClient) -> None:
    """End ``client``'s session on the server (as a dead process's would) and see it LOST."""
    generation = client.session_generation
    session_id, password = client.kazoo.client_id
    twin = attach(client.settings, session_id, password)
    twin.stop()
    twin.close()
    wait_until(lambda: client.session_generation > generation, timeout=10, what="LOST seen")


def _allocate(
    store: NodeStore, request_id: str, labels: list[str]
) -> tuple[HeldLock, NodeRequest, list[Node]]:
    held = store.lock_request(request_id, "launcher-a")
    assert held is not None
    request = store.request(request_id)
    assert request is not None
    drafts = [Node("", "static", label, host="h1", connection={"host": "h1"}) for label in labels]
    request, nodes = store.allocate(held, request, drafts, "launcher-a")
    return held, request, nodes


def test_requests_are_priority_prefixed_sequence_nodes_served_in_order(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    late = store.submit(["ubuntu"], "tenant/check/job1", priority=200)
    first = store.submit(["ubuntu", "debian"], "tenant/gate/job2", priority=100)
    second = store.submit(["ubuntu"], "tenant/gate/job3")
    assert first.startswith("100-") and late.startswith("200-") and len(first) == 14
    assert store.request_ids() == [first, second, late]
    raw, _ = zk.get(f"/nodepool/requests/{first}")
    data = stored.decode(raw)
    assert data["requestor"] == "tenant/gate/job2"
    assert data["labels"] == ["ubuntu", "debian"]
    assert data["state"] == "requested" and data["state_time"] > 0
    assert data["nodes"] == [] and data["reason"] == ""
    request = store.request(first)
    assert request is not None and request.priority == 100
    with pytest.raises(NodeStoreError):
        store.submit([], "nobody")


def test_one_launcher_holds_a_request_and_the_requestor_may_delete_it(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    request_id = store.submit(["ubuntu"], "r")
    held = store.lock_request(request_id, "launcher-a")
    assert held is not None
    assert held.node.startswith(f"/nodepool/requests-lock/{request_id}/")
    assert store.lock_request(request_id, "launcher-b") is None
    assert store.request_lock_holders(request_id) == ["launcher-a"]
    store.delete_request(request_id)  # whatever the lock
    assert store.request(request_id) is None
    held.release()
    assert store.request_lock_holders(request_id) == []


def test_allocate_fulfil_accept_and_return(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    request_id = store.submit(["ubuntu", "debian"], "r")
    held, request, nodes = _allocate(store, request_id, ["ubuntu", "debian"])
    assert request.state == NodeRequestState.PENDING and request.launcher == "launcher-a"
    assert [n.state for n in store.nodes()] == [NodeState.BUILDING] * 2
    ids = [n.id for n in nodes]
    assert int(ids[1]) == int(ids[0]) + 1 and len(ids[0]) == 10
    assert store.request(request_id).nodes == tuple(ids)  # type: ignore[union-attr]
    with held:
        store.fulfil(held, request, nodes)
    done = store.wait(request_id, timeout=1)
    assert done.state == NodeRequestState.FULFILLED and done.nodes == tuple(ids)
    raw, _ = zk.get(f"/nodepool/nodes/{ids[0]}")
    data = stored.decode(raw)
    assert (data["provider"], data["label"], data["state"]) == ("static", "ubuntu", "ready")
    assert data["allocated_to"] == request_id and data["host"] == "h1"

    taken = store.accept(request_id, "executor-1")
    assert [h.node.state for h in taken] == [NodeState.IN_USE] * 2
    assert store.request(request_id) is None, "the requestor is done with it"
    assert store.node_lock_holders(ids[0]) == ["executor-1"]
    assert zk.exists(f"/nodepool/nodes/{ids[0]}/lock") is not None
    assert store.recover().nodes_used == [], "held nodes are not abandoned"
    store.return_nodes(taken)
    assert [n.state for n in store.nodes()] == [NodeState.USED] * 2
    assert store.node_lock_holders(ids[0]) == []


def test_accept_refuses_a_request_not_fulfilled(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    request_id = store.submit(["ubuntu"], "r")
    with pytest.raises(NodeStoreError, match="requested, not fulfilled"):
        store.accept(request_id, "executor-1")
    with pytest.raises(NodeStoreError, match="still requested"):
        store.wait(request_id, timeout=0.2)


def test_a_dead_launchers_request_is_requeued_and_its_fenced_writes_refused(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    a_client = make_client(session_timeout=1.0)
    store_a = NodeStore(a_client)
    store_b = NodeStore(make_client())
    request_id = store_b.submit(["ubuntu"], "r")
    held, request, nodes = _allocate(store_a, request_id, ["ubuntu"])
    _end_session(a_client)
    assert store_b.request_lock_holders(request_id) == []
    with pytest.raises(LockLostError):
        store_a.fulfil(held, request, nodes)
    recovered = store_b.recover()
    assert recovered.requests_requeued == [request_id]
    assert recovered.nodes_used == [nodes[0].id], "the dead launcher's building node"
    back = store_b.request(request_id)
    assert back is not None and back.state == NodeRequestState.REQUESTED and back.nodes == ()
    wait_until(lambda: a_client.state.value == "CONNECTED", timeout=10, what="A reconnected")
    with pytest.raises((LockLostError, FencedWriteError)):
        store_a.fulfil(held, request, nodes)
    # another launcher serves it
    held_b = store_b.lock_request(request_id, "launcher-b")
    assert held_b is not None
    with held_b:
        drafts = [Node("", "static", "ubuntu", host="h2")]
        pending, fresh = store_b.allocate(held_b, back, drafts, "launcher-b")
        store_b.fulfil(held_b, pending, fresh)
    assert store_b.wait(request_id, 1).nodes == (fresh[0].id,)
    assert store_b.recover().nodes_used == []


def test_in_use_nodes_of_a_dead_user_become_used(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    store = NodeStore(make_client())
    request_id = store.submit(["ubuntu"], "r")
    held, request, nodes = _allocate(store, request_id, ["ubuntu"])
    with held:
        store.fulfil(held, request, nodes)
    user = make_client(session_timeout=1.0)
    taken = NodeStore(user).accept(request_id, "executor-1")
    assert store.recover().nodes_used == []
    _end_session(user)
    assert store.node_lock_holders(taken[0].node.id) == []
    assert store.recover().nodes_used == [taken[0].node.id]
    node = store.node(taken[0].node.id)
    assert node is not None and node.state == NodeState.USED
    with pytest.raises(LockLostError):
        NodeStore(user).return_nodes(taken)


def test_ready_nodes_of_a_deleted_request_become_used(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    request_id = store.submit(["ubuntu"], "r")
    held, request, nodes = _allocate(store, request_id, ["ubuntu"])
    with held:
        store.fulfil(held, request, nodes)
    assert store.recover().nodes_used == []
    store.delete_request(request_id)
    assert zk.exists(paths_nodepool.node_request_lock(request_id)) is None
    assert store.recover().nodes_used == [nodes[0].id]


def test_the_sweep_requeues_a_dead_launchers_request_and_nudges_a_launcher(
    make_client: Callable[..., ZooKeeperClient], redis_url: str
) -> None:
    a_client = make_client(session_timeout=1.0)
    store = NodeStore(make_client())
    request_id = store.submit(["ubuntu"], "r")
    _allocate(NodeStore(a_client), request_id, ["ubuntu"])
    _end_session(a_client)
    settings = load_settings(None, environ={"SLUICE_BROKER_URL": redis_url})
    (step,) = node_steps(store.client, settings)
    done = step.run()
    assert request_id in done and len(done) == 2  # the request, and its building node
    back = store.request(request_id)
    assert back is not None and back.state == NodeRequestState.REQUESTED
    broker = redis.Redis.from_url(redis_url)
    try:
        assert broker.llen("launcher") == 1  # a launcher is nudged to serve it
    finally:
        broker.close()
    assert step.run() == []  # nothing left to recover


def _result_events(zk: ZooKeeperClient, tenant: str, pipeline: str) -> list[object]:
    queue = EventQueue(zk, paths.pipeline_result_queue(tenant, pipeline))
    return [decode(event.payload) for event in queue.read()]


def test_submit_ops_creates_requests_only_with_the_callers_transaction(
    zk: ZooKeeperClient,
) -> None:
    store = NodeStore(zk)
    before = store.submit(["ubuntu"], "r")
    txn = Transaction(zk)
    first = store.submit_ops(txn, ["ubuntu"], "t/gate/b1/j1", priority=100)
    second = store.submit_ops(txn, ["ubuntu", "debian"], "t/gate/b1/j2", priority=100)
    other = store.submit_ops(txn, ["ubuntu"], "t/check/b2/j", priority=200)
    assert first.startswith("100-") and len(first) == 14 and other.startswith("200-")
    assert before < first < second, "ids follow the sequence, in the order submitted"
    assert store.request_ids() == [before], "nothing exists before the commit"
    txn.commit()
    assert store.request_ids() == [before, first, second, other]
    request = store.request(second)
    assert request is not None and request.labels == ("ubuntu", "debian")
    assert request.state == NodeRequestState.REQUESTED and request.notify is None
    # a later sequential submit never takes an id a transaction used
    assert store.submit(["ubuntu"], "r") > second

    aborted = Transaction(zk)
    lost = store.submit_ops(aborted, ["ubuntu"], "r")
    aborted.check("/nowhere")
    with pytest.raises(OpFailedError):
        aborted.commit()
    assert store.request(lost) is None
    with pytest.raises(NodeStoreError, match="needs labels"):
        store.submit_ops(Transaction(zk), [], "r")


def test_the_node_request_event_reports_exactly_the_final_states() -> None:
    # the event (scheduler.wire, data only) spells the states the store ends a request in
    assert {str(state) for state in FINAL_REQUEST_STATES} == NODE_REQUEST_OUTCOMES


def test_a_pipeline_gets_its_requests_outcome_in_the_same_transaction(
    zk: ZooKeeperClient,
) -> None:
    store = NodeStore(zk)
    txn = Transaction(zk)
    notify = PipelineRequestor("t", "gate", "bs1", "job1")
    request_id = store.submit_ops(txn, ["ubuntu"], "t/gate/bs1/job1", notify=notify)
    failing_id = store.submit_ops(
        txn, ["gpu"], "t/gate/bs1/job2", notify=PipelineRequestor("t", "gate", "bs1", "job2")
    )
    txn.commit()
    plain_id = store.submit(["ubuntu"], "r")
    request = store.request(request_id)
    assert request is not None and request.notify == notify

    held, request, nodes = _allocate(store, request_id, ["ubuntu"])
    assert _result_events(zk, "t", "gate") == [], "pending is not an outcome"
    with held:
        store.fulfil(held, request, nodes)
    (fulfilled,) = _result_events(zk, "t", "gate")
    assert isinstance(fulfilled, NodeRequestMessage)
    assert (fulfilled.request, fulfilled.state, fulfilled.buildset, fulfilled.job) == (
        request_id,
        "fulfilled",
        "bs1",
        "job1",
    )
    assert fulfilled.nodes == tuple(n.id for n in nodes) and fulfilled.time > 0

    held = store.lock_request(failing_id, "launcher-a")
    failing = store.request(failing_id)
    assert held is not None and failing is not None
    with held:
        store.fail(held, failing, "NODE_FAILURE: no provider serves label(s) gpu")
    failed = _result_events(zk, "t", "gate")[1]
    assert isinstance(failed, NodeRequestMessage) and failed.state == "failed"
    assert failed.reason == "NODE_FAILURE: no provider serves label(s) gpu"
    assert failed.job == "job2"

    # a request without notify tells no pipeline
    held, plain, plain_nodes = _allocate(store, plain_id, ["ubuntu"])
    with held:
        store.fulfil(held, plain, plain_nodes)
    assert len(_result_events(zk, "t", "gate")) == 2


def test_a_stale_launchers_outcome_reaches_no_pipeline(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    store = NodeStore(make_client())
    txn = Transaction(store.client)
    notify = PipelineRequestor("t", "check", "bs", "job")
    request_id = store.submit_ops(txn, ["ubuntu"], "r", notify=notify)
    txn.commit()
    dying = make_client(session_timeout=1.0)
    held, request, nodes = _allocate(NodeStore(dying), request_id, ["ubuntu"])
    _end_session(dying)
    with pytest.raises((FencedWriteError, LockLostError, NodeStoreError)):
        NodeStore(dying).fulfil(held, request, nodes)
    assert _result_events(store.client, "t", "check") == []


def test_an_operator_holds_a_node_in_use_past_its_return_then_gives_it_back(
    zk: ZooKeeperClient,
) -> None:
    store = NodeStore(zk)
    txn = Transaction(zk)
    request_id = store.submit_ops(
        txn, ["ubuntu"], "t/check/bs1/job1", notify=PipelineRequestor("t", "check", "bs1", "job1")
    )
    txn.commit()
    held, request, nodes = _allocate(store, request_id, ["ubuntu"])
    assert nodes[0].tenant == "t", "a node belongs to the tenant whose pipeline asked"
    with held:
        store.fulfil(held, request, nodes)
    (taken,) = store.accept(request_id, "executor-1")
    node_id = taken.node.id
    with pytest.raises(NodeStoreError, match="is in-use: only a node hold can be set used"):
        store.set_state_by_operator(node_id, NodeState.USED)
    assert store.set_state_by_operator(node_id, NodeState.HOLD).state == NodeState.HOLD
    assert store.set_state_by_operator(node_id, NodeState.HOLD).state == NodeState.HOLD
    store.return_nodes([taken])  # the build ends: the node stays held, unlocked
    node = store.node(node_id)
    assert node is not None and node.state == NodeState.HOLD and node.tenant == "t"
    assert store.node_lock_holders(node_id) == []
    assert store.recover().nodes_used == [], "a held node is nobody's to recover"
    assert store.set_state_by_operator(node_id, NodeState.USED).state == NodeState.USED
    with pytest.raises(UnknownNodeError):
        store.set_state_by_operator("9999999999", NodeState.HOLD)
    with pytest.raises(NodeStoreError, match="not 'deleting'"):
        store.set_state_by_operator(node_id, NodeState.DELETING)


def test_an_operator_deletes_a_request_and_its_pipeline_is_told(zk: ZooKeeperClient) -> None:
    store = NodeStore(zk)
    txn = Transaction(zk)
    waiting = store.submit_ops(
        txn, ["ubuntu"], "t/check/bs1/job1", notify=PipelineRequestor("t", "check", "bs1", "job1")
    )
    txn.commit()
    lock = store.lock_request(waiting, "launcher-a")  # a launcher holds it: deleted all the same
    assert lock is not None
    gone = store.delete_by_operator(waiting)
    assert gone.id == waiting and gone.tenant == "t"
    assert store.request(waiting) is None
    (told,) = _result_events(zk, "t", "check")
    assert isinstance(told, NodeRequestMessage)
    assert (told.request, told.state, told.job) == (waiting, "failed", "job1")
    assert told.reason == "deleted by an operator"
    with pytest.raises(UnknownRequestError):
        store.delete_by_operator(waiting)
    lock.release()
    plain = store.submit(["ubuntu"], "r")  # no pipeline waits: nobody is told
    store.delete_by_operator(plain)
    assert len(_result_events(zk, "t", "check")) == 1
