"""``sluice wait --idle`` costs a few requests, however long the history.

:func:`~scheduler.views.idle.pending_work` used to read every request a
queue kept (completed ones stay a day) and every pipeline's whole state: its
cost grew with the history, then with the tenants and pipelines. Now it is
three ``multiRead`` requests whatever their number: a request queue is three
stats in one of them, a pipeline its queues' stats, two flags and its
document. Counted with the client's own request counter.
"""

from __future__ import annotations

from scheduler.stores.job_requests import JobRequestQueue
from scheduler.views.idle import pending_work
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.event_queue import EventQueue
from tests.zk.test_job_requests import RESULTS, new_request


def finished(queue: JobRequestQueue, count: int) -> None:
    for _ in range(count):
        request = queue.submit(new_request(), {})
        claimed = queue.claim(request.uuid, "worker-1")
        assert claimed is not None
        assert queue.complete(claimed, {"result": "SUCCESS"})
    results = EventQueue(queue.client, RESULTS)  # the pipeline took its events
    for event in results.read():
        results.ack(event)


def test_active_count_is_requests_minus_result_markers(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    assert queue.active_count() == 0
    finished(queue, 3)
    waiting = queue.submit(new_request(), {})
    running = queue.submit(new_request(), {})
    claimed = queue.claim(running.uuid, "worker-1")
    assert claimed is not None
    assert queue.active_count() == len(queue.active()) == 2
    assert queue.complete(claimed, {"result": "SUCCESS"})
    queue.remove(claimed.request.uuid)  # the request and its marker go together
    assert zk.exists(paths.request_child(queue.root, "results", running.uuid)) is None
    assert queue.active_count() == len(queue.active()) == 1
    queue.remove(waiting.uuid)
    assert queue.active_count() == 0


def test_waiting_for_idle_costs_the_same_after_a_long_history(zk: ZooKeeperClient) -> None:
    merger = JobRequestQueue(zk, paths.merger_queue())
    executor = JobRequestQueue(zk, paths.executor_queue())
    finished(merger, 2)
    finished(executor, 2)
    with zk.counting_requests() as short:
        assert pending_work(zk) == []
    finished(merger, 20)
    finished(executor, 40)
    with zk.counting_requests() as long:
        assert pending_work(zk) == []
    assert long.total == short.total == 3, long.by_type()  # three multiRead requests
    pending = executor.submit(new_request(), {})
    assert pending_work(zk) == ["1 executor request(s) not completed"]
    executor.remove(pending.uuid)


def test_the_sweeps_and_metrics_read_only_requests_in_flight(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    waiting = queue.submit(new_request(), {})
    finished(queue, 2)

    def cost() -> int:
        with zk.counting_requests() as count:
            assert [r.uuid for r in queue.pending()] == [waiting.uuid]
            assert queue.lost_requests() == []
            assert queue.state_counts() == {"REQUESTED": 1, "COMPLETED": len(done())}
        return count.total

    def done() -> list[str]:
        return zk.get_children(paths.request_child(queue.root, "results"))

    short = cost()
    finished(queue, 30)
    assert cost() == short  # two listings per look, and the one request in flight read
    assert queue.cleanup(max_age=3600) == []  # all younger than an hour
    completed = done()
    assert len(completed) == 32
    assert sorted(queue.cleanup(max_age=0)) == sorted(completed)
    assert queue.state_counts() == {"REQUESTED": 1}


def test_waiting_for_idle_costs_three_requests_for_many_tenants_and_pipelines(
    zk: ZooKeeperClient,
) -> None:
    for tenant in ("t1", "t2", "t3"):
        for pipeline in ("check", "gate"):
            zk.ensure_path(paths.pipeline_result_queue(tenant, pipeline))
    assert pending_work(zk) == []
    EventQueue(zk, paths.pipeline_result_queue("t2", "gate")).put({"type": "x"})
    zk.ensure_path(paths.pipeline_dirty("t3", "check"))
    EventQueue(zk, paths.tenant_reconfigure_queue("t1")).put({"type": "x"})
    EventQueue(zk, paths.tenant_trigger_queue("t3")).put({"type": "x"})
    JobRequestQueue(zk, paths.executor_queue("east")).submit(new_request(), {})
    with zk.counting_requests() as count:
        found = pending_work(zk)
    assert count.total == 3, count.by_type()
    assert found == [
        "events of tenant t3",
        "reconfiguration of tenant t1",
        "pipeline t2/gate to process",
        "pipeline t3/check to process",
        "1 executor zone east request(s) not completed",
    ]
