"""The repo cache across processes: racing workers, a clone killed half-way."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeChange, MergeJob, MergeMode, Status
from tests.fixtures.waiting import wait_until
from tests.merger.gitrepos import Remotes
from workers.merger import RepoCache, run_merge_job
from workers.merger.cache import encode_project
from workers.merger.errors import InvalidJobError
from workers.merger.orphans import working_in
from workers.merger.parking import close_parked

SPAWN = multiprocessing.get_context("spawn")


def stacked_job(job_id: str) -> MergeJob:
    return MergeJob(
        job_id,
        tuple(
            MergeChange(
                "git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=MergeMode.REBASE
            )
            for n in (1, 2, 3)
        ),
    )


def _race_worker(
    state: str, baseurl: str, job_id: str, barrier: Barrier, out: Any
) -> None:  # runs in a spawned process
    cache = RepoCache(Path(state), {"git": ConnectionSettings("git", "git", baseurl)})
    barrier.wait()
    results = [run_merge_job(stacked_job(f"{job_id}-{i}"), cache).to_dict() for i in range(2)]
    out.put(results)


def test_processes_racing_on_one_repo(remotes: Remotes, tmp_path: Path) -> None:
    a = remotes.create("org/a", {"README": "hello\n", "shared": "a\nb\nc\n"})
    for n in (1, 2, 3):
        a.change(n, {f"file{n}": f"{n}\n"})
    a.advance("main", {"upstream": "u\n"})
    state = tmp_path / "state"
    workers = 3
    barrier = SPAWN.Barrier(workers)
    out = SPAWN.Queue()
    procs = [
        SPAWN.Process(
            target=_race_worker, args=(str(state), str(remotes.base), f"w{i}", barrier, out)
        )
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=10)
        assert proc.exitcode == 0
    flat = [r for batch in results for r in batch]
    assert all(r["status"] == "ok" for r in flat), [r["failure"] for r in flat]
    # Every worker built exactly the same speculative commits.
    assert len({tuple(c["merged_commit"] for c in r["changes"]) for r in flat}) == 1
    cache = RepoCache(state, {"git": ConnectionSettings("git", "git", str(remotes.base))})
    repo = cache.repo_path("git", "org/a")
    assert sorted(p.name for p in repo.parent.iterdir()) == [
        "org%2Fa",
        "org%2Fa.lock",
        "org%2Fa.work",
    ]
    cache.git.run(["fsck", "--no-dangling", "--no-progress"], repo)
    refs = cache.git.text(["for-each-ref", "--format=%(refname)", "refs/sluice/jobs/"], repo)
    assert len({ref.split("/")[3] for ref in refs.split()}) == workers * 2


def _slow_clone_worker(state: str, baseurl: str, slow_config: str) -> None:
    cache = RepoCache(
        Path(state),
        {"git": ConnectionSettings("git", "git", baseurl)},
        extra_env={"GIT_CONFIG_GLOBAL": slow_config},
    )
    run_merge_job(stacked_job("slow"), cache)


def test_interrupted_clone_is_recovered(remotes: Remotes, tmp_path: Path) -> None:
    a = remotes.create("org/a")
    for n in (1, 2, 3):
        a.change(n, {f"file{n}": f"{n}\n"})
    # Every pack the remote serves waits first, so the clone is caught midway.
    hook = tmp_path / "slow-pack"
    hook.write_text('#!/bin/sh\nsleep 3\nexec "$@"\n')
    hook.chmod(0o755)
    slow_config = tmp_path / "slow.gitconfig"
    slow_config.write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    baseurl = f"file://{remotes.base}"
    state = tmp_path / "state"
    child = SPAWN.Process(target=_slow_clone_worker, args=(str(state), baseurl, str(slow_config)))
    child.start()
    conn_dir = state / "git" / "git"
    wait_until(lambda: _running(conn_dir, "clone"), timeout=30, what="a clone in progress")
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)  # like kill -9 of a Celery pool process
    child.join(timeout=10)
    assert not (conn_dir / "org%2Fa").exists(), "nothing half-written at the repo path"
    orphans = working_in([conn_dir])
    assert orphans, "the killed process's git clone goes on without it"
    # The repo lock died with its holder: a short lock timeout is enough.
    cache = RepoCache(state, {"git": ConnectionSettings("git", "git", baseurl)}, lock_timeout=2)
    result = run_merge_job(stacked_job("after"), cache)
    assert result.status is Status.OK, result.failure
    assert not list(conn_dir.glob(".tmp-*")), "the leftover clone was swept"
    assert not set(orphans) & set(working_in([conn_dir])), "the orphaned clone was ended first"


def _running(folder: Path, command: str) -> list[int]:
    """The git processes working in ``folder`` that run ``command`` (``clone``, ``fetch``)."""
    found = []
    for pid in working_in([folder]):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if command.encode() in argv:
            found.append(pid)
    return found


def _slow_fetch_worker(state: str, baseurl: str, slow_config: str) -> None:
    cache = RepoCache(
        Path(state),
        {"git": ConnectionSettings("git", "git", baseurl)},
        extra_env={"GIT_CONFIG_GLOBAL": slow_config},
    )
    run_merge_job(
        MergeJob("slow", (MergeChange("git", "org/a", "main", ref="refs/changes/4"),)), cache
    )


def test_a_killed_workers_fetch_is_ended_before_the_repo_is_used(
    remotes: Remotes, tmp_path: Path
) -> None:
    """kill -9 mid-fetch: its git goes on, and is ended by the next holder of the repo lock."""
    a = remotes.create("org/a")
    for n in (1, 2, 3):
        a.change(n, {f"file{n}": f"{n}\n"})
    baseurl = f"file://{remotes.base}"
    state = tmp_path / "state"
    connections = {"git": ConnectionSettings("git", "git", baseurl)}
    assert run_merge_job(stacked_job("first"), RepoCache(state, connections)).status is Status.OK
    a.change(4, {"file4": "4\n"})  # a fetch of it needs a pack, which the hook holds back
    hook = tmp_path / "slow-pack"
    hook.write_text('#!/bin/sh\nsleep 30\nexec "$@"\n')
    hook.chmod(0o755)
    slow_config = tmp_path / "slow.gitconfig"
    slow_config.write_text(f"[uploadpack]\n\tpackObjectsHook = {hook}\n")
    child = SPAWN.Process(target=_slow_fetch_worker, args=(str(state), baseurl, str(slow_config)))
    child.start()
    repo = state / "git" / "git" / "org%2Fa"
    wait_until(lambda: _running(repo, "fetch"), timeout=30, what="a fetch in the repo")
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=10)
    orphans = working_in([repo])
    assert orphans, "the killed process's git fetch goes on without it"
    started = time.monotonic()
    cache = RepoCache(state, connections, lock_timeout=2)
    job = MergeJob("after", (MergeChange("git", "org/a", "main", ref="refs/changes/4"),))
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    assert time.monotonic() - started < 20, "the orphan was ended, not waited for"
    close_parked()  # this process's own git, kept for its next merge (parking.py)
    assert not working_in([repo])
    # A holder that let go cleanly leaves no pid: the next one ends nothing.
    assert (repo.parent / "org%2Fa.lock").read_text() == ""


def test_repo_lock_times_out(remotes: Remotes, tmp_path: Path) -> None:
    remotes.create("org/a")
    connections = {"git": ConnectionSettings("git", "git", str(remotes.base))}
    holder = RepoCache(tmp_path / "state", connections)
    waiter = RepoCache(tmp_path / "state", connections, lock_timeout=0.2)
    with holder.open("git", "org/a"):
        job = MergeJob("busy", (MergeChange("git", "org/a", "main", ref="refs/heads/main"),))
        failure = run_merge_job(job, waiter).failure
    assert failure is not None and failure.kind == "lock-timeout"
    assert run_merge_job(job, waiter).status is Status.OK


def test_project_names_map_to_one_safe_segment() -> None:
    assert encode_project("org/repo") == "org%2Frepo"
    assert encode_project(".hidden") == "%2Ehidden"
    for bad in ("", "/abs", "a/../b", "a//b", "..", "a/."):
        with pytest.raises(InvalidJobError):
            encode_project(bad)


def test_lock_files_of_a_killed_git_are_cleared(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    job = MergeJob("j", (MergeChange("git", "org/a", "main", ref="refs/changes/1"),))
    assert run_merge_job(job, cache).status is Status.OK
    a.advance("main", {"moved": "m\n"})
    repo = cache.repo_path("git", "org/a")
    # What a fetch killed while updating refs leaves behind.
    (repo / "packed-refs.lock").write_text("")
    (repo / "refs" / "heads" / "main.lock").write_text("")
    result = run_merge_job(MergeJob("j2", job.changes), cache)
    assert result.status is Status.OK, result.failure
    assert not list(repo.glob("*.lock")) and not list((repo / "refs").rglob("*.lock"))


def test_worktree_left_mid_operation_is_reset(remotes: Remotes, cache: RepoCache) -> None:
    """A worker killed mid-rebase leaves the worktree mid-operation; the next job resets it."""
    a = remotes.create("org/a", {"shared": "base\n"})
    a.change(1, {"shared": "one\n"})
    a.change(2, {"shared": "two\n"})
    a.change(3, {"three": "3\n"})
    for mode in (MergeMode.REBASE, MergeMode.CHERRY_PICK, MergeMode.MERGE_RESOLVE):
        conflicting = MergeJob(
            f"conflict-{mode.value}",
            tuple(
                MergeChange("git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=mode)
                for n in (1, 2)
            ),
        )
        assert run_merge_job(conflicting, cache).status is Status.CONFLICT
        worktree = cache.repo_path("git", "org/a").with_name("org%2Fa.work")
        (worktree / "stray-untracked-file").write_text("x")
        gitdir = Path(cache.git.text(["rev-parse", "--absolute-git-dir"], worktree))
        (gitdir / "index.lock").write_text("")  # as if git was killed mid-write
        clean = MergeJob(
            f"clean-{mode.value}",
            tuple(
                MergeChange("git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=mode)
                for n in (1, 3)
            ),
        )
        result = run_merge_job(clean, cache)
        assert result.status is Status.OK, (mode, result.failure)
        assert not (worktree / "stray-untracked-file").exists()
