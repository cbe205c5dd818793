"""The merge service and the submitter helpers without Celery: a real ZooKeeper and real git.

``workers.merger.service.execute_merge_request`` is a plain function: these
tests call it directly, with hooks in the repo-cache factory where something
must happen while a request is claimed.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.settings.sections import Settings
from scheduler.stores.job_requests import JobRequest, RequestState
from scheduler.stores.merge_requests import (
    new_request,
    read_result,
    submit_merge_job,
    wait_for_merge_result,
)
from scheduler.sweep import run_sweep, standard_steps
from scheduler.wire.merger import (
    LOST,
    BranchHeadsJob,
    BranchHeadsResult,
    ConfigJob,
    InvalidRecordError,
    JobKind,
    MergeResult,
    Status,
)
from scheduler.zk.client import ZooKeeperClient, attach, connect
from scheduler.zk.context import Transaction
from scheduler.zk.event_queue import EventQueue
from tests.merger.gitrepos import Remotes
from tests.merger_e2e.conftest import RESULTS, Merges
from workers.claims import Delivery
from workers.merger import RepoCache
from workers.merger.service import (
    INTERNAL,
    execute_merge_request,
    open_queue,
    process_cache,
)


@pytest.fixture
def short_session_client(merges: Merges) -> Iterator[ZooKeeperClient]:
    settings = replace(merges.settings.zookeeper, session_timeout=4.0, call_timeout=4.0)
    client = connect(settings)
    yield client
    client.stop()
    client.close()


def heads_job(remotes: Remotes) -> BranchHeadsJob:
    remotes.create("org/a")
    return BranchHeadsJob("heads-a", "git", "org/a")


def test_a_request_runs_once_and_duplicates_have_no_effect(
    merges: Merges, remotes: Remotes, cache: RepoCache
) -> None:
    request = merges.submit(heads_job(remotes))
    queue = open_queue(merges.client)

    report = execute_merge_request(queue, request.uuid, "worker-1", cache)
    again = execute_merge_request(queue, request.uuid, "worker-2", cache)

    assert report.outcome is Delivery.COMPLETED and report.status == "ok"
    assert report.to_dict()["kind"] == "branch-heads"
    assert again.outcome is Delivery.DUPLICATE
    result = wait_for_merge_result(merges.client, request.uuid, 5, kind=JobKind.BRANCH_HEADS)
    assert isinstance(result, BranchHeadsResult) and result.status is Status.OK
    assert len(merges.events()) == 2
    stored = queue.get_result(request.uuid)
    assert stored is not None and stored.result["kind"] == "branch-heads"


def test_a_request_created_in_a_pipeline_transaction_runs(
    merges: Merges, remotes: Remotes, cache: RepoCache
) -> None:
    job = heads_job(remotes)
    request, params = new_request(
        job, tenant="t", pipeline="gate", buildset="bs-1", result_queue=RESULTS
    )
    queue = open_queue(merges.client)
    txn = Transaction(merges.client)  # the pass's transaction, with its other writes
    queue.submit_ops(request, params, txn)
    txn.commit()

    report = execute_merge_request(queue, request.uuid, "w", cache)

    assert report.outcome is Delivery.COMPLETED and report.status == "ok"
    events = [e for e in merges.events() if e[1] == request.uuid]
    assert [kind for kind, _ in events] == ["request-started", "request-completed"]
    stored = queue.get_result(request.uuid)
    assert stored is not None
    result = read_result(stored, queue.get(request.uuid))
    assert isinstance(result, BranchHeadsResult) and result.job_id == job.job_id


def test_params_that_hold_no_job_complete_with_an_invalid_failure(
    merges: Merges, cache: RepoCache
) -> None:
    queue = open_queue(merges.client)
    request, _ = new_request(ConfigJob("c", "git", "org/a"))
    queue.submit(request, {"kind": "config", "job": "not a job"})
    other = queue.submit(JobRequest(uuid=uuid.uuid4().hex), {"kind": "nonsense", "job": {}})

    reports = [execute_merge_request(queue, r.uuid, "w", cache) for r in (request, other)]

    assert [r.outcome for r in reports] == [Delivery.COMPLETED] * 2
    config = wait_for_merge_result(merges.client, request.uuid, 5)
    assert config is not None and config.status is Status.FAILED and config.job_id == "c"
    assert config.failure is not None and config.failure.kind == "invalid"
    unknown = wait_for_merge_result(merges.client, other.uuid, 5)
    assert isinstance(unknown, MergeResult) and unknown.failure is not None
    assert "nonsense" in unknown.failure.message


def test_an_engine_crash_is_a_result_not_a_crash(merges: Merges, remotes: Remotes) -> None:
    request = merges.submit(heads_job(remotes))

    def broken_cache() -> RepoCache:
        raise OSError("No space left on device")

    report = execute_merge_request(open_queue(merges.client), request.uuid, "w", broken_cache)

    assert report.outcome is Delivery.COMPLETED and report.status == "failed"
    result = wait_for_merge_result(merges.client, request.uuid, 5)
    assert result is not None and result.failure is not None
    assert result.failure.kind == INTERNAL and "No space left" in result.failure.message
    assert result.job_id == "heads-a"


def test_a_request_removed_while_it_runs_stores_nothing(
    merges: Merges, remotes: Remotes, cache: RepoCache
) -> None:
    request = merges.submit(heads_job(remotes))
    queue = open_queue(merges.client)

    def removed_meanwhile() -> RepoCache:
        queue.remove(request.uuid)  # the scheduler dequeued the item
        return cache

    report = execute_merge_request(queue, request.uuid, "w", removed_meanwhile)

    assert report.outcome is Delivery.REMOVED
    assert queue.get(request.uuid) is None and queue.lost_requests() == []


def test_a_lost_session_stores_nothing_and_the_sweep_records_the_merge_lost(
    merges: Merges, remotes: Remotes, cache: RepoCache, short_session_client: ZooKeeperClient
) -> None:
    request = merges.submit(heads_job(remotes))
    queue = open_queue(short_session_client)

    def session_expires() -> RepoCache:
        # A real server-side expiry: a second client on the same session, closed.
        session_id, password = short_session_client.kazoo.client_id
        twin = attach(short_session_client.settings, session_id, password)
        twin.stop()
        twin.close()
        return cache

    report = execute_merge_request(queue, request.uuid, "w", session_expires)

    assert report.outcome is Delivery.LOCK_LOST
    assert merges.queue.get_result(request.uuid) is None  # the fenced completion was refused
    assert [r.uuid for r in merges.queue.lost_requests()] == [request.uuid]
    sweep = run_sweep(merges.client, lambda: standard_steps(merges.client, merges.settings))
    assert sweep.done["merger:lost"] == [request.uuid], sweep
    lost = wait_for_merge_result(merges.client, request.uuid, 5, remove=True)
    assert isinstance(lost, BranchHeadsResult) and lost.status is Status.FAILED
    assert lost.failure is not None and lost.failure.kind == LOST and lost.job_id == "heads-a"
    assert merges.queue.get(request.uuid) is None  # removed once read


def test_submit_checks_the_kind_and_names_the_job(merges: Merges) -> None:
    job = ConfigJob("reconfigure-1", "git", "org/a")
    with pytest.raises(InvalidRecordError):
        submit_merge_job(merges.client, "merge", job)
    request = submit_merge_job(
        merges.client, "config", job, tenant="t", buildset="b", result_queue=RESULTS, wait=True
    )
    stored = merges.queue.get(request.uuid)
    assert stored is not None and stored.state is RequestState.REQUESTED
    assert stored.job_name == "reconfigure-1" and stored.info == {"kind": "config"}
    assert merges.queue.params(request.uuid) == {"kind": "config", "job": job.to_dict()}
    assert wait_for_merge_result(merges.client, request.uuid, 0.2) is None  # nobody ran it


def test_read_result_of_a_lost_request_uses_the_request(merges: Merges) -> None:
    request, _ = new_request(ConfigJob("c", "git", "org/a"))
    queue = merges.queue
    queue.submit(request, {})
    claimed = queue.claim(request.uuid, "w")
    assert claimed is not None
    queue.release(claimed)  # as if its worker died: the lock is gone
    running = queue.get(request.uuid)
    assert running is not None and queue.recover_lost(running)  # what the sweep does
    result = queue.get_result(request.uuid)
    assert result is not None
    lost = read_result(result, queue.get(request.uuid))
    assert lost.failure is not None and lost.failure.kind == LOST and lost.job_id == "c"
    assert type(lost).__name__ == "ConfigResult"


def test_one_repo_cache_per_process(merges: Merges, tmp_path: Path) -> None:
    settings = replace(merges.settings, state_dir=tmp_path / "one")
    assert process_cache(settings) is process_cache(settings)
    moved: Settings = replace(settings, state_dir=tmp_path / "two")
    assert process_cache(moved).root == tmp_path / "two" / "git"


def test_the_sweep_removes_a_merge_once_consumed_and_named_by_no_item(
    merges: Merges, remotes: Remotes, cache: RepoCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standard sweep's merger clean-up: a pass consumed the completion, no item names it."""
    from scheduler import sweep

    request = merges.submit(heads_job(remotes))
    report = execute_merge_request(open_queue(merges.client), request.uuid, "w", cache)
    assert report.outcome is Delivery.COMPLETED
    results = EventQueue(merges.client, RESULTS)
    monkeypatch.setattr(sweep, "CONSUMED_MAX_AGE", 0.01)
    monkeypatch.setattr(sweep, "_last_cleanup", {})
    time.sleep(0.05)

    def sweep_once() -> list[str]:
        sweep._last_cleanup.clear()
        done = run_sweep(merges.client, lambda: standard_steps(merges.client, merges.settings))
        return done.done.get("merger:cleanup", [])

    assert sweep_once() == []  # its completion event is still queued
    for event in results.read():
        results.ack(event)
    assert sweep_once() == [request.uuid]
    assert merges.queue.get(request.uuid) is None
