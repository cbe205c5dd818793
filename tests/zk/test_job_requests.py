"""Job request queues: lifecycle, duplicate claims, flags, lost requests, results, cleanup."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.stores import job_requests
from scheduler.stores.job_requests import JobRequest, JobRequestQueue, RequestState
from scheduler.sweep import queued_completions
from scheduler.wire.events import RequestEvent
from scheduler.zk import paths, stored
from scheduler.zk.client import ZooKeeperClient, attach
from scheduler.zk.context import Transaction
from scheduler.zk.errors import LockLostError, ZooKeeperUnavailableError
from scheduler.zk.event_queue import EventQueue, commit_creating_parents
from tests.fixtures.services import ZooKeeperTarget, session_watches
from tests.fixtures.waiting import wait_until
from tests.zk.conftest import Script

RESULTS = paths.pipeline_result_queue("tenant", "gate")


def new_request(**fields: object) -> JobRequest:
    defaults: dict[str, object] = {
        "uuid": uuid.uuid4().hex,
        "tenant": "tenant",
        "pipeline": "gate",
        "buildset_uuid": "bs1",
        "job_name": "tox/py3",
        "result_queue": RESULTS,
    }
    defaults.update(fields)
    return JobRequest(**defaults)  # type: ignore[arg-type]


def test_small_params_travel_in_the_request_and_large_ones_beside_it(zk: ZooKeeperClient) -> None:
    """The claim's read brings small parameters: the worker reads nothing more."""
    queue = JobRequestQueue(zk, paths.executor_queue())
    small = queue.submit(new_request(), {"vars": {"a": 1}})
    params_node = paths.request_child(queue.root, "params", small.uuid)
    assert zk.exists(params_node) is None
    claimed = queue.claim(small.uuid, "executor-1")
    assert claimed is not None
    with zk.counting_requests() as counted:
        assert queue.params(claimed.request) == {"vars": {"a": 1}}
    assert counted.total == 0
    assert queue.complete(claimed, {"result": "SUCCESS"})
    assert queue.get(small.uuid).params == {"vars": {"a": 1}}  # type: ignore[union-attr]

    big = {"blob": os.urandom(job_requests.PARAMS_INLINE_BYTES).hex()}  # incompressible
    large = queue.submit(new_request(), big)
    assert large.params is None
    assert zk.exists(paths.request_child(queue.root, "params", large.uuid)) is not None
    assert queue.params(large.uuid) == big
    queue.remove(large.uuid)
    assert zk.exists(paths.request_child(queue.root, "params", large.uuid)) is None


def test_lifecycle_with_events_in_the_same_transactions(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {"vars": {"a": 1}})
    assert queue.get(request.uuid) == request
    claimed = queue.claim(request.uuid, "executor-1")
    assert claimed is not None
    assert claimed.request.state == RequestState.RUNNING
    assert queue.get(request.uuid) == claimed.request
    assert queue.params(request.uuid) == {"vars": {"a": 1}}
    assert queue.complete(claimed, {"result": "SUCCESS", "log_url": "http://x"})
    assert queue.get(request.uuid).state == RequestState.COMPLETED  # type: ignore[union-attr]
    result = queue.get_result(request.uuid)
    assert result is not None and result.result["result"] == "SUCCESS" and not result.lost
    assert zk.exists(paths.request_child(queue.root, "locks", request.uuid)) is None
    events = EventQueue(zk, RESULTS).read()
    assert [e.payload["type"] for e in events] == [
        RequestEvent.STARTED.value,
        RequestEvent.COMPLETED.value,
    ]
    assert events[1].payload["request"] == request.uuid
    assert not claimed.context.valid


def test_duplicate_claim_has_no_effect(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.merger_queue())
    request = queue.submit(new_request(result_queue=""), {})
    assert queue.submit(request, {}) == request  # a retried submit changes nothing
    first = queue.claim(request.uuid, "merger-1")
    assert first is not None
    before = queue.get(request.uuid)
    assert queue.claim(request.uuid, "merger-2") is None
    assert queue.get(request.uuid) == before
    assert queue.claim("no-such-request", "merger-2") is None
    queue.complete(first, {"merged": True})
    assert queue.claim(request.uuid, "merger-2") is None  # completed: still nothing


def test_a_claim_whose_answer_was_lost_is_recognised_on_the_retry(
    zk: ZooKeeperClient,
    make_client: Callable[..., ZooKeeperClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server commits the claim, the answer is lost (an election): the retry resumes it.

    Before, the retry saw RUNNING, returned None (a "duplicate"), and the
    request stayed RUNNING under this live session's lock with nobody
    running it: the gate never went idle (the ensemble chaos test's stall).
    """
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    commit = commit_creating_parents
    answers_lost: list[str] = []

    def commit_then_lose_the_answer(*args: Any, **kwargs: Any) -> Any:
        outcome = commit(*args, **kwargs)
        if not answers_lost:
            answers_lost.append("claim")
            raise ZooKeeperUnavailableError("ZooKeeper unavailable: ConnectionLoss()")
        return outcome

    monkeypatch.setattr(job_requests, "commit_creating_parents", commit_then_lose_the_answer)
    claimed = queue.claim(request.uuid, "e1")
    assert answers_lost == ["claim"]
    assert claimed is not None and claimed.request == queue.get(request.uuid)
    assert claimed.request.state == RequestState.RUNNING and claimed.request.worker == "e1"
    # another session (a redelivery elsewhere) still gets nothing
    assert JobRequestQueue(make_client(), queue.root).claim(request.uuid, "e1") is None
    assert queue.complete(claimed, {"result": "SUCCESS"})
    assert queue.get(request.uuid).state == RequestState.COMPLETED  # type: ignore[union-attr]


def test_hold_pause_resume_and_cancel_flags(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue("zone/east"))
    request = queue.submit(new_request(state=RequestState.HOLD), {})
    assert queue.claim(request.uuid, "e1") is None
    assert queue.release_hold(request.uuid)
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    queue.pause(claimed)
    assert queue.get(request.uuid).state == RequestState.PAUSED  # type: ignore[union-attr]
    resumed = queue.watch_flag(request.uuid, "resume")
    assert not resumed.is_set()
    assert queue.request_resume(request.uuid)
    assert resumed.wait(5)
    queue.resume(claimed)
    assert queue.get(request.uuid).state == RequestState.RUNNING  # type: ignore[union-attr]
    assert not queue.flag_set(request.uuid, "resume")
    cancelled = queue.watch_flag(request.uuid, "cancel")
    assert queue.request_cancel(request.uuid)
    assert cancelled.wait(5) and queue.flag_set(request.uuid, "cancel")
    assert queue.complete(claimed, {"result": "CANCELED"})
    kinds = [e.payload["type"] for e in EventQueue(zk, RESULTS).read()]
    assert kinds == ["request-started", "request-paused", "request-completed"]


def test_flag_watches_end_with_their_request(
    zookeeper: ZooKeeperTarget, zk: ZooKeeperClient
) -> None:
    """A build's cancel and resume watches leave nothing in ZooKeeper once it is removed.

    Most builds are never cancelled: a watch on a flag that never comes
    must not stay registered for the rest of the executor's session.
    """
    queue = JobRequestQueue(zk, paths.executor_queue())
    for _ in range(5):
        request = queue.submit(new_request(), {})
        claimed = queue.claim(request.uuid, "e1")
        assert claimed is not None
        cancelled = queue.watch_flag(request.uuid, "cancel")
        resumed = queue.watch_flag(request.uuid, "resume")
        assert queue.complete(claimed, {"result": "SUCCESS"})
        queue.remove(request.uuid)
        assert not cancelled.is_set() and not resumed.is_set()
    wait_until(lambda: not session_watches(zookeeper, zk), timeout=5)
    gone = queue.watch_flag(uuid.uuid4().hex, "cancel")  # a request that is not there
    assert not gone.is_set() and not session_watches(zookeeper, zk)
    with pytest.raises(Exception, match="unknown request flag"):
        queue.watch_flag(request.uuid, "stop")


def test_completion_of_a_removed_request_releases_the_lock(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    queue.remove(request.uuid)  # the scheduler cancelled and deleted it
    assert not queue.complete(claimed, {"result": "ABORTED"})
    assert zk.exists(paths.request_child(queue.root, "locks", request.uuid)) is None
    assert queue.get_result(request.uuid) is None


def test_waiting_submitter_is_woken_by_a_watch(
    make_client: Callable[..., ZooKeeperClient],
) -> None:
    submitter = JobRequestQueue(make_client(), paths.merger_queue())
    worker = JobRequestQueue(make_client(), paths.merger_queue())
    request = submitter.submit(new_request(result_queue=""), {"repo": "x"}, wait=True)
    got: list[object] = []
    waiter = threading.Thread(
        target=lambda: got.append(submitter.wait_for_result(request.uuid, 20))
    )
    started = time.monotonic()
    waiter.start()
    claimed = worker.claim(request.uuid, "merger-1")
    assert claimed is not None
    big = {"files": {"zuul.yaml": os.urandom(700_000).hex()}}  # result-data sharded
    worker.complete(claimed, big)
    waiter.join(20)
    assert time.monotonic() - started < 10
    (result,) = got
    assert result is not None and result.result == big  # type: ignore[attr-defined]


def test_lost_request_of_a_killed_claimer(
    zk: ZooKeeperClient, script: Callable[..., Script]
) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimer = script("claimer", queue.root, request.uuid, session_timeout=1.0)
    claimer.expect("claimed")
    assert queue.lost_requests() == []
    claimer.kill9()
    lost = wait_until(queue.lost_requests, timeout=5, what="lost request found")
    assert [r.uuid for r in lost] == [request.uuid]
    assert lost[0].worker == "doomed-worker"
    assert queue.recover_lost(lost[0])
    assert not queue.recover_lost(lost[0])  # a second sweeper changes nothing
    result = queue.get_result(request.uuid)
    assert result is not None and result.lost and result.result == {"result": "LOST"}
    assert queue.lost_requests() == []
    assert [e.payload["type"] for e in EventQueue(zk, RESULTS).read()][-1] == "request-completed"


def test_live_claim_is_not_lost_and_cannot_be_recovered(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    assert queue.lost_requests() == []
    assert not queue.recover_lost(claimed.request)
    assert queue.complete(claimed, {"result": "SUCCESS"})


def test_expired_worker_cannot_complete(make_client: Callable[..., ZooKeeperClient]) -> None:
    client = make_client(session_timeout=1.0)
    queue = JobRequestQueue(client, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    generation = client.session_generation
    twin = attach(client.settings, *client.kazoo.client_id)
    twin.stop()
    twin.close()
    wait_until(lambda: client.session_generation > generation, timeout=10, what="LOST")
    with pytest.raises(LockLostError):
        queue.complete(claimed, {"result": "SUCCESS"})
    other = JobRequestQueue(make_client(), paths.executor_queue())
    assert [r.uuid for r in other.lost_requests()] == [request.uuid]


def test_pending_and_cleanup(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    low = queue.submit(new_request(precedence=300), {})
    high = queue.submit(new_request(precedence=100), {})
    done = queue.submit(new_request(), {"p": 1})
    waited = queue.submit(new_request(), {}, wait=True)
    assert [r.uuid for r in queue.pending()] == [high.uuid, done.uuid, waited.uuid, low.uuid]
    for request in (done, waited):
        claimed = queue.claim(request.uuid, "e1")
        assert claimed is not None
        queue.complete(claimed, {"result": "SUCCESS"})
    assert queue.cleanup(max_age=60) == []  # too young
    time.sleep(0.05)
    assert queue.cleanup(max_age=0.01) == [done.uuid]  # the waited one is kept
    assert queue.get(done.uuid) is None
    for child in ("params", "result-data", "results"):
        assert zk.exists(paths.request_child(queue.root, child, done.uuid)) is None
    assert queue.get_result(waited.uuid) is not None
    assert {r.uuid for r in queue.pending()} == {high.uuid, low.uuid}


def _completed(queue: JobRequestQueue, params: dict[str, Any] | None = None) -> JobRequest:
    request = queue.submit(new_request(), params or {"p": 1})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None and queue.complete(claimed, {"result": "SUCCESS"})
    return request


def test_builds_whose_completion_was_consumed_are_removed_at_once(zk: ZooKeeperClient) -> None:
    """Issue 39: a day's builds no longer stay in ZooKeeper; an unconsumed result stays."""
    queue = JobRequestQueue(zk, paths.executor_queue())
    consumed = [_completed(queue) for _ in range(3)]
    flagged = _completed(queue)
    queue.request_cancel(flagged.uuid)  # a flag under it: its batch fails, removed one by one
    large = _completed(queue, {"blob": os.urandom(job_requests.PARAMS_INLINE_BYTES).hex()})
    unread = _completed(queue)
    results = EventQueue(zk, RESULTS)
    for event in results.read():  # the scheduler's pass consumes all but one completion
        if event.payload["request"] != unread.uuid or event.payload["type"] != "request-completed":
            results.ack(event)
    assert queue.cleanup(3600, consumed_age=60, pending=lambda: queued_completions(zk)) == []
    time.sleep(0.05)
    removed = queue.cleanup(3600, consumed_age=0.01, pending=lambda: queued_completions(zk))
    gone = [*consumed, flagged, large]
    assert sorted(removed) == sorted(r.uuid for r in gone)
    for request in gone:
        for child in ("requests", "params", "result-data", "results"):
            assert zk.exists(paths.request_child(queue.root, child, request.uuid)) is None
    assert queue.get_result(unread.uuid) is not None  # its event still waits for the pass
    assert queue.active_count() == 0
    # the pass applies it: it goes at the next clean-up
    [event] = results.read()
    results.ack(event)
    assert queue.cleanup(3600, consumed_age=0.01, pending=lambda: queued_completions(zk)) == [
        unread.uuid
    ]


def test_an_event_left_unread_keeps_every_completed_build(zk: ZooKeeperClient) -> None:
    """An event of a newer Sluice, left for a newer reader: nothing is taken for consumed."""
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = _completed(queue)
    results = EventQueue(zk, RESULTS)
    for event in results.read():
        results.ack(event)
    newer = stored.encode({"payload": {"type": "request-completed", "request": "x"}}, schema=999)
    zk.kazoo.create(paths.join(results.queue_path, "event-"), newer, sequence=True)
    assert results.read() == []  # left for a newer reader
    assert queued_completions(zk) is None
    time.sleep(0.05)
    assert queue.cleanup(3600, consumed_age=0.01, pending=lambda: queued_completions(zk)) == []
    assert queue.get(request.uuid) is not None


def test_lost_request_with_a_half_written_result_is_recovered(zk: ZooKeeperClient) -> None:
    """The worker died after writing result shards, before its completion commit."""
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    data_path = paths.request_child(queue.root, "result-data", request.uuid)
    zk.create(data_path, b"")  # placeholder of a sharded result ...
    zk.create(paths.join(data_path, "%shard-dead-0000"), b"partial")  # ... and a shard
    queue.release(claimed)  # the lock goes, as when the worker dies
    (lost,) = queue.lost_requests()
    assert queue.recover_lost(lost)
    result = queue.get_result(request.uuid)
    assert result is not None and result.lost
    assert zk.get_children(data_path) == []  # the dead attempt's shard is cleaned up


def test_lifecycle_costs_a_handful_of_round_trips_and_lists_nothing(
    zk: ZooKeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    first = queue.submit(new_request(), {})  # first use creates the directories ...
    claimed = queue.claim(first.uuid, "e1")  # ... and the result queue
    assert claimed is not None
    queue.complete(claimed, {})
    waits: list[str] = []
    listings: list[str] = []
    real_wait, real_list = zk.wait, zk.kazoo.get_children_async

    def counting_wait(result: object, timeout: float | None = None) -> object:
        waits.append("wait")
        return real_wait(result, timeout)

    def counting_list(path: str, *args: object, **kwargs: object) -> object:
        listings.append(path)
        return real_list(path, *args, **kwargs)

    monkeypatch.setattr(zk, "wait", counting_wait)
    monkeypatch.setattr(zk.kazoo, "get_children_async", counting_list)
    request = queue.submit(new_request(), {"vars": {}})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    assert queue.complete(claimed, {"result": "SUCCESS"})
    assert queue.get_result(request.uuid) is not None
    # submit 1, claim 2, complete 1, result 2 answers awaited (sent together: one round trip)
    assert len(waits) <= 6, waits
    assert listings == []


def test_pause_stores_its_result_data_until_the_completion_replaces_it(
    zk: ZooKeeperClient,
) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "e1")
    assert claimed is not None
    assert queue.paused_data(request.uuid) == {}
    big = "x" * 2_000_000  # sharded
    queue.pause(claimed, {"zuul": {"pause": True}, "artifact": "a.tgz", "big": big})
    data = queue.paused_data(request.uuid)
    assert data["artifact"] == "a.tgz" and data["big"] == big
    assert queue.get_result(request.uuid) is None  # paused is not completed
    txn = Transaction(zk)
    assert queue.resume_ops(request.uuid, txn)
    txn.commit()
    assert queue.flag_set(request.uuid, "resume")
    queue.resume(claimed)
    assert not queue.flag_set(request.uuid, "resume")  # consumed
    assert queue.complete(claimed, {"result": "SUCCESS", "result_data": {"final": 1}})
    result = queue.get_result(request.uuid)
    assert result is not None and result.result["result_data"] == {"final": 1}
    assert queue.paused_data(request.uuid) == {}  # the final result replaced it
    queue.remove(request.uuid)
    assert not queue.resume_ops(request.uuid, Transaction(zk))  # gone: nothing to add


def test_the_sweep_removes_consumed_merges_that_no_item_names(zk: ZooKeeperClient) -> None:
    """Merges go as builds do once consumed, but not while an item names them (replays read them).

    An item's buildset (a batch's riders name their tail's) and each of its
    probes name the merge they were tested on; another host's executor
    makes that state again from the request.
    """
    from scheduler import sweep
    from scheduler.model.item import Probe
    from scheduler.state.store import PipelineStore
    from scheduler.zk import locks
    from tests.scheduler.test_state_store import sample_state

    builds = JobRequestQueue(zk, paths.executor_queue())
    merges = JobRequestQueue(zk, paths.merger_queue())
    build = _completed(builds)
    named, probed, free = (_completed(merges) for _ in range(3))
    blocking = merges.submit(new_request(result_queue=""), {}, wait=True)  # a caller waits
    claimed = merges.claim(blocking.uuid, "m1")
    assert claimed is not None and merges.complete(claimed, {"result": "SUCCESS"})
    results = EventQueue(zk, RESULTS)
    for event in results.read():  # the passes consumed every completion
        results.ack(event)
    state = sample_state()
    first, second = state.items.peek_values()
    first.buildset.merge_request = named.uuid
    second.buildset.merge_request = None
    second.probes = [Probe("alone", "probe-1", "unit", merge_request=probed.uuid)]
    store = PipelineStore(zk)

    def write() -> None:
        held = locks.try_exclusive(zk, paths.pipeline_lock(state.tenant, state.pipeline))
        assert held is not None
        with held:
            store.write(held.context, store.read(state.tenant, state.pipeline), state)

    write()

    def cleanup(queue: JobRequestQueue, **consumed: Any) -> list[str]:
        sweep._last_cleanup.clear()
        return sweep.cleanup(queue, 3600, **consumed)

    steps = {s.name: s for s in sweep.request_queue_steps("merger", merges, None, min_age=1)}
    time.sleep(0.05)
    try:
        assert cleanup(builds, consumed=True) == []  # not a minute old yet
        assert cleanup(merges, consumed=True) == []
        original = sweep.CONSUMED_MAX_AGE
        sweep.CONSUMED_MAX_AGE = 0.01
        try:
            assert cleanup(builds, consumed=True) == [build.uuid]
            assert cleanup(merges) == []  # without consumption: a day
            assert steps["merger:cleanup"].run() == []  # (nor does this plain step)
            referenced = {"referenced": lambda: sweep.referenced_merges(zk)}
            assert sweep.referenced_merges(zk) == {named.uuid, probed.uuid}
            assert cleanup(merges, consumed=True, **referenced) == [free.uuid]
            del state.items[first.uuid]  # the item left its pipeline
            state.queues[first.queue].items.remove(first.uuid)
            write()
            assert cleanup(merges, consumed=True, **referenced) == [named.uuid]
        finally:
            sweep.CONSUMED_MAX_AGE = original
    finally:
        sweep._last_cleanup.clear()
    assert builds.get(build.uuid) is None
    assert merges.get_result(probed.uuid) is not None  # its probe still runs
    assert merges.get_result(blocking.uuid) is not None  # its caller has not read it yet
