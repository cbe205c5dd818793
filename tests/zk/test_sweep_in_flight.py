"""A sweep reads each queue's requests in flight once, for the re-nudge and the lost check."""

from __future__ import annotations

import time

from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.sweep import SweepReport, request_queue_steps, run_steps
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.errors import ZooKeeperUnavailableError
from tests.zk.test_job_requests import new_request


class CountedQueue(JobRequestQueue):
    """A real queue that counts its reads of the requests in flight."""

    reads = 0

    def in_flight(self) -> list[JobRequest]:
        self.reads += 1
        return super().in_flight()


def test_one_read_serves_the_renudge_and_the_lost_check(zk: ZooKeeperClient) -> None:
    queue = CountedQueue(zk, paths.executor_queue())
    old = time.time() - 60
    waiting = queue.submit(new_request(created=old), {})
    young = queue.submit(new_request(), {})  # not old enough to re-nudge
    lost = queue.submit(new_request(created=old), {})
    claimed = queue.claim(lost.uuid, "dead-worker")
    assert claimed is not None
    queue.release(claimed)  # RUNNING with no lock holder: lost
    live = queue.submit(new_request(created=old), {})
    holder = queue.claim(live.uuid, "live-worker")
    done = queue.submit(new_request(created=old), {})
    finished = queue.claim(done.uuid, "w")
    assert holder is not None and finished is not None
    assert queue.complete(finished, {"result": "SUCCESS"})

    nudged: list[str] = []
    report = SweepReport(ran=True)
    steps = request_queue_steps(
        "executor", queue, lambda r: nudged.append(r.uuid), min_age=10, max_age=3600
    )
    run_steps(steps, report)

    assert report.failed == {}
    assert nudged == report.done["executor:renudge"] == [waiting.uuid]
    assert report.done["executor:lost"] == [lost.uuid]
    assert young.uuid not in nudged
    assert queue.reads == 1
    result = queue.get_result(lost.uuid)
    assert result is not None and result.lost

    run_steps(request_queue_steps("executor", queue, None, min_age=10), SweepReport(ran=True))
    assert queue.reads == 2  # the next sweep reads afresh
    assert queue.complete(holder, {"result": "SUCCESS"})


def test_a_read_that_failed_is_read_again_by_the_next_step(zk: ZooKeeperClient) -> None:
    queue = JobRequestQueue(zk, paths.executor_queue())
    request = queue.submit(new_request(), {})
    claimed = queue.claim(request.uuid, "dead-worker")
    assert claimed is not None
    queue.release(claimed)  # lost
    attempts: list[int] = []

    class Flaky(JobRequestQueue):
        def in_flight(self) -> list[JobRequest]:
            attempts.append(1)
            if len(attempts) == 1:
                raise ZooKeeperUnavailableError("connection lost while reading")
            return super().in_flight()

    report = SweepReport(ran=True)
    run_steps(
        request_queue_steps("executor", Flaky(zk, queue.root), lambda r: None, min_age=0), report
    )
    assert list(report.failed) == ["executor:renudge"]
    assert "connection lost while reading" in report.failed["executor:renudge"]
    assert report.done["executor:lost"] == [request.uuid]
    assert len(attempts) == 2
