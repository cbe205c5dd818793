"""Builds as real Celery tasks on real workers, with their state in ZooKeeper.

Every test submits a build request as the scheduler would (params: a
BuildSpec of a real script in a real git repository), nudges it with
``scheduler.nudge.dispatch.send_build`` and reads the result from ZooKeeper.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import redis

from cli.stack.process import is_alive
from scheduler.nudge.dispatch import send_build
from scheduler.nudge.task_names import executor_queue_name
from scheduler.stores.job_requests import RequestState
from scheduler.wire.events import RequestEvent
from tests.executor.helpers import Repo, make_spec, processes_of_build, with_context
from tests.executor_e2e.conftest import SESSION_TIMEOUT, Builds
from tests.fixtures.published import Published
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory

STARTED = RequestEvent.STARTED.value
COMPLETED = RequestEvent.COMPLETED.value
SWEEP_INTERVAL = 1.0


def job_log(environment: ServiceEnvironment, build_uuid: str) -> Path:
    return environment.state_dir / "logs" / build_uuid / "job-output.txt"


def log_says(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text()


def host_pid_of(argv: list[str]) -> int | None:
    """The pid of a process running exactly ``argv`` (None if there is none)."""
    wanted = "\0".join(argv) + "\0"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_text() == wanted:
                    return int(entry.name)
            except OSError:
                continue
    return None


def ancestors(pid: int) -> list[int]:
    """``pid`` and its parents, read from /proc."""
    chain = []
    while pid > 1:
        chain.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def test_a_build_runs_and_reports_started_then_completed(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo
) -> None:
    repo.script("run.sh", "echo hello from the job")
    spec = make_spec(repo, repo.commit())
    celery_workers.start([executor_queue_name()])
    request = builds.submit(spec)

    send_build(request.uuid, settings=builds.settings)

    result = builds.queue().wait_for_result(request.uuid, 60)
    assert result is not None and not result.lost
    assert result.result["result"] == "SUCCESS", result.result
    assert result.result["build_uuid"] == spec.context.build_uuid
    assert any("hello from the job" in line for line in result.result["log_tail"])
    assert builds.events() == [(STARTED, request.uuid), (COMPLETED, request.uuid)]
    final = builds.queue().get(request.uuid)
    assert final is not None and final.state == RequestState.COMPLETED
    assert final.worker.startswith(celery_workers.started[0].node)


def test_a_zoned_build_runs_on_the_zone_queue(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo, published: Published
) -> None:
    repo.script("run.sh", "true")
    spec = make_spec(repo, repo.commit())
    celery_workers.start([executor_queue_name("east")])
    request = builds.submit(spec, zone="east")

    task = send_build(request.uuid, "east", settings=builds.settings)
    reply = published.outcome(str(task.id))

    assert reply["outcome"] == "completed" and reply["result"] == "SUCCESS"
    result = builds.queue("east").get_result(request.uuid)
    assert result is not None and result.result["result"] == "SUCCESS"


def test_the_same_build_task_sent_twice_runs_once(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo, tmp_path: Path, published: Published
) -> None:
    count = tmp_path / "count"
    repo.script("run.sh", f"echo run >> {count}\nsleep 1")
    spec = make_spec(repo, repo.commit())
    celery_workers.start([executor_queue_name()], concurrency=2)
    request = builds.submit(spec)

    first = send_build(request.uuid, settings=builds.settings)
    second = send_build(request.uuid, settings=builds.settings)
    replies = [published.outcome(str(first.id)), published.outcome(str(second.id))]

    assert sorted(r["outcome"] for r in replies) == ["completed", "duplicate"]
    assert count.read_text().splitlines() == ["run"]
    # A third delivery after completion (an operator's retry) has no effect either.
    late = published.outcome(str(send_build(request.uuid, settings=builds.settings).id))
    assert late["outcome"] == "duplicate"
    assert count.read_text().splitlines() == ["run"]
    assert builds.events() == [(STARTED, request.uuid), (COMPLETED, request.uuid)]


def test_cancel_stops_a_running_build_within_two_seconds(
    celery_workers: WorkerFactory,
    builds: Builds,
    repo: Repo,
    test_environment: ServiceEnvironment,
) -> None:
    repo.script("run.sh", "trap '' TERM\necho started\nsleep 60")
    spec = make_spec(repo, repo.commit())
    celery_workers.start([executor_queue_name()])
    request = builds.submit(spec)
    send_build(request.uuid, settings=builds.settings)
    log = job_log(test_environment, spec.context.build_uuid)
    wait_until(lambda: log_says(log, "| run | started"), 60, "the job to start")

    asked = time.monotonic()
    assert builds.queue().request_cancel(request.uuid)
    result = builds.queue().wait_for_result(request.uuid, 10)
    elapsed = time.monotonic() - asked

    assert result is not None and result.result["result"] == "ABORTED", result
    assert elapsed < 2.0, f"cancel took {elapsed:.2f}s"
    wait_until(
        lambda: not processes_of_build(spec.context.build_uuid), 5, "the job's tree to be gone"
    )


def test_a_killed_worker_is_found_lost_and_attempt_two_runs_on_the_other(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo, tmp_path: Path
) -> None:
    marker, pid_file = tmp_path / "attempt-1", tmp_path / "job.pid"
    script = f"""
if [ -e {marker} ]; then echo second attempt; exit 0; fi
touch {marker}
echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}
sleep 60
"""
    repo.script("run.sh", script)
    spec = make_spec(repo, repo.commit())
    executors = [celery_workers.start([executor_queue_name()]) for _ in range(2)]
    builds.start_sweeper(celery_workers, SWEEP_INTERVAL)
    first = builds.submit(spec)
    send_build(first.uuid, settings=builds.settings)

    wait_until(lambda: pid_file.exists() and pid_file.read_text(), 60, "the job")
    # the job's $$ is its sandbox's own pid: find its sleep among the host's processes
    job_pid = wait_until(lambda: host_pid_of(["sleep", "60"]), 10, "the job's sleep")
    assert job_pid is not None
    chain = ancestors(job_pid)
    victim = next(w for w in executors if w.pid in chain)
    survivor = next(w for w in executors if w is not victim)
    tree = [victim.pid, *victim.children()]
    victim.kill()
    killed = time.monotonic()
    wait_until(lambda: not any(is_alive(pid) for pid in tree), 10, "the worker tree to die")

    lost = builds.queue().wait_for_result(first.uuid, SESSION_TIMEOUT + SWEEP_INTERVAL + 20)
    detected = time.monotonic() - killed
    print(f"lost build detected {detected:.1f}s after the kill")
    assert lost is not None and lost.lost and lost.result == {"result": "LOST"}, lost
    # Session timeout + one sweep interval, plus slack for a loaded machine.
    assert detected < SESSION_TIMEOUT + SWEEP_INTERVAL + 3.0, f"lost after {detected:.1f}s"
    wait_until(lambda: not processes_of_build(spec.context.build_uuid), 10, "the job's tree to die")

    # The scheduler's part: attempt 2 is a new request.
    retry_spec = with_context(spec, build_uuid=uuid.uuid4().hex)
    second = builds.submit(retry_spec)
    send_build(second.uuid, settings=builds.settings)
    done = builds.queue().wait_for_result(second.uuid, 60)

    assert done is not None and done.result["result"] == "SUCCESS", done
    rerun = builds.queue().get(second.uuid)
    assert rerun is not None and rerun.worker.startswith(survivor.node)
    results = [builds.queue().get_result(u) for u in (first.uuid, second.uuid)]
    assert sorted(r.result["result"] for r in results if r is not None) == ["LOST", "SUCCESS"]
    completed = [u for kind, u in builds.events() if kind == COMPLETED]
    assert sorted(completed) == sorted([first.uuid, second.uuid])
    assert builds.queue().lost_requests() == [] and builds.queue().pending() == []


def test_a_purged_nudge_is_sent_again_by_the_sweep(
    celery_workers: WorkerFactory, builds: Builds, repo: Repo, redis_url: str
) -> None:
    repo.script("run.sh", "echo ran after the purge")
    spec = make_spec(repo, repo.commit())
    request = builds.submit(spec)
    send_build(request.uuid, settings=builds.settings)
    broker = redis.Redis.from_url(redis_url)
    try:
        assert broker.llen(executor_queue_name()) == 1
        broker.delete(executor_queue_name())  # the broker lost the nudge
    finally:
        broker.close()

    celery_workers.start([executor_queue_name()])
    still = builds.queue().get(request.uuid)
    assert still is not None and still.state == RequestState.REQUESTED
    builds.start_sweeper(celery_workers, SWEEP_INTERVAL)

    result = builds.queue().wait_for_result(request.uuid, 60)
    assert result is not None and result.result["result"] == "SUCCESS", result
