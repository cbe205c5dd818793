"""The other merger jobs, and the executor's way to a speculative commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scheduler.wire.merger import (
    BranchHeadsJob,
    BranchHeadsResult,
    ConfigJob,
    ConfigResult,
    FilesChangesJob,
    FilesChangesResult,
    MergeChange,
    MergeJob,
    MergeMode,
    Status,
)
from tests.merger.gitrepos import Remotes
from workers.merger import (
    RepoCache,
    checkout_workspace,
    delete_job_refs,
    prune_job_refs,
    run_branch_heads_job,
    run_config_job,
    run_files_changes_job,
    run_job,
    run_merge_job,
)
from workers.merger.errors import InvalidJobError, UnknownRefError


def test_files_changed_against_the_merge_base(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a", {"README": "r\n", "keep": "k\n"})
    a.change(1, {"one": "1\n", "README": None})
    a.advance("main", {"upstream": "u\n"})  # not the change's: must not be listed
    job = FilesChangesJob("files", MergeChange("git", "org/a", "main", ref="refs/changes/1"))
    result = run_files_changes_job(job, cache)
    assert result == FilesChangesResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert result.status is Status.OK, result.failure
    assert result.files == ("README", "one")
    # A stack: the second change lists only its own files.
    a.commit({"two": "2\n"}, parent="refs/changes/1", ref="refs/changes/2")
    job = FilesChangesJob("files2", MergeChange("git", "org/a", "main", ref="refs/changes/2"))
    assert run_files_changes_job(job, cache).files == ("README", "one", "two")
    missing = FilesChangesJob("f3", MergeChange("git", "org/a", "main", ref="refs/changes/9"))
    failure = run_files_changes_job(missing, cache).failure
    assert failure is not None and failure.kind == "unknown-ref"
    assert failure.ref == "refs/changes/9" and failure.project == "org/a"


def test_config_at_branch_heads(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a", {"zuul.yaml": "- job: {name: main}\n"})
    a.commit(
        {"zuul.yaml": None, ".zuul.d/a.yaml": "- job: {name: stable}\n"},
        parent="refs/heads/main",
        ref="refs/heads/stable/1.0",
    )
    result = run_config_job(ConfigJob("cfg", "git", "org/a"), cache)
    assert result == ConfigResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert result.status is Status.OK, result.failure
    assert {c.branch: c.files for c in result.config} == {
        "main": {"zuul.yaml": "- job: {name: main}\n"},
        "stable/1.0": {".zuul.d/a.yaml": "- job: {name: stable}\n"},
    }
    only = run_config_job(ConfigJob("cfg2", "git", "org/a", ("stable/1.0",)), cache)
    assert [c.branch for c in only.config] == ["stable/1.0"]
    failure = run_config_job(ConfigJob("cfg3", "git", "org/a", ("gone",)), cache).failure
    assert failure is not None and failure.kind == "unknown-ref" and failure.ref == "gone"


def test_branch_heads_follow_the_remote(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    first = run_branch_heads_job(BranchHeadsJob("heads", "git", "org/a"), cache)
    assert first == BranchHeadsResult.from_dict(json.loads(json.dumps(first.to_dict())))
    assert first.state is not None
    assert first.state.branches == {"main": a.rev("refs/heads/main")}
    moved = a.advance("main", {"x": "x\n"})
    a.git("update-ref", "refs/heads/feature", moved)
    second = run_branch_heads_job(BranchHeadsJob("heads", "git", "org/a"), cache)
    assert second.state is not None
    assert second.state.branches == {"main": moved, "feature": moved}
    a.git("update-ref", "-d", "refs/heads/feature")
    third = run_branch_heads_job(BranchHeadsJob("heads", "git", "org/a"), cache)
    assert third.state is not None and set(third.state.branches) == {"main"}
    failure = run_branch_heads_job(BranchHeadsJob("heads", "git", "org/none"), cache).failure
    assert failure is not None and failure.kind == "unreachable" and failure.project == "org/none"


def test_executor_workspace_at_a_speculative_commit(
    remotes: Remotes, cache: RepoCache, tmp_path: Path
) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    a.change(2, {"two": "2\n"})
    job = MergeJob(
        "ws",
        tuple(
            MergeChange(
                "git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=MergeMode.CHERRY_PICK
            )
            for n in (1, 2)
        ),
    )
    result = run_merge_job(job, cache)
    tip = result.commit_of("git", "org/a", "main")
    dest = checkout_workspace(cache, "git", "org/a", tip, tmp_path / "ws" / "org/a", branch="main")
    assert (dest / "one").read_text() == "1\n" and (dest / "two").read_text() == "2\n"
    head = subprocess.run(
        ["git", "rev-parse", "HEAD", "--abbrev-ref", "HEAD"],
        cwd=dest,
        capture_output=True,
        text=True,
        check=True,
        env=remotes.env,
    ).stdout.split()
    assert head == [tip, "main"]
    # The workspace owns its objects: dropping the job's refs and pruning the
    # cache cannot break it.
    assert delete_job_refs(cache, "git", "org/a", "ws") == 2  # the changes it fetched
    # (the merge memo and the cache's merge worktree still hold the tip)
    assert prune_job_refs(cache, "git", "org/a", set()) == 0
    cherry = MergeChange(
        "git", "org/a", "main", ref="refs/changes/1", merge_mode=MergeMode.CHERRY_PICK
    )
    other = MergeJob("other", (cherry,))
    assert run_merge_job(other, cache).status is Status.OK
    cache.git.run(["gc", "--prune=now", "--quiet"], cache.repo_path("git", "org/a"))
    subprocess.run(["git", "fsck", "--no-progress"], cwd=dest, check=True, env=remotes.env)
    with pytest.raises(UnknownRefError):
        checkout_workspace(cache, "git", "org/a", tip, tmp_path / "ws2")
    with pytest.raises(InvalidJobError):
        checkout_workspace(cache, "git", "org/a", tip, dest)


def test_prune_refs_of_jobs_no_longer_needed(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    for n, job_id in enumerate(("old-1", "old-2", "live"), start=1):
        a.change(n, {f"file{n}": f"{n}\n"})
        job = MergeJob(job_id, (MergeChange("git", "org/a", "main", ref=f"refs/changes/{n}"),))
        assert run_merge_job(job, cache).status is Status.OK
    assert prune_job_refs(cache, "git", "org/a", {"live"}) == 2  # each fetched its change
    repo = cache.repo_path("git", "org/a")
    left = cache.git.text(["for-each-ref", "--format=%(refname)", "refs/sluice/"], repo).split()
    assert {ref.split("/")[3] for ref in left} == {"live"}


def test_run_job_by_kind_with_json(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    params = MergeJob("k", (MergeChange("git", "org/a", "main", ref="refs/changes/1"),)).to_dict()
    result = run_job("merge", json.loads(json.dumps(params)), cache)
    assert result["status"] == "ok" and result["changes"][0]["files"] == ["one"]
    heads = run_job("branch-heads", BranchHeadsJob("h", "git", "org/a").to_dict(), cache)
    assert heads["state"]["branches"] == {"main": a.rev("refs/heads/main")}
    bad = run_job("config", {"job_id": "c", "connection": "git"}, cache)
    assert bad["status"] == "failed" and bad["failure"]["kind"] == "invalid"
    assert bad["job_id"] == "c" and "config" in bad
    unknown = run_job("nonsense", {"job_id": "x"}, cache)
    assert unknown["failure"]["kind"] == "invalid"
