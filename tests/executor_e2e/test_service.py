"""The build service and the sweep without Celery: a real ZooKeeper, real git and jobs.

The service (``workers.executor.service``) and the sweep (``scheduler.sweep``)
are plain functions: these tests call them directly, in threads where a
build must run while the test acts on it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import pytest

import celeryconfig
from scheduler.nudge.task_names import DispatchError, executor_queue_name
from scheduler.stores import inventory
from scheduler.stores.job_requests import JobRequest, JobRequestQueue, RequestState
from scheduler.sweep import (
    SweepReport,
    SweepStep,
    renudge_pending,
    run_steps,
    run_sweep,
    standard_steps,
    sweep_totals,
)
from scheduler.wire.events import RequestEvent
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient, attach, connect
from scheduler.zk.context import LockContext
from tests.executor.helpers import Repo, make_spec
from tests.executor_e2e.conftest import Builds
from tests.fixtures.services import ZooKeeperTarget, session_watches
from tests.fixtures.waiting import wait_until
from workers.claims import Delivery
from workers.executor import Result, RunnerOptions
from workers.executor.service import (
    CANCEL_WATCH_DELAY,
    ExecutionReport,
    execute_request,
    runner_options,
)
from workers.nodekey import node_key_path

T = TypeVar("T")


class InThread:
    """A call in a thread (a build blocks until it ends); ``join`` returns its value."""

    def __init__(self, call: Callable[[], T]) -> None:
        self.value: object = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.value = call()
            except BaseException as exc:
                self.error = exc

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> object:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the call did not return"
        if self.error is not None:
            raise self.error
        return self.value


@pytest.fixture
def options(tmp_path: Path) -> RunnerOptions:
    return RunnerOptions(state_dir=tmp_path / "worker-state", poll_interval=0.1, kill_grace=0.5)


@pytest.fixture
def short_session_client(builds: Builds) -> Iterator[ZooKeeperClient]:
    settings = replace(builds.settings.zookeeper, session_timeout=4.0, call_timeout=4.0)
    client = connect(settings)
    yield client
    client.stop()
    client.close()


def events(builds: Builds) -> list[str]:
    return [kind for kind, _ in builds.events()]


def test_pause_then_resume_through_the_queue(
    builds: Builds, repo: Repo, options: RunnerOptions
) -> None:
    repo.script("run.sh", """echo '{"zuul": {"pause": true}}' > "$SLUICE_RESULT_FILE" """)
    repo.script("post.sh", "echo post-run after resume")
    spec = make_spec(repo, repo.commit(), post_run=("post.sh",))
    request = builds.submit(spec)
    queue = builds.queue()
    build = InThread(lambda: execute_request(queue, request.uuid, "worker-1", options))

    def state() -> RequestState | None:
        current = queue.get(request.uuid)
        return None if current is None else current.state

    wait_until(lambda: state() == RequestState.PAUSED, 30, "the build to pause")
    assert events(builds) == [RequestEvent.STARTED.value, RequestEvent.PAUSED.value]
    assert queue.request_resume(request.uuid)
    report = build.join(30)

    assert isinstance(report, ExecutionReport)
    assert report.outcome is Delivery.COMPLETED and report.result is Result.SUCCESS
    result = queue.get_result(request.uuid)
    assert result is not None
    assert any("post-run after resume" in line for line in result.result["log_tail"])
    assert events(builds) == [
        RequestEvent.STARTED.value,
        RequestEvent.PAUSED.value,
        RequestEvent.COMPLETED.value,
    ]


def test_params_that_are_no_build_spec_complete_with_error(
    builds: Builds, options: RunnerOptions
) -> None:
    queue = builds.queue()
    request = queue.submit(JobRequest(uuid=uuid.uuid4().hex), {"nonsense": True})

    report = execute_request(queue, request.uuid, "worker-1", options)

    assert report.outcome is Delivery.COMPLETED and report.result is Result.ERROR
    result = queue.get_result(request.uuid)
    assert result is not None and result.result["result"] == "ERROR"
    assert "no valid build spec" in result.result["message"]


def test_a_lost_session_stops_the_build_and_the_sweep_records_it_lost(
    builds: Builds,
    repo: Repo,
    options: RunnerOptions,
    short_session_client: ZooKeeperClient,
) -> None:
    repo.script("run.sh", "echo started\nsleep 60")
    spec = make_spec(repo, repo.commit())
    request = builds.submit(spec)
    queue = JobRequestQueue(short_session_client, paths.executor_queue())
    build = InThread(lambda: execute_request(queue, request.uuid, "worker-1", options))
    log = options.state_dir / "logs" / spec.context.build_uuid / "job-output.txt"
    wait_until(lambda: log.exists() and "| run | started" in log.read_text(), 30, "the job")

    # A real server-side expiry: a second client on the same session, closed.
    session_id, password = short_session_client.kazoo.client_id
    twin = attach(short_session_client.settings, session_id, password)
    twin.stop()
    twin.close()
    report = build.join(30)

    assert isinstance(report, ExecutionReport)
    # stopped for a lost claim: worth another attempt, never a failure of the change
    assert report.outcome is Delivery.LOCK_LOST and report.result is Result.RETRY
    assert builds.queue().get_result(request.uuid) is None  # the fenced completion was refused
    assert [r.uuid for r in builds.queue().lost_requests()] == [request.uuid]

    sweep = run_sweep(builds.client, lambda: standard_steps(builds.client, builds.settings))

    assert sweep.ran and sweep.done["executor:lost"] == [request.uuid], sweep
    # counted for the metrics (sluice_sweep_recoveries)
    assert sweep_totals(LockContext(builds.client))["executor:lost"] == 1
    result = builds.queue().get_result(request.uuid)
    assert result is not None and result.lost and result.result == {"result": "LOST"}
    assert events(builds)[-1] == RequestEvent.COMPLETED.value
    # The worker's client comes back on a new session, ready for its next build.
    wait_until(lambda: queue.get(request.uuid) is not None, 10, "the worker's client")


def test_runner_options_from_settings_default_to_the_runners(builds: Builds) -> None:
    options = runner_options(builds.settings)
    # a deployed executor sandboxes jobs by default; the runner as a library does not
    writable = builds.settings.executor.sandbox_writable
    key = node_key_path(builds.settings)  # playbooks' agent holds it; jobs never read it
    expected = RunnerOptions(
        state_dir=builds.settings.state_dir,
        sandbox="bwrap",
        sandbox_writable=writable,
        hidden=(key,),
        node_key=key,
    )
    assert options == expected


def test_one_sweep_at_a_time(builds: Builds) -> None:
    ran: list[str] = []

    def step() -> list[str]:
        ran.append("x")
        return []

    held = locks.acquire(builds.client, paths.cleanup_lock("general"))
    assert held is not None
    try:
        report = run_sweep(builds.client, [SweepStep("step", step)])
    finally:
        held.release()
    assert not report.ran and ran == []
    assert run_sweep(builds.client, [SweepStep("step", step)]).ran
    assert ran == ["x"]


def test_renudge_only_requests_older_than_min_age(builds: Builds) -> None:
    queue = builds.queue()
    old = queue.submit(JobRequest(uuid="old", created=time.time() - 100), {})
    queue.submit(JobRequest(uuid="new"), {})
    claimed = queue.submit(JobRequest(uuid="claimed", created=time.time() - 100), {})
    assert queue.claim(claimed.uuid, "worker-1") is not None
    nudged: list[str] = []

    sent = renudge_pending(queue, lambda r: nudged.append(r.uuid), min_age=10)

    assert sent == nudged == [old.uuid]
    # As many nudges as old requests still in the broker: a backlog, not a loss.
    assert (
        renudge_pending(queue, lambda r: nudged.append(r.uuid), min_age=10, queued=lambda: 1) == []
    )
    assert renudge_pending(
        queue, lambda r: nudged.append(r.uuid), min_age=10, queued=lambda: 0
    ) == [old.uuid]


def test_a_failing_step_does_not_stop_the_others() -> None:
    def broken() -> list[str]:
        raise RuntimeError("boom")

    report = SweepReport(ran=True)
    run_steps([SweepStep("broken", broken), SweepStep("fine", lambda: ["a"])], report)
    assert report.done == {"fine": ["a"]}
    assert report.failed == {"broken": "RuntimeError: boom"}


def test_zones_are_found_in_the_tree(builds: Builds) -> None:
    assert inventory.executor_zones(builds.client) == []
    builds.queue("east/1").submit(JobRequest(uuid=uuid.uuid4().hex), {})
    assert inventory.executor_zones(builds.client) == ["east/1"]
    names = [step.name for step in standard_steps(builds.client, builds.settings)]
    assert "executor.east/1:lost" in names and "executor:renudge" in names
    assert "merger:lost" in names


def test_zoned_queue_names() -> None:
    assert executor_queue_name() == "executor"
    assert executor_queue_name("east") == "executor.east"
    for bad in ("", "a,b", "a b"):
        with pytest.raises(DispatchError):
            executor_queue_name(bad)


def test_the_beat_schedule_runs_the_sweep_every_interval() -> None:
    entry = celeryconfig.beat_schedule["sluice-sweep"]
    assert entry["task"] == "sluice.maintenance.sweep"
    assert entry["schedule"] == celeryconfig._settings.sweep_interval


@pytest.mark.parametrize("sleep", [0.0, 1.0], ids=["short-build", "long-build"])
def test_the_start_is_nudged_only_for_a_build_that_outlasts_the_delay(
    builds: Builds, repo: Repo, options: RunnerOptions, sleep: float
) -> None:
    """A short build's start rides with its completion: one nudge; a long one gets two."""
    repo.script("run.sh", f"sleep {sleep}")
    request = builds.submit(make_spec(repo, repo.commit()))
    nudges: list[tuple[str, float]] = []
    began = time.monotonic()

    def notify(nudged: JobRequest, /, delay: float = 0.0) -> None:
        assert delay == 0.0  # a nudge is sent when it is due, never deferred
        nudges.append((nudged.uuid, time.monotonic() - began))

    report = execute_request(
        builds.queue(), request.uuid, "worker-1", options, notify, started_delay=0.5
    )

    assert report.outcome is Delivery.COMPLETED and report.result is Result.SUCCESS
    assert {uuid for uuid, _ in nudges} == {request.uuid}
    if sleep:
        assert len(nudges) == 2 and 0.5 <= nudges[0][1] < nudges[1][1]
    else:
        assert len(nudges) == 1  # the completion's
    time.sleep(0.7)  # the cancelled timer stays silent
    assert len(nudges) == (2 if sleep else 1)


def _request_watches(zookeeper: ZooKeeperTarget, client: ZooKeeperClient, uuid: str) -> list[str]:
    return [path for path in session_watches(zookeeper, client) if uuid in path]


def test_a_short_build_arms_no_cancel_watch(
    zookeeper: ZooKeeperTarget, builds: Builds, repo: Repo, options: RunnerOptions
) -> None:
    """Most builds end before the cancel watch is due: they cost no request for it."""
    repo.script("run.sh", "true")
    request = builds.submit(make_spec(repo, repo.commit()))

    report = execute_request(builds.queue(), request.uuid, "worker-1", options)

    assert report.outcome is Delivery.COMPLETED and report.result is Result.SUCCESS
    time.sleep(CANCEL_WATCH_DELAY + 0.2)  # the dropped arming stays dropped
    assert _request_watches(zookeeper, builds.client, request.uuid) == []


def test_a_cancel_before_the_watch_is_armed_stops_the_build(
    zookeeper: ZooKeeperTarget, builds: Builds, repo: Repo, options: RunnerOptions
) -> None:
    """Cancelled a moment after the claim: the watch, once armed, finds the flag there."""
    repo.script("run.sh", "trap '' TERM\necho started\nsleep 60")
    request = builds.submit(make_spec(repo, repo.commit()))
    queue = builds.queue()
    build = InThread(lambda: execute_request(queue, request.uuid, "worker-1", options))
    wait_until(lambda: events(builds) == [RequestEvent.STARTED.value], 30, "the claim")
    asked = time.monotonic()
    assert queue.request_cancel(request.uuid)

    report = build.join(30)

    assert isinstance(report, ExecutionReport) and report.result is Result.ABORTED
    assert time.monotonic() - asked < CANCEL_WATCH_DELAY + options.kill_grace + 1.5
    queue.remove(request.uuid)
    wait_until(lambda: not _request_watches(zookeeper, builds.client, request.uuid), 5)


def test_a_request_cancelled_in_the_queue_never_runs_its_job(
    builds: Builds, repo: Repo, options: RunnerOptions, tmp_path: Path
) -> None:
    """Its flag is there when it is read for the claim: the watch is armed at once."""
    ran = tmp_path / "ran"
    repo.script("run.sh", f"touch {ran}")
    request = builds.submit(make_spec(repo, repo.commit()))
    queue = builds.queue()
    assert queue.request_cancel(request.uuid)

    report = execute_request(queue, request.uuid, "worker-1", options)

    assert report.outcome is Delivery.COMPLETED and report.result is Result.ABORTED
    assert not ran.exists()
