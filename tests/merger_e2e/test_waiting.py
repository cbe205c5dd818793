"""One fetch for the merges waiting (workers/merger/waiting.py): a real ZooKeeper and real git.

A merge that must fetch takes along the changes of the merge requests
waiting in the queue for the same repo, and a later merge of one of those
requests, with its commit in the cache, skips its fetch: the branches were
fetched after it was made. These tests count the git processes (and, over
the stand-in ssh, the calls on the remote), and check that every result is
the one a merge on its own gives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.stores.merge_requests import wait_for_merge_result
from scheduler.wire.merger import (
    BranchHeadsJob,
    MergeChange,
    MergeJob,
    MergeResult,
    ProjectRef,
    Status,
)
from scheduler.zk import paths
from tests.fixtures.published import Published
from tests.fixtures.workers import WorkerFactory
from tests.merger.gitrepos import Remote, Remotes
from tests.merger_e2e.conftest import FakeSsh, Merges, local_cache
from workers.merger import RepoCache, run_merge_job
from workers.merger.gitcmd import Git
from workers.merger.merge import ONE_PACK_AT
from workers.merger.service import execute_merge_request, open_queue


@pytest.fixture
def alone(tmp_path: Path, remotes: Remotes) -> RepoCache:
    """Another cache, for the merges each run on their own (no queue)."""
    return local_cache(tmp_path / "alone", remotes)


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[list[str]]]:
    """The arguments of every ``git fetch`` the merger runs, in order."""
    seen: list[list[str]] = []
    real_run = Git.run

    def run(self: Git, args: Any, *rest: Any, **kw: Any) -> Any:
        if args[0] == "fetch":
            seen.append(list(args))
        return real_run(self, args, *rest, **kw)

    monkeypatch.setattr(Git, "run", run)
    yield seen


def change_job(job_id: str, remote: Remote, number: int, connection: str = "git") -> MergeJob:
    """A check merge of change ``number``, given by ref and commit as the scheduler gives it."""
    ref = f"refs/changes/{number}"
    commit = remote.rev(ref)
    change = MergeChange(
        connection, "org/a", "main", ref=ref, commit=commit, change_id=f"{number},1"
    )
    return MergeJob(job_id, (change,))


def merged(result: MergeResult) -> list[tuple[str, str]]:
    return [(c.commit, c.merged_commit) for c in result.changes]


def test_one_fetch_serves_the_merges_waiting_and_changes_no_result(
    merges: Merges, remotes: Remotes, cache: RepoCache, alone: RepoCache, fetches: list[list[str]]
) -> None:
    remote = remotes.create("org/a")
    for n in range(1, 6):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    remote.advance("main", {"moved": "on\n"})
    jobs = [change_job(f"check-{n}", remote, n) for n in range(1, 6)]
    # a request of another kind waits too: read, never fetched along
    other = merges.submit(BranchHeadsJob("heads", "git", "org/a"))
    requests = [merges.submit(job) for job in jobs]
    queue = open_queue(merges.client)

    reports = [execute_merge_request(queue, r.uuid, "w", cache) for r in requests]

    assert [r.status for r in reports] == ["ok"] * 5
    # the first merge's fetch brought every waiting change; the others fetched nothing
    assert len(fetches) == 1, fetches
    along = [arg for arg in fetches[0] if arg.startswith("+refs/changes/")]
    assert sorted(along) == sorted(
        f"+refs/changes/{n}:refs/sluice/jobs/check-{n}/source-0" for n in range(1, 6)
    )
    results = [wait_for_merge_result(merges.client, r.uuid, 5) for r in requests]
    fetches.clear()
    on_their_own = [run_merge_job(job, alone) for job in jobs]
    assert len(fetches) == 5  # without a queue, each merge fetches
    for result, own in zip(results, on_their_own, strict=True):
        assert isinstance(result, MergeResult) and result.status is Status.OK
        assert merged(result) == merged(own) and result.repo_state == own.repo_state
    assert execute_merge_request(queue, other.uuid, "w", cache).status == "ok"


def test_a_request_made_after_the_fetch_fetches_the_branches_again(
    merges: Merges, remotes: Remotes, cache: RepoCache, fetches: list[list[str]]
) -> None:
    remote = remotes.create("org/a")
    for n in (1, 2, 3):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    first, second = (merges.submit(change_job(f"check-{n}", remote, n)) for n in (1, 2))
    queue = open_queue(merges.client)
    assert execute_merge_request(queue, first.uuid, "w", cache).status == "ok"
    assert len(fetches) == 1
    old_tip = remote.rev("refs/heads/main")
    new_tip = remote.advance("main", {"moved": "on\n"})  # after the fetch
    third = merges.submit(change_job("check-3", remote, 3))

    assert execute_merge_request(queue, second.uuid, "w", cache).status == "ok"
    assert execute_merge_request(queue, third.uuid, "w", cache).status == "ok"

    # the second was made before the fetch: the branch as fetched, no fetch of its own;
    # the third was made after it: a fetch of its own, and the branch as it is now
    assert len(fetches) == 2, fetches
    second_result = wait_for_merge_result(merges.client, second.uuid, 5)
    third_result = wait_for_merge_result(merges.client, third.uuid, 5)
    assert isinstance(second_result, MergeResult) and isinstance(third_result, MergeResult)
    assert second_result.bases[0].branches == {"main": old_tip}
    assert third_result.bases[0].branches == {"main": new_tip}


def test_a_waiting_change_the_remote_lost_is_not_this_merge_s_failure(
    merges: Merges, remotes: Remotes, cache: RepoCache, fetches: list[list[str]]
) -> None:
    remote = remotes.create("org/a")
    for n in (1, 2):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    jobs = [change_job(f"check-{n}", remote, n) for n in (1, 2)]
    good, doomed = (merges.submit(job) for job in jobs)
    remote.git("update-ref", "-d", "refs/changes/2")  # gone before anyone fetched it
    queue = open_queue(merges.client)

    assert execute_merge_request(queue, good.uuid, "w", cache).status == "ok"
    report = execute_merge_request(queue, doomed.uuid, "w", cache)

    # the fetch with change 2 failed and was made again without it
    assert len(fetches) == 3 and "+refs/changes/2" not in " ".join(fetches[1])
    assert report.status == "failed"
    result = wait_for_merge_result(merges.client, doomed.uuid, 5)
    assert result is not None and result.failure is not None
    assert result.failure.kind == "unknown-ref" and result.failure.change_id == "2,1"


def test_a_burst_of_requests_costs_the_remote_one_fetch_of_changes(
    celery_workers: WorkerFactory,
    merges: Merges,
    remotes: Remotes,
    fake_ssh: FakeSsh,
    published: Published,
) -> None:
    # Driven as the scheduler drives it: requests submitted at once, nudges, a real
    # merger worker; the remote is reached over the logging stand-in ssh.
    remote = remotes.create("org/a")
    for n in range(1, 9):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    jobs = [change_job(f"burst-{n}", remote, n, "review") for n in range(1, 9)]
    requests = [merges.submit(job) for job in jobs]
    celery_workers.start(["merger"], concurrency=1)

    replies = [merges.send(r.uuid) for r in requests]
    outcomes = [published.outcome(reply.id) for reply in replies]

    assert [o["status"] for o in outcomes] == ["ok"] * 8
    # a clone, then one fetch for the first merge, with every waiting change in it
    upload_packs = [c for c in fake_ssh.calls("org/a") if "git-upload-pack" in c]
    assert len(upload_packs) == 2, upload_packs
    results = [wait_for_merge_result(merges.client, r.uuid, 5) for r in requests]
    assert all(isinstance(r, MergeResult) and r.status is Status.OK for r in results)


def test_a_waiting_request_that_does_not_decode_is_read_once_and_changes_nothing(
    merges: Merges,
    remotes: Remotes,
    cache: RepoCache,
    fetches: list[list[str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    remote = remotes.create("org/a")
    for n in (1, 2):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    first, second = (merges.submit(change_job(f"check-{n}", remote, n)) for n in (1, 2))
    queue = open_queue(merges.client)
    merges.client.create(paths.request_child(queue.root, "requests", "garbled"), b"\xff{not json")

    with caplog.at_level(logging.WARNING, logger="workers.merger.waiting"):
        reports = [execute_merge_request(queue, r.uuid, "w", cache) for r in (first, second)]

    assert [r.status for r in reports] == ["ok", "ok"]
    # the first listing's read failed: each merge fetched on its own
    assert len(fetches) == 2
    assert len([r for r in caplog.records if "not read" in r.getMessage()]) == 1


def test_a_required_project_is_fetched_once_for_the_merges_waiting(
    merges: Merges, remotes: Remotes, cache: RepoCache, fetches: list[list[str]]
) -> None:
    remote = remotes.create("org/a")
    lib = remotes.create("org/lib")
    for n in (1, 2, 3):
        remote.change(n, {f"file-{n}": f"{n}\n"})
    jobs = [
        replace(change_job(f"check-{n}", remote, n), required=(ProjectRef("git", "org/lib"),))
        for n in (1, 2, 3)
    ]
    requests = [merges.submit(job) for job in jobs]
    queue = open_queue(merges.client)

    reports = [execute_merge_request(queue, r.uuid, "w", cache) for r in requests]

    assert [r.status for r in reports] == ["ok"] * 3
    # one fetch of each repo, by the first merge: the others were fresh for both
    assert len(fetches) == 2, fetches
    tip = lib.rev("refs/heads/main")
    for request in requests:
        result = wait_for_merge_result(merges.client, request.uuid, 5)
        assert isinstance(result, MergeResult)
        states = {s.project: s.branches for s in result.repo_state}
        assert states["org/lib"] == {"main": tip}


def count_objects(cache: RepoCache) -> dict[str, int]:
    """``git count-objects -v`` of org/a's cache repo: loose objects, packs."""
    out = cache.git.text(["count-objects", "-v"], cache.repo_path("git", "org/a"))
    return {key: int(value) for key, value in (line.split(": ") for line in out.splitlines())}


@pytest.mark.parametrize("burst", [ONE_PACK_AT + 1, 3])
def test_a_burst_fetched_along_is_kept_as_one_pack(
    merges: Merges, remotes: Remotes, cache: RepoCache, burst: int
) -> None:
    """A fetch that brings many waiting changes writes one pack, not a file per object.

    Fewer changes stay loose objects, as git keeps a small fetch.
    """
    remote = remotes.create("org/a")
    for n in range(1, burst + 2):
        remote.change(n, {f"dir-{n}/file-{n}": f"{n}\n"})
    first = merges.submit(change_job("warm", remote, burst + 1))
    queue = open_queue(merges.client)
    assert execute_merge_request(queue, first.uuid, "w", cache).status == "ok"
    before = count_objects(cache)
    requests = [merges.submit(change_job(f"check-{n}", remote, n)) for n in range(1, burst + 1)]

    reports = [execute_merge_request(queue, r.uuid, "w", cache) for r in requests]

    assert [r.status for r in reports] == ["ok"] * burst
    after = count_objects(cache)
    if burst - 1 >= ONE_PACK_AT:  # the first request's own change, and burst - 1 along
        assert after["packs"] == before["packs"] + 1 and after["count"] == before["count"]
    else:
        assert after["packs"] == before["packs"] and after["count"] > before["count"]
