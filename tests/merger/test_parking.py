"""Git processes parked between lock sessions: reused only where they are still right.

A worker process keeps one ``git cat-file`` and one ``git update-ref
--stdin`` per repo from one lock session to the next
(``workers/merger/parking.py``). These tests hold the claims that make it
safe: a parked process sees what a later fetch wrote; a repo cloned again
at the same path, a deleted pack, a dead process or a forked child each
get a new process; a refused ref transaction fails as the command did, and
the next one works; the worker's end leaves no git behind.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler import processlocal
from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import MergeJob, Status
from tests.fixtures.waiting import wait_until
from tests.merger.gitrepos import Remote, Remotes
from tests.merger.test_git_processes import CONFIG, check_change, warm
from workers.merger import RepoCache, run_merge_job
from workers.merger.catfile import CatFile, CatFileError
from workers.merger.errors import GitCommandError, MergerError, StaleGitLockError
from workers.merger.gitcmd import Git, classify
from workers.merger.gitproc import GitProcess, RepoIdentity, pack_files
from workers.merger.orphans import working_in
from workers.merger.parking import Parking, parked_cat_files, parked_ref_updates
from workers.merger.reftx import RefTransactionError, RefUpdates
from workers.merger.repo import Repo

SPAWN = multiprocessing.get_context("spawn")
JOB_REF = "refs/sluice/jobs/j/source-0"


def parked_pids(path: Path, git: Git) -> tuple[int, int]:
    """The pids of the cat-file and update-ref processes parked for ``path`` (both left parked)."""
    cat = parked_cat_files().take(path, git)
    updates = parked_ref_updates().take(path, git)
    assert cat is not None and updates is not None, "both processes are parked"
    parked_cat_files().park(path, cat)
    parked_ref_updates().park(path, updates)
    return cat.process.pid, updates.process.pid


def use_both(repo: Repo, rev: str = "refs/heads/main") -> tuple[int, int]:
    """Ask the cat-file process and write a ref: the pids of the two processes."""
    sha = repo.commits_of([rev])[rev]
    assert sha is not None
    repo.update_job_refs("j", {JOB_REF: sha})
    assert repo._objects is not None and repo._ref_updates is not None
    return repo._objects.process.pid, repo._ref_updates.process.pid


def ended(pid: int) -> bool:
    """Whether ``pid`` no longer runs (gone, or a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return state[state.rindex(b")") + 2 :][:1] == b"Z"


def wait_ended(pid: int) -> None:
    wait_until(lambda: ended(pid), timeout=10, what=f"process {pid} to end")


# --------------------------------------------------------------------------
# What a parked process sees


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
def test_a_parked_process_sees_what_a_later_fetch_wrote(
    remotes: Remotes, cache: RepoCache, packed: bool
) -> None:
    remote = remotes.create("org/a", CONFIG)
    with cache.open("git", "org/a") as repo:
        if packed:  # the fetch keeps what it receives as a pack (a big fetch does)
            cache.git.run(["config", "fetch.unpackLimit", "1"], repo.path)
        pids = use_both(repo)
        packs = pack_files(repo.path)
    # The lock is released: both processes wait for the next holder.
    assert parked_pids(cache.repo_path("git", "org/a"), cache.git) == pids
    new = remote.advance("main", {"later": "written after the start\n"})
    with cache.open("git", "org/a") as repo:
        assert repo.commits_of(["refs/heads/main"]) == {"refs/heads/main": remote.rev("HEAD~1")}
        repo.fetch()  # moves main, brings the new commit
        assert (pack_files(repo.path) > packs) is packed
        # The ref the fetch moved, the new commit and its files, its config.
        assert repo.commits_of(["refs/heads/main"]) == {"refs/heads/main": new}
        commits = repo.commits([new])
        assert commits is not None and commits[new].parents == (remote.rev("HEAD~1"),)
        assert repo.changed_files(remote.rev("HEAD~1"), new) == ["later"]
        assert repo.read_config(new) == repo._read_config_with_git(new)
        # A ref transaction naming the new commit.
        repo.update_job_refs("j", {JOB_REF: new})
        assert cache.git.text(["rev-parse", JOB_REF], repo.path) == new
        assert (repo._objects is not None and repo._ref_updates is not None) and pids == (
            repo._objects.process.pid,
            repo._ref_updates.process.pid,
        ), "the same two processes all along"


def test_the_steady_state_starts_no_git_process_but_the_fetch(
    remotes: Remotes, cache: RepoCache, git_processes: list[str]
) -> None:
    a = remotes.create("org/a", CONFIG)
    warm(cache)
    for n in range(1, 6):
        sha = a.change(n, {f"f{n}": f"{n}\n"})
        git_processes.clear()
        result = run_merge_job(MergeJob(f"check-{n}", (check_change(n, sha),)), cache)
        assert result.status is Status.OK, result.failure
        assert result.changes[0].files == (f"f{n}",)
        assert git_processes == (["cat-file", "fetch", "update-ref"] if n == 1 else ["fetch"])


# --------------------------------------------------------------------------
# When a parked process is not taken back


def test_a_repo_cloned_again_at_the_path_gets_new_processes(
    remotes: Remotes, cache: RepoCache, connections: dict[str, ConnectionSettings]
) -> None:
    remote = remotes.create("org/a", CONFIG)
    path = cache.repo_path("git", "org/a")
    with cache.open("git", "org/a") as repo:
        old = use_both(repo)
        identity = RepoIdentity.of(path)
    # Another worker finds the repo broken (a ref to a missing object) and
    # clones it again at the same path (the cache's recovery).
    (path / "refs" / "heads" / "broken").write_text("1" * 40 + "\n")
    other = RepoCache(cache.root.parent, connections)
    with other.open("git", "org/a"):
        pass
    assert not (path / "refs" / "heads" / "broken").exists(), "cloned again"
    assert RepoIdentity.of(path) != identity
    new = remote.advance("main", {"later": "l\n"})
    with cache.open("git", "org/a") as repo:  # this process still knows the repo as checked
        repo.fetch()
        assert repo.commits([new]) is not None
        pids = use_both(repo)
    assert pids[0] != old[0] and pids[1] != old[1]
    assert ended(old[0]) and ended(old[1]), "the old processes were ended"
    assert cache.git.text(["rev-parse", JOB_REF], path) == new


def test_a_process_killed_while_parked_is_replaced(
    remotes: Remotes, cache: RepoCache, git_processes: list[str]
) -> None:
    a = remotes.create("org/a", CONFIG)
    warm(cache)
    with cache.open("git", "org/a") as repo:
        pids = use_both(repo)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        wait_ended(pid)
    sha = a.change(1, {"one": "1\n"})
    git_processes.clear()
    result = run_merge_job(MergeJob("check", (check_change(1, sha),)), cache)
    assert result.status is Status.OK, result.failure
    assert git_processes == ["cat-file", "fetch", "update-ref"], "two new processes"


def test_an_update_ref_that_died_in_hand_is_replaced_before_the_transaction(
    remotes: Remotes, cache: RepoCache
) -> None:
    remote = remotes.create("org/a")
    main = remote.rev("refs/heads/main")
    with cache.open("git", "org/a") as repo:
        repo.update_job_refs("one", {"refs/sluice/jobs/one/source-0": main})
        first = repo._ref_updates
        assert first is not None
        os.kill(first.process.pid, signal.SIGKILL)
        wait_ended(first.process.pid)
        repo.update_job_refs("two", {"refs/sluice/jobs/two/source-0": main})
        second = repo._ref_updates
        assert second is not None and second is not first and second.transactions == 1
        assert cache.git.text(["rev-parse", "refs/sluice/jobs/two/source-0"], repo.path) == main


def test_a_deleted_pack_ends_the_processes_that_may_hold_it(
    remotes: Remotes, cache: RepoCache
) -> None:
    remote = remotes.create("org/a", CONFIG)
    path = cache.repo_path("git", "org/a")
    with cache.open("git", "org/a") as repo:
        cache.git.run(["config", "fetch.unpackLimit", "1"], path)
        old = use_both(repo)
    # Another worker's gc: the packs are replaced, the old ones deleted.
    cache.git.run(["repack", "-a", "-d", "-q", "-f"], path)
    with cache.open("git", "org/a") as repo:
        pids = use_both(repo)
    assert pids[0] != old[0] and pids[1] != old[1]
    assert ended(old[0]) and ended(old[1])
    # Our own maintenance: the processes in hand end when it deleted packs.
    cache.git.run(["config", "gc.autoPackLimit", "1"], path)
    with cache.open("git", "org/a") as repo:
        use_both(repo)
        repo.fetch()  # this process's first fetch: maintenance, which finds one pack
        assert repo._objects is not None, "nothing to do, no pack deleted"
        remote.advance("main", {"later": "l\n"})
        repo.fetch()  # a second pack
        assert len(pack_files(path)) == 2
        assert repo._objects is not None and repo._ref_updates is not None
        repo.maintain()  # two packs: gc --auto packs them into one
        assert len(pack_files(path)) == 1
        assert repo._objects is None and repo._ref_updates is None
        assert repo.commits_of(["refs/heads/main"]) == {"refs/heads/main": remote.rev("main")}


def test_a_busy_or_dead_process_is_not_parked_and_the_oldest_goes_first(
    remotes: Remotes, cache: RepoCache
) -> None:
    paths = [remotes.create(f"org/{name}").path for name in "abc"]
    parking: Parking[CatFile] = Parking(size=2)
    cats = [CatFile(cache.git, path) for path in paths]
    for path, cat in zip(paths, cats, strict=True):
        parking.park(path, cat)
    assert len(parking) == 2 and cats[0].process.returncode == 0, "the oldest ended"
    assert parking.take(paths[1], cache.git) is cats[1]
    # Half answered: ended, not parked.
    cats[1].process.send(b"info HEAD\nflush\n")
    parking.park(paths[1], cats[1])
    assert len(parking) == 1 and cats[1].process.returncode is not None
    # Taken back for another git environment: ended, and a new one is the caller's.
    assert parking.take(paths[2], cache.git.with_env(GIT_TRACE="0")) is None
    assert cats[2].process.returncode is not None
    dead = CatFile(cache.git, paths[0])
    os.kill(dead.process.pid, signal.SIGKILL)
    wait_ended(dead.process.pid)
    parking.park(paths[0], dead)
    assert len(parking) == 0
    parking.close_all()


# --------------------------------------------------------------------------
# Ref transactions


def refused(kind: str, remote: Remote) -> tuple[str, str]:
    """A transaction git refuses, and the part of git's message that says why."""
    main = remote.rev("refs/heads/main")
    if kind == "bad old value":
        remote.git("update-ref", JOB_REF, main)
        return f"update {JOB_REF} {main} {'1' * 40}\n", f"is at {main} but expected"
    if kind == "missing object":
        return f"update {JOB_REF} {'1' * 40}\n", "nonexistent object"
    (remote.path / f"{JOB_REF}.lock").parent.mkdir(parents=True, exist_ok=True)
    (remote.path / f"{JOB_REF}.lock").touch()
    return f"update {JOB_REF} {main}\n", "File exists"


@pytest.mark.parametrize("kind", ["bad old value", "missing object", "ref lock held"])
def test_a_refused_transaction_fails_as_the_command_did(remotes: Remotes, kind: str) -> None:
    remote = remotes.create("org/a")
    git = Git(remote.env)
    main = remote.rev("refs/heads/main")
    lines, why = refused(kind, remote)
    with pytest.raises(GitCommandError) as command:
        git.run(["update-ref", "--stdin"], remote.path, stdin=lines.encode())
    updates = RefUpdates(git, remote.path)
    updates.transaction(f"update refs/sluice/other {main}\n")  # a process that served before
    with pytest.raises(RefTransactionError) as transaction:
        updates.transaction(lines)
    error = transaction.value
    assert error.begun and error.returncode == command.value.returncode == 128
    assert why in error.stderr and why in command.value.stderr
    assert type(classify(error, "x")) is type(classify(command.value, "x"))
    assert updates.process.returncode == 128, "the process is gone"


def test_a_refused_transaction_reports_gits_error_and_the_next_one_works(
    remotes: Remotes, cache: RepoCache
) -> None:
    remote = remotes.create("org/a")
    main = remote.rev("refs/heads/main")
    with cache.open("git", "org/a") as repo:
        use_both(repo)
        lock = repo.path / f"{JOB_REF}.lock"
        lock.touch()
        with pytest.raises(StaleGitLockError, match="org/a: update refs: a killed git left a lock"):
            repo.update_job_refs("j", {JOB_REF: main})
        assert repo._ref_updates is None
        lock.unlink()
        repo.update_job_refs("j", {JOB_REF: main})
    assert parked_ref_updates().take(repo.path, cache.git) is not None


def test_a_transaction_larger_than_a_pipe_is_written_in_parts(remotes: Remotes) -> None:
    remote = remotes.create("org/a")
    main = remote.rev("refs/heads/main")
    updates = RefUpdates(Git(remote.env), remote.path)
    refs = [f"refs/sluice/jobs/many/source-{n}" for n in range(3000)]  # some 200 KB
    updates.transaction("".join(f"update {ref} {main}\n" for ref in refs))
    updates.transaction("".join(f"delete {ref}\n" for ref in refs[1:]))
    listed = remote.git("for-each-ref", "--format=%(refname)", "refs/sluice/jobs/many/")
    assert listed.split() == refs[:1] and updates.transactions == 2
    updates.close()
    assert updates.process.returncode == 0


def test_a_transaction_without_an_answer_is_a_timeout(remotes: Remotes) -> None:
    remote = remotes.create("org/a")
    updates = RefUpdates(Git(remote.env, timeout=0.0), remote.path)
    with pytest.raises(RefTransactionError) as failed:
        updates.transaction(f"update {JOB_REF} {remote.rev('refs/heads/main')}\n")
    assert failed.value.returncode == -9 and failed.value.begun
    assert "no answer within" in failed.value.stderr
    assert classify(failed.value, "x").kind == "unreachable"  # as a command that timed out


# --------------------------------------------------------------------------
# Fork and shutdown


def test_a_forked_child_neither_uses_nor_holds_its_parents_processes(
    remotes: Remotes, cache: RepoCache
) -> None:
    remote = remotes.create("org/a")
    main = remote.rev("refs/heads/main")
    path = cache.repo_path("git", "org/a")
    with cache.open("git", "org/a") as repo:
        use_both(repo)
    cat = parked_cat_files().take(path, cache.git)
    assert cat is not None
    parked_cat_files().park(path, cat)
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            fine = len(parked_cat_files()) == len(parked_ref_updates()) == 0
            fine = fine and cat.process._proc.stdin is not None and cat.process._proc.stdin.closed
            try:
                cat.info([main])
                fine = False
            except CatFileError:
                pass
            os.write(report_w, b"ok" if fine else b"no")
            os.read(go_r, 1)  # alive, with whatever it holds, while the parent closes
            code = 0
        finally:
            os._exit(code)
    try:
        assert os.read(report_r, 2) == b"ok"
        assert cat.info([main])[0] is not None, "the parent's process is untouched"
        started = time.monotonic()
        parked_cat_files().end(path)
        assert cat.process.returncode == 0, "it saw its input end (the child held no pipe)"
        assert time.monotonic() - started < 2
    finally:
        os.write(go_w, b"x")
        os.waitpid(child, 0)
        for fd in (report_r, report_w, go_r, go_w):
            os.close(fd)


def _merge_and_stop(state: str, baseurl: str, close: bool, out: Any) -> None:
    """A worker process: one merge, then its shutdown (``close``) or an exit without one."""
    cache = RepoCache(Path(state), {"git": ConnectionSettings("git", "git", baseurl)})
    job = MergeJob("m", (check_change(1),))
    assert run_merge_job(job, cache).status is Status.OK
    for pid in parked_pids(cache.repo_path("git", "org/a"), cache.git):
        out.put(pid)
    out.close()
    out.join_thread()
    if close:
        processlocal.close_all()  # what the worker's shutdown does
        assert len(parked_cat_files()) == len(parked_ref_updates()) == 0
    os._exit(0)  # no atexit, no finalizer: as a worker killed between jobs


@pytest.mark.parametrize("close", [True, False], ids=["shutdown", "plain exit"])
def test_a_worker_that_stops_leaves_no_git_behind(
    remotes: Remotes, tmp_path: Path, close: bool
) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    state = tmp_path / "state"
    out = SPAWN.Queue()
    worker = SPAWN.Process(target=_merge_and_stop, args=(str(state), str(remotes.base), close, out))
    worker.start()
    pids = [out.get(timeout=60), out.get(timeout=60)]
    worker.join(timeout=30)
    assert worker.exitcode == 0
    for pid in pids:
        wait_ended(pid)
    assert not working_in([state / "git" / "git" / "org%2Fa"])


@pytest.fixture
def process(remotes: Remotes) -> Iterator[GitProcess]:
    remote = remotes.create("org/a")
    cat = CatFile(Git(remote.env), remote.path)
    yield cat.process
    cat.close()


def test_a_process_serves_its_own_repo_and_git_only(process: GitProcess, tmp_path: Path) -> None:
    assert process.serves(process.git, process.repo)
    assert not process.serves(process.git, tmp_path)
    assert not process.serves(process.git.with_env(GIT_TRACE="0"), process.repo)
    owner, process._owner = process._owner, -1  # as seen from a forked child
    try:
        with pytest.raises(MergerError, match="belongs to process"):
            process.send(b"flush\n")
        assert not process.serves(process.git, process.repo)
    finally:
        process._owner = owner
    assert process.serves(process.git, process.repo)
