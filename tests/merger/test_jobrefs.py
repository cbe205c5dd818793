"""The refs a cache repo keeps: those of its last jobs, whatever ran before.

A merge's cost grows with the refs of its repo, so the merger keeps the
refs of the newest jobs only, within ``keep_refs`` (``workers/merger/
jobrefs.py``). These tests run real merges and count the refs git sees:
bounded after many jobs, by one process or two, after fetch-only jobs,
with the journal lost or a process killed; old refs of an earlier version
cleaned a few hundred at a time; and nothing else changes: results equal
a fresh cache's, the gate's memo still serves item *n*, a replay works.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import FilesChangesJob, MergeChange, MergeJob, MergeMode, Status
from tests.merger.gitrepos import Remote, Remotes
from workers.merger import RepoCache, delete_job_refs, run_files_changes_job, run_merge_job
from workers.merger.jobrefs import DROP_AT_ONCE, JOURNAL, JobRefs
from workers.merger.replay import replay_job


def change(number: int, name: str = "", mode: MergeMode = MergeMode.MERGE) -> MergeChange:
    """Change ``number`` of org/a; ``name`` makes its memo keys new."""
    return MergeChange(
        "git",
        "org/a",
        "main",
        ref=f"refs/changes/{number}",
        merge_mode=mode,
        change_id=name or f"{number},1",
    )


def sluice_refs(cache: RepoCache) -> dict[str, str]:
    """Every ref under ``refs/sluice/`` of org/a's cache repo, as git lists them."""
    repo = cache.repo_path("git", "org/a")
    out = cache.git.text(
        ["for-each-ref", "--format=%(objectname) %(refname)", "refs/sluice/"], repo
    )
    return {ref: sha for sha, ref in (line.split(" ") for line in out.splitlines())}


def jobs_of(refs: dict[str, str]) -> set[str]:
    return {ref.split("/")[3] for ref in refs if ref.startswith("refs/sluice/jobs/")}


def merged(cache: RepoCache, job: MergeJob) -> dict[str, Any]:
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    return result.to_dict()


def project(remotes: Remotes, changes: int = 3) -> Remote:
    """org/a with ``changes`` changes and ``main`` moved on: every merge is a real one."""
    a = remotes.create("org/a", {"shared": "a\nb\nc\n"})
    for n in range(1, changes + 1):
        a.change(n, {f"file{n}": f"{n}\n"})
    a.advance("main", {"upstream": "u\n"})
    return a


def test_refs_stay_within_the_window(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    project(remotes, 1)
    cache = RepoCache(tmp_path / "state", connections, keep_refs=24)
    for n in range(40):
        merged(cache, MergeJob(f"check-{n}", (change(1, f"1,{n}"),)))
        refs = sluice_refs(cache)
        # each job: source-0 (its fetch's) and the memo ref of its merge
        assert len(refs) <= 24 and len(refs) == 2 * min(n + 1, 12), n
        assert jobs_of(refs) == {f"check-{k}" for k in range(max(0, n - 11), n + 1)}
    # A job run again under its id becomes the newest, once; its memo of the run before goes.
    before = sluice_refs(cache)
    merged(cache, MergeJob("check-36", (change(1, "1,again"),)))
    after = sluice_refs(cache)
    assert len(after) == 24 and jobs_of(after) == jobs_of(before)
    assert len(set(after) - set(before)) == 1 and len(set(before) - set(after)) == 1
    merged(cache, MergeJob("check-40", (change(1, "1,40"),)))
    assert jobs_of(sluice_refs(cache)) == {f"check-{k}" for k in range(29, 41)}


def test_a_jobs_refs_share_one_folder(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    """A job adds one folder to the repo, not one per kind of ref: each is an inode on a disk.

    In it, the changes its fetch wrote; each merged state is the memo ref
    ``ChangeResult.merged_ref`` names (the last of a branch is its final
    tip), written once by the job that made the merge.
    """
    a = project(remotes, 1)
    a.git("update-ref", "refs/heads/stable/1.0", a.rev("refs/heads/main"))
    a.change(2, {"file2": "2\n"}, branch="stable/1.0")
    cache = RepoCache(tmp_path / "state", connections)
    two = MergeChange("git", "org/a", "stable/1.0", ref="refs/changes/2", change_id="2,1")
    result = run_merge_job(MergeJob("job-1", (change(1), two)), cache)
    folder = cache.repo_path("git", "org/a") / "refs" / "sluice" / "jobs" / "job-1"
    assert sorted(p.name for p in folder.iterdir()) == ["source-0", "source-1"]
    refs = sluice_refs(cache)
    assert set(refs) >= {f"refs/sluice/jobs/job-1/{p.name}" for p in folder.iterdir()}
    for merged_change in result.changes:
        assert merged_change.merged_ref.startswith("refs/sluice/memo/")
        assert refs[merged_change.merged_ref] == merged_change.merged_commit


def test_results_equal_those_of_a_fresh_cache(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    project(remotes)
    old = RepoCache(tmp_path / "old", connections, keep_refs=40)
    for n in range(30):  # a life of merges, some sharing the job's prefix, most dropped
        mode = (MergeMode.MERGE, MergeMode.CHERRY_PICK, MergeMode.SQUASH_MERGE)[n % 3]
        merged(old, MergeJob(f"earlier-{n}", (change(1, mode=mode), change(2, f"2,{n}", mode))))
    for mode in (MergeMode.MERGE, MergeMode.CHERRY_PICK, MergeMode.REBASE):
        job = MergeJob(f"job-{mode.value}", tuple(change(n, mode=mode) for n in (1, 2, 3)))
        fresh = RepoCache(tmp_path / f"fresh-{mode.value}", connections)
        assert merged(old, job) == merged(fresh, job)
    assert len(sluice_refs(old)) <= 40


def test_the_gate_still_merges_only_its_own_change(
    remotes: Remotes,
    tmp_path: Path,
    connections: dict[str, ConnectionSettings],
    applied: list[str],
) -> None:
    """Item n finds the items ahead in the memo, with check merges in between."""
    a = project(remotes, 6)
    cache = RepoCache(tmp_path / "state", connections, keep_refs=48)
    for burst in range(3):  # 18 gate jobs and 72 check merges: far beyond the window
        for n in range(1, 7):
            for k in range(4):
                merged(cache, MergeJob(f"check-{burst}-{n}-{k}", (change(n, f"{n},c{burst}{k}"),)))
            applied.clear()
            changes = tuple(change(k, f"{k},{burst}") for k in range(1, n + 1))
            gate = merged(cache, MergeJob(f"gate-{burst}-{n}", changes))
            assert applied == [a.rev(f"refs/changes/{n}")], (burst, n)
            assert len(sluice_refs(cache)) <= 48
    # With the item ahead dropped, the memo misses: the same result, merged afresh.
    for k in range(30):
        merged(cache, MergeJob(f"check-last-{k}", (change(1, f"1,last{k}"),)))
    applied.clear()
    again = merged(cache, MergeJob("gate-2-6", changes))
    assert len(applied) == 6 and again == gate


def test_an_item_entering_after_the_items_ahead_merged_merges_only_its_own_change(
    remotes: Remotes,
    tmp_path: Path,
    connections: dict[str, ConnectionSettings],
    applied: list[str],
) -> None:
    """A gate's window of five merged; item 1 lands (its tested state is pushed, as a
    gate with ``merge: true`` does); item 6 enters on the new branch and finds 2 to 5."""
    a = project(remotes, 6)
    cache = RepoCache(tmp_path / "state", connections)
    window = merged(cache, MergeJob("window", tuple(change(k) for k in range(1, 6))))
    first = window["changes"][0]
    repo = cache.repo_path("git", "org/a")
    a.git("fetch", "--quiet", str(repo), first["merged_ref"])
    a.git("update-ref", "refs/heads/main", first["merged_commit"])
    applied.clear()
    entering = MergeJob("entering", tuple(change(k) for k in range(2, 7)))
    result = merged(cache, entering)
    assert applied == [a.rev("refs/changes/6")]
    held = [c["merged_commit"] for c in result["changes"][:4]]
    assert held == [c["merged_commit"] for c in window["changes"][1:]]
    # the memo is a cache: the same result as a cache that never saw the window
    assert result == merged(RepoCache(tmp_path / "fresh", connections), entering)


def test_a_replay_in_a_busy_cache(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    """An executor's cache merges an item again (speculation.py) amid its own jobs."""
    project(remotes)
    merger = RepoCache(tmp_path / "merger", connections)
    job = MergeJob("item", (change(1), change(2)), timestamp=1_700_000_500)
    result = run_merge_job(job, merger)
    assert result.ok, result.failure
    executor = RepoCache(tmp_path / "executor", connections, keep_refs=30)
    for n in range(12):
        merged(executor, MergeJob(f"build-old-{n}", (change(3, f"3,{n}"),)))
    replay = replay_job("build-x", ["org/a"], {"org/a": "git"}, job, result)
    again = run_merge_job(replay, executor)
    assert again.ok, again.failure
    assert again.repo_state == result.repo_state
    assert delete_job_refs(executor, "git", "org/a", "build-x") == 2  # its fetched changes
    for n in range(15):  # the journal still names the deleted job: no harm
        merged(executor, MergeJob(f"build-new-{n}", (change(3, f"3,new{n}"),)))
    assert jobs_of(sluice_refs(executor)) <= {f"build-new-{n}" for n in range(15)}


def legacy_refs(cache: RepoCache, jobs: int, sha: str) -> None:
    """What an earlier version left: ``jobs`` jobs' refs and memo refs, half of them packed."""
    repo = cache.repo_path("git", "org/a")
    for half in range(2):
        lines = "".join(
            f"update refs/sluice/jobs/legacy-{j}/{name} {sha}\n"
            for j in range(half * jobs // 2, (half + 1) * jobs // 2)
            for name in ("source/0", "merged/0", "heads/main")
        )
        lines += "".join(
            f"update refs/sluice/memo/{j:064x} {sha}\n"
            for j in range(half * jobs // 2, (half + 1) * jobs // 2)
        )
        cache.git.run(["update-ref", "--stdin"], repo, stdin=lines.encode())
        if not half:
            cache.git.run(["pack-refs", "--all"], repo)


def test_thousands_of_old_refs_are_cleaned_a_few_hundred_at_a_time(
    remotes: Remotes, cache: RepoCache
) -> None:
    project(remotes, 1)
    merged(cache, MergeJob("first", (change(1, "1,first"),)))
    (cache.repo_path("git", "org/a") / JOURNAL).unlink()  # as an earlier version left it
    legacy_refs(cache, 600, sluice_refs(cache)["refs/sluice/jobs/first/source-0"])
    counts = [len(sluice_refs(cache))]
    assert counts[0] == 2 + 600 * 4
    for n in range(20):
        merged(cache, MergeJob(f"check-{n}", (change(1, f"1,{n}"),)))
        counts.append(len(sluice_refs(cache)))
        if counts[-1] <= cache.keep_refs:
            break
    dropped = [before + 2 - after for before, after in itertools.pairwise(counts)]
    assert counts[-1] <= cache.keep_refs and len(counts) <= 2 + 2400 // DROP_AT_ONCE, counts
    # a few hundred per merge: one entry more at most (a hundred memo refs)
    assert all(0 < d <= DROP_AT_ONCE + 100 for d in dropped[:-1]), dropped
    assert not {ref for ref in sluice_refs(cache) if "legacy" in ref}


def test_a_lost_or_garbled_journal_is_rebuilt(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    project(remotes, 1)
    cache = RepoCache(tmp_path / "state", connections, keep_refs=9)
    journal = cache.repo_path("git", "org/a") / JOURNAL
    for n in range(30):
        if n == 10:
            journal.unlink()
        if n == 20:
            journal.write_text("# sluice job refs 1\nnot a job line at all\n")
        merged(cache, MergeJob(f"check-{n}", (change(1, f"1,{n}"),)))
        assert len(sluice_refs(cache)) <= 9 or n in (10, 20), n
    assert jobs_of(sluice_refs(cache)) == {f"check-{n}" for n in (26, 27, 28, 29)}
    assert journal.read_text().startswith("# sluice job refs 1\ncheck-26 1 ")


def test_two_processes_share_the_window(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    """Worker processes of one host share a cache: each drops what the other wrote."""
    project(remotes, 1)
    state = tmp_path / "state"
    caches = [RepoCache(state, connections, keep_refs=12) for _ in range(2)]
    for n in range(20):
        merged(caches[n % 2], MergeJob(f"check-{n}", (change(1, f"1,{n}"),)))
        assert len(sluice_refs(caches[0])) <= 12
    assert jobs_of(sluice_refs(caches[0])) == {f"check-{n}" for n in range(14, 20)}


def test_fetches_without_merges_are_bounded_too(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    """A files-changes job fetches into a ref of its own, and runs no ref transaction."""
    project(remotes, 1)
    cache = RepoCache(tmp_path / "state", connections, keep_refs=8)
    for n in range(30):
        result = run_files_changes_job(FilesChangesJob(f"files-{n}", change(1)), cache)
        assert result.status is Status.OK and result.files == ("file1",), result.failure
        assert len(sluice_refs(cache)) <= 2 * 8 + 1, n
    merged(cache, MergeJob("check", (change(1),)))
    assert len(sluice_refs(cache)) <= 8


def test_refs_of_a_process_killed_before_its_journal_are_found(
    remotes: Remotes,
    tmp_path: Path,
    connections: dict[str, ConnectionSettings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project(remotes, 1)
    state = tmp_path / "state"
    cache = RepoCache(state, connections, keep_refs=12)
    merged(cache, MergeJob("check-0", (change(1, "1,0"),)))
    before = sluice_refs(cache)
    with monkeypatch.context() as patch:  # killed between the ref transaction and the journal
        patch.setattr(JobRefs, "done", lambda self, plan: None)
        merged(cache, MergeJob("killed", (change(1, "1,killed"),)))
    killed = {ref for ref in sluice_refs(cache) if "/killed/" in ref}
    assert len(killed) == 1  # its fetched change: entered in the journal before its fetch
    orphan = set(sluice_refs(cache)) - killed - set(before)
    (memo,) = orphan
    assert memo.startswith("refs/sluice/memo/")
    # The next process finds the memo ref no journal entry names, and drops it.
    after = RepoCache(state, connections, keep_refs=8)
    for n in range(1, 8):
        merged(after, MergeJob(f"check-{n}", (change(1, f"1,{n}"),)))
    assert len(sluice_refs(after)) == 8
    assert not (killed | {memo}) & set(sluice_refs(after))


def test_a_commit_handed_out_again_is_made_young(remotes: Remotes, cache: RepoCache) -> None:
    """Once its job's refs are dropped, only its age keeps a commit while a build borrows it."""
    project(remotes, 2)
    job = MergeJob("item", (change(1), change(2)))
    first = run_merge_job(job, cache)
    tip = first.commit_of("git", "org/a", "main")
    loose = cache.repo_path("git", "org/a") / "objects" / tip[:2] / tip[2:]
    month_ago = time.time() - 30 * 86400
    os.utime(loose, (month_ago, month_ago))
    again = run_merge_job(MergeJob("item-again", job.changes), cache)  # from the memo
    assert again.commit_of("git", "org/a", "main") == tip
    assert loose.stat().st_mtime > time.time() - 600


def test_a_plan_deletes_nothing_it_writes(tmp_path: Path) -> None:
    """Unit: the transaction never names a ref twice (git refuses that)."""
    repo = tmp_path / "repo.git"
    repo.mkdir()
    refs = JobRefs(repo, keep=4)
    key = "a" * 64
    memo = {f"refs/sluice/memo/{key}": "1" * 40}
    for n in range(6):
        writes = {f"refs/sluice/jobs/job-{n}/merged-0": "1" * 40, **memo}
        plan = refs.plan(f"job-{n}", writes, lambda prefix: [])
        names = [line.split(" ")[1] for line in plan.lines.splitlines()]
        assert len(names) == len(set(names)) and f"refs/sluice/memo/{key}" not in names[2:]
        refs.done(plan)
    # each job: one ref of its own and the shared memo ref, counted once
    assert [e.job for e in plan.journal] == ["job-3", "job-4", "job-5"]


def test_a_gate_item_writes_only_the_ref_of_its_own_merge(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    """Item n holds the memo refs of the items ahead without writing them again.

    Each ref a transaction writes is a lock file and a file, an inode each
    on a disk: item n of a gate once wrote 3n refs, so a gate of twenty
    wrote 630 where 20 merges need 20.
    """
    a = project(remotes, 6)
    cache = RepoCache(tmp_path / "state", connections)
    merged(cache, MergeJob("fetch-all", tuple(change(n, f"{n},fetch") for n in range(1, 7))))
    # as the scheduler gives them: ref and commit (here in the cache already, so no fetch)
    changes = [replace(change(k), commit=a.rev(f"refs/changes/{k}")) for k in range(1, 7)]
    before = sluice_refs(cache)
    for n in range(1, 7):
        merged(cache, MergeJob(f"gate-{n}", tuple(changes[:n])))
        after = sluice_refs(cache)
        new = set(after) - set(before)
        assert len(new) == 1 and next(iter(new)).startswith("refs/sluice/memo/"), (n, new)
        assert set(before) <= set(after)
        before = after
    journal = (cache.repo_path("git", "org/a") / JOURNAL).read_text().splitlines()
    last = next(line for line in journal if line.startswith("gate-6 "))
    assert last.split(" ")[1] == "0" and len(last.split(" ")[2:]) == 6  # holds all six


def test_a_held_memo_ref_outlives_the_job_that_wrote_it(tmp_path: Path) -> None:
    """Unit: a kept job that holds a memo key keeps its ref when the writer is dropped."""
    repo = tmp_path / "repo.git"
    repo.mkdir()
    refs = JobRefs(repo, keep=4)
    ahead, own = "a" * 64, "b" * 64
    plan = refs.plan("writer", {f"refs/sluice/memo/{ahead}": "1" * 40}, lambda prefix: [])
    refs.done(plan)
    plan = refs.plan(
        "holder",
        {f"refs/sluice/memo/{own}": "2" * 40},
        lambda prefix: [],
        held=[f"refs/sluice/memo/{ahead}"],
    )
    assert plan.lines == f"update refs/sluice/memo/{own} {'2' * 40}\n"  # the held one is not
    refs.done(plan)
    gone_with: list[set[str]] = []  # the jobs kept when the ref of ``ahead`` went
    for n in range(4):  # the writer is dropped first, the holder later
        plan = refs.plan(f"job-{n}", {f"refs/sluice/jobs/job-{n}/source-0": "3" * 40}, list)
        if f"delete refs/sluice/memo/{ahead}" in plan.lines.splitlines():
            gone_with.append({e.job for e in plan.journal})
        refs.done(plan)
    assert len(gone_with) == 1 and not {"writer", "holder"} & gone_with[0]
