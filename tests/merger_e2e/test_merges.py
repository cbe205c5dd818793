"""Merges as real Celery tasks on real workers, with their state in ZooKeeper.

Every test submits merge requests as the scheduler would
(``scheduler.stores.merge_requests``), nudges them with
``scheduler.nudge.dispatch.send_merge`` (the task ``sluice.merger.run``) and reads
the results from ZooKeeper.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import redis

from cli.stack.process import is_alive
from scheduler.reconfiguration import merge_and_wait
from scheduler.settings.sections import ConnectionSettings
from scheduler.stores.job_requests import RequestState
from scheduler.stores.merge_requests import read_result, wait_for_merge_result
from scheduler.wire.events import RequestEvent
from scheduler.wire.merger import (
    LOST,
    BranchHeadsJob,
    BranchHeadsResult,
    ConfigJob,
    ConfigResult,
    FilesChangesJob,
    FilesChangesResult,
    MergeChange,
    MergeJob,
    MergeResult,
    MergerResult,
    ProjectRef,
    Status,
)
from scheduler.zk import paths
from tests.fixtures.published import Published
from tests.fixtures.waiting import wait_until
from tests.fixtures.workers import WorkerFactory
from tests.merger.gitrepos import Remotes
from tests.merger_e2e.conftest import SESSION_TIMEOUT, FakeSsh, Merges, ancestors, worker_of
from workers.merger import RepoCache, run_merge_job

STARTED = RequestEvent.STARTED.value
COMPLETED = RequestEvent.COMPLETED.value
SWEEP_INTERVAL = 1.0


def stacked_job(job_id: str, connection: str, project: str, *numbers: int) -> MergeJob:
    changes = tuple(
        MergeChange(connection, project, "main", ref=f"refs/changes/{n}", change_id=f"{n},1")
        for n in numbers
    )
    return MergeJob(job_id, changes)


def test_a_merge_request_runs_and_its_waiter_is_woken(
    celery_workers: WorkerFactory, merges: Merges, remotes: Remotes, tmp_path: Path
) -> None:
    app = remotes.create("org/app", {"zuul.yaml": "- job: {name: old}\n", "README": "app\n"})
    lib = remotes.create("org/lib")
    app.change(1, {"zuul.yaml": "- job: {name: new}\n"})
    app.change(2, {"src/two.py": "two = 2\n"})
    app.advance("main", {"CHANGELOG": "moved on\n"})  # a real three-way merge
    job = MergeJob(
        "gate-item-2",
        tuple(
            MergeChange("git", "org/app", "main", ref=f"refs/changes/{n}", change_id=f"{n},1")
            for n in (1, 2)
        ),
        required=(ProjectRef("git", "org/lib"),),
    )
    celery_workers.start(["merger"])
    request = merges.submit(job, wait=True)
    woken: list[tuple[float, MergerResult | None]] = []

    def wait() -> None:
        result = wait_for_merge_result(merges.client, request.uuid, 60, kind="merge")
        woken.append((time.time(), result))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()  # waiting before the task is even sent

    merges.send(request.uuid)
    waiter.join(70)

    assert woken, "the waiter did not return"
    returned, result = woken[0]
    assert isinstance(result, MergeResult) and result.status is Status.OK, result
    # The same commits as the engine run here, in a cache of its own: merges are deterministic.
    connections = {"git": ConnectionSettings("git", "git", str(remotes.base))}
    assert result == run_merge_job(job, RepoCache(tmp_path / "local", connections))
    assert result.commit_of("git", "org/lib", "main") == lib.rev("refs/heads/main")
    assert [c.files for c in result.changes] == [("zuul.yaml",), ("src/two.py",)]
    (config,) = result.config
    assert config.files["zuul.yaml"] == "- job: {name: new}\n"
    # Woken by the watch on the result marker, not by a poll that happens to pass by.
    marker_path = paths.request_child(paths.merger_queue(), "results", request.uuid)
    marker = merges.client.exists(marker_path)
    assert marker is not None and returned - marker.ctime / 1000 < 1.0
    final = merges.queue.get(request.uuid)
    assert final is not None and final.state is RequestState.COMPLETED
    assert final.worker.startswith(celery_workers.started[0].node)
    assert merges.events() == [(STARTED, request.uuid), (COMPLETED, request.uuid)]

    # The other kinds, as the scheduler asks them.
    files_request = merges.submit(FilesChangesJob("files-2", job.changes[1]))
    heads_request = merges.submit(BranchHeadsJob("heads-lib", "git", "org/lib"))
    for each in (files_request, heads_request):
        merges.send(each.uuid)
    files = wait_for_merge_result(merges.client, files_request.uuid, 60)
    heads = wait_for_merge_result(merges.client, heads_request.uuid, 60)
    assert isinstance(files, FilesChangesResult) and files.files == ("src/two.py",)
    assert isinstance(heads, BranchHeadsResult) and heads.state is not None
    assert heads.state.branches == {"main": lib.rev("refs/heads/main")}
    # Reconfiguration's way: submit, nudge, wait, remove in one call.
    config_result = merge_and_wait(
        merges.client, ConfigJob("config-app", "git", "org/app"), 60, settings=merges.settings
    )
    assert isinstance(config_result, ConfigResult) and config_result.status is Status.OK
    assert config_result.config[0].files["zuul.yaml"] == "- job: {name: old}\n"


def test_the_same_merge_task_sent_twice_runs_once(
    celery_workers: WorkerFactory,
    merges: Merges,
    remotes: Remotes,
    fake_ssh: FakeSsh,
    published: Published,
) -> None:
    # Both projects are reached over the logging stand-in ssh: every git call
    # a merge makes on its remote is one line of the log.
    for name in ("org/once", "org/twice"):
        remote = remotes.create(name)
        remote.change(1, {"one": "1\n"})
        remote.change(2, {"two": "2\n"})
    celery_workers.start(["merger"], concurrency=2)
    once = merges.submit(stacked_job("once", "review", "org/once", 1, 2))
    assert published.outcome(merges.send(once.uuid).id)["outcome"] == "completed"
    calls_of_one_merge = len(fake_ssh.calls("org/once"))
    assert calls_of_one_merge > 0

    request = merges.submit(stacked_job("twice", "review", "org/twice", 1, 2))
    first, second = merges.send(request.uuid), merges.send(request.uuid)
    replies = [published.outcome(first.id), published.outcome(second.id)]

    assert sorted(r["outcome"] for r in replies) == ["completed", "duplicate"], replies
    assert len(fake_ssh.calls("org/twice")) == calls_of_one_merge
    # A late delivery (an operator's retry) after completion has no effect either.
    assert published.outcome(merges.send(request.uuid).id)["outcome"] == "duplicate"
    assert len(fake_ssh.calls("org/twice")) == calls_of_one_merge
    mine = [kind for kind, uuid in merges.events() if uuid == request.uuid]
    assert mine == [STARTED, COMPLETED]
    result = merges.queue.get_result(request.uuid)
    assert result is not None and read_result(result).status is Status.OK


def test_two_workers_serve_fifty_concurrent_requests_each_once(
    celery_workers: WorkerFactory, merges: Merges, remotes: Remotes
) -> None:
    projects = [f"org/p{i}" for i in range(5)]
    for name in projects:
        remote = remotes.create(name)
        for n in range(1, 11):
            remote.change(n, {f"file-{n}": f"{n}\n"})
        remote.advance("main", {"moved": "on\n"})
    jobs = [
        stacked_job(f"job-{i}", "git", projects[i % 5], i // 5 + 1, (i // 5 + 1) % 10 + 1)
        for i in range(50)
    ]
    mergers = merges.start_mergers(celery_workers, 2)
    requests = [merges.submit(job) for job in jobs]

    for request in requests:
        merges.send(request.uuid)
    results = [wait_for_merge_result(merges.client, r.uuid, 90) for r in requests]

    assert all(r is not None and r.status is Status.OK for r in results), results
    assert [r.job_id for r in results if r is not None] == [job.job_id for job in jobs]
    completed = [uuid for kind, uuid in merges.events() if kind == COMPLETED]
    started = [uuid for kind, uuid in merges.events() if kind == STARTED]
    assert sorted(completed) == sorted(started) == sorted(r.uuid for r in requests)
    final = [merges.queue.get(r.uuid) for r in requests]
    assert all(f is not None and f.state is RequestState.COMPLETED for f in final)
    assert merges.queue.pending() == [] and merges.queue.lost_requests() == []
    served = {worker_of(f, mergers).node for f in final}
    assert served == {w.node for w in mergers}, "both workers should have merged"


def test_a_killed_merger_is_found_lost_and_the_redo_runs_on_the_other(
    celery_workers: WorkerFactory, merges: Merges, remotes: Remotes, fake_ssh: FakeSsh
) -> None:
    remote = remotes.create("org/slow")
    remote.change(1, {"one": "1\n"})
    job = stacked_job("slow-item", "review", "org/slow", 1)
    mergers = merges.start_mergers(celery_workers, 2)
    merges.start_sweeper(celery_workers, SWEEP_INTERVAL)
    fake_ssh.stall()  # the remote hangs: the merge is slow
    first = merges.submit(job)
    merges.send(first.uuid)

    stalled = wait_until(fake_ssh.stalled_pid, 60, "the merge to reach the remote")
    chain = ancestors(stalled)
    victim = next(w for w in mergers if w.pid in chain)
    survivor = next(w for w in mergers if w is not victim)
    tree = [victim.pid, *victim.children(), stalled]
    victim.kill()  # kill -9 of the worker's whole process tree
    killed = time.monotonic()
    wait_until(lambda: not any(is_alive(pid) for pid in tree), 10, "the worker tree to die")
    fake_ssh.release()

    lost = wait_for_merge_result(merges.client, first.uuid, SESSION_TIMEOUT + SWEEP_INTERVAL + 20)
    detected = time.monotonic() - killed
    assert isinstance(lost, MergeResult) and lost.status is Status.FAILED, lost
    assert lost.failure is not None and lost.failure.kind == LOST and lost.job_id == job.job_id
    # Session timeout + one sweep interval, plus slack for a loaded machine.
    assert detected < SESSION_TIMEOUT + SWEEP_INTERVAL + 3.0, f"lost after {detected:.1f}s"

    # The scheduler's part: a lost merge is merged again, as a new request.
    redo = merges.submit(job)
    merges.send(redo.uuid)
    done = wait_for_merge_result(merges.client, redo.uuid, 60)

    assert isinstance(done, MergeResult) and done.status is Status.OK, done
    assert worker_of(merges.queue.get(redo.uuid), mergers) is survivor
    completed = [uuid for kind, uuid in merges.events() if kind == COMPLETED]
    assert sorted(completed) == sorted([first.uuid, redo.uuid])
    assert merges.queue.lost_requests() == [] and merges.queue.pending() == []


def test_a_purged_merge_nudge_is_sent_again_by_the_sweep(
    celery_workers: WorkerFactory, merges: Merges, remotes: Remotes, redis_url: str
) -> None:
    remote = remotes.create("org/purged")
    remote.change(1, {"one": "1\n"})
    request = merges.submit(stacked_job("purged", "git", "org/purged", 1))
    merges.send(request.uuid)
    broker = redis.Redis.from_url(redis_url)
    try:
        assert broker.llen("merger") == 1
        broker.delete("merger")  # the broker lost the nudge
    finally:
        broker.close()
    celery_workers.start(["merger"], wait=False)
    merges.start_sweeper(celery_workers, SWEEP_INTERVAL, wait=False)

    result = wait_for_merge_result(merges.client, request.uuid, 60)

    assert isinstance(result, MergeResult) and result.status is Status.OK, result
