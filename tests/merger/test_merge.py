"""Speculative merges with real git: stacks, projects, modes, conflicts, config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import (
    MergeChange,
    MergeJob,
    MergeMode,
    MergeResult,
    ProjectRef,
    ProjectState,
    Status,
)
from tests.merger.gitrepos import Remote, Remotes
from tests.merger.httpgit import http_git_server
from workers.merger import RepoCache, run_merge_job
from workers.merger.modes import identity_env


def change(
    number: int,
    project: str = "org/a",
    branch: str = "main",
    merge_mode: MergeMode = MergeMode.MERGE,
) -> MergeChange:
    return MergeChange(
        connection="git",
        project=project,
        branch=branch,
        ref=f"refs/changes/{number}",
        merge_mode=merge_mode,
        change_id=f"{number},1",
    )


def tree_file(cache: RepoCache, project: str, commit: str, path: str) -> str:
    repo = cache.repo_path("git", project)
    return cache.git.text(["show", f"{commit}:{path}"], repo)


def roundtrip(result: MergeResult) -> MergeResult:
    again = MergeResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result
    return again


def test_stacked_changes_on_one_branch(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a", {"README": "hello\n"})
    for n in (1, 2, 3):
        a.change(n, {f"file{n}": f"{n}\n"})
    job = MergeJob("job-1", tuple(change(n) for n in (1, 2, 3)))
    result = roundtrip(run_merge_job(job, cache))
    assert result.status is Status.OK, result.failure
    tip = result.commit_of("git", "org/a", "main")
    assert [c.files for c in result.changes] == [("file1",), ("file2",), ("file3",)]
    assert result.changes[-1].merged_commit == tip
    for n in (1, 2, 3):
        assert tree_file(cache, "org/a", tip, f"file{n}") == f"{n}"
    # Each intermediate state contains the changes ahead of it and no more.
    second = result.changes[1].merged_commit
    assert tree_file(cache, "org/a", second, "file1") == "1"
    with pytest.raises(Exception, match="exited"):
        tree_file(cache, "org/a", second, "file3")
    # The speculative commits stay fetchable under the job's refs.
    repo = cache.repo_path("git", "org/a")
    assert cache.git.text(["rev-parse", result.changes[-1].merged_ref], repo) == tip
    assert cache.git.text(["rev-parse", result.changes[0].merged_ref], repo) == (
        result.changes[0].merged_commit
    )


def test_stacked_changes_across_two_projects(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    b = remotes.create("org/b")
    remotes.create("org/lib")
    b.git("update-ref", "refs/heads/stable", b.rev("refs/heads/main"))
    a.change(1, {"a1": "x\n"})
    b.change(2, {"b2": "x\n"}, branch="stable")
    a.change(3, {"a3": "x\n"})
    b.change(4, {"b4": "x\n"})
    job = MergeJob(
        "job-2",
        (change(1), change(2, "org/b", branch="stable"), change(3), change(4, "org/b")),
        required=(ProjectRef("git", "org/lib"), ProjectRef("git", "org/a")),
    )
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    assert [c.index for c in result.changes] == [0, 1, 2, 3]
    states = {s.project: s for s in result.repo_state}
    assert set(states) == {"org/a", "org/b", "org/lib"}
    assert set(states["org/b"].branches) == {"main", "stable"}
    assert states["org/lib"].branches["main"] == remotes_head(remotes, "org/lib")
    a_tip = states["org/a"].branches["main"]
    assert tree_file(cache, "org/a", a_tip, "a1") == "x"
    assert tree_file(cache, "org/a", a_tip, "a3") == "x"
    assert result.changes[1].merged_commit == states["org/b"].branches["stable"]
    assert result.changes[3].merged_commit == states["org/b"].branches["main"]
    assert {(c.project, c.branch) for c in result.config} == {
        ("org/a", "main"),
        ("org/b", "main"),
        ("org/b", "stable"),
    }


def remotes_head(remotes: Remotes, project: str) -> str:
    return Remote(remotes.base / project, remotes.env).rev("refs/heads/main")


def diverged(remotes: Remotes) -> Remote:
    """``main`` moved on after the changes were written (so merges are real)."""
    a = remotes.create("org/a", {"README": "hello\n", "shared": "a\nb\nc\n"})
    a.change(1, {"one": "1\n"})
    a.change(2, {"two": "2\n", "shared": "a\nb\nC\n"})
    a.advance("main", {"upstream": "u\n", "shared": "A\nb\nc\n"})
    return a


@pytest.mark.parametrize("mode", list(MergeMode))
def test_each_merge_mode(remotes: Remotes, cache: RepoCache, mode: MergeMode) -> None:
    a = diverged(remotes)
    head = a.rev("refs/heads/main")
    job = MergeJob("job-" + mode.value, (change(1, merge_mode=mode), change(2, merge_mode=mode)))
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    tip = result.commit_of("git", "org/a", "main")
    assert tree_file(cache, "org/a", tip, "shared") == "A\nb\nC"
    for name in ("one", "two", "upstream"):
        assert tree_file(cache, "org/a", tip, name)
    repo = cache.repo_path("git", "org/a")
    parents = cache.git.text(["rev-list", "--parents", "-n", "1", tip], repo).split()[1:]
    history = cache.git.text(["rev-list", f"{head}..{tip}"], repo).split()
    changes = [a.rev("refs/changes/1"), a.rev("refs/changes/2")]
    if mode in (MergeMode.MERGE, MergeMode.MERGE_RESOLVE):
        assert len(parents) == 2 and parents[1] == changes[1]
        assert set(changes) <= set(history)
    elif mode is MergeMode.SQUASH_MERGE:
        assert len(parents) == 1 and len(history) == 2
        assert not set(changes) & set(history)
    else:  # cherry-pick and rebase: linear history of new commits
        assert len(parents) == 1 and len(history) == 2
        assert not set(changes) & set(history)
        author = cache.git.text(["log", "-1", "--format=%an", tip], repo)
        assert author == "Test Author"


def test_merge_fast_forwards_like_git_merge(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    sha = a.change(1, {"one": "1\n"})
    result = run_merge_job(MergeJob("ff", (change(1),)), cache)
    assert result.commit_of("git", "org/a", "main") == sha


def test_cherry_pick_of_an_applied_change_adds_nothing(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    a.advance("main", {"one": "1\n"})  # the same content landed upstream
    head = a.rev("refs/heads/main")
    job = MergeJob("cp", (change(1, merge_mode=MergeMode.CHERRY_PICK),))
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    assert result.commit_of("git", "org/a", "main") == head


def test_conflict_in_the_second_of_three_changes(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a", {"shared": "base\n", "other": "o\n"})
    a.change(1, {"shared": "first\n"})
    a.change(2, {"shared": "second\n", "other": "O\n"})
    a.change(3, {"third": "3\n"})
    for mode in MergeMode:
        job = MergeJob(f"c-{mode.value}", tuple(change(n, merge_mode=mode) for n in (1, 2, 3)))
        result = roundtrip(run_merge_job(job, cache))
        assert result.status is Status.CONFLICT, mode
        failure = result.failure
        assert failure is not None
        assert failure.kind == "conflict"
        assert failure.change_index == 1 and failure.change_id == "2,1"
        assert failure.project == "org/a" and failure.ref == "refs/changes/2"
        assert failure.files == ("shared",), mode
        assert "2,1" in failure.message and "shared" in failure.message
        assert [c.index for c in result.changes] == [0]
        assert result.repo_state == ()
    # The worktree is reset for the next job: the same repo merges fine.
    clean = run_merge_job(MergeJob("after", (change(1), change(3))), cache)
    assert clean.status is Status.OK, clean.failure


def test_config_change_is_in_the_result(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create(
        "org/a",
        {"zuul.yaml": "- job: {name: old}\n", "zuul.d/jobs.yaml": "- job: {name: j}\n"},
    )
    a.change(
        1,
        {
            "zuul.yaml": "- job: {name: new}\n",
            ".sluice.yaml": "- pipeline: {name: check}\n",
            ".zuul.d/sub/more.yaml": "- job: {name: deep}\n",
            ".zuul.d/notes.txt": "not config\n",
            "src/zuul.yaml": "not config either\n",
        },
    )
    result = run_merge_job(MergeJob("cfg", (change(1),)), cache)
    assert result.status is Status.OK, result.failure
    (config,) = result.config
    assert config.branch == "main" and config.commit == result.commit_of("git", "org/a", "main")
    assert config.files == {
        "zuul.yaml": "- job: {name: new}\n",
        "zuul.d/jobs.yaml": "- job: {name: j}\n",
        ".sluice.yaml": "- pipeline: {name: check}\n",
        ".zuul.d/sub/more.yaml": "- job: {name: deep}\n",
    }
    assert not run_merge_job(MergeJob("nocfg", (change(1),), read_config=False), cache).config


def test_two_mergers_produce_the_same_commits(
    remotes: Remotes, tmp_path: Path, connections: dict[str, ConnectionSettings]
) -> None:
    diverged(remotes)
    for mode in MergeMode:
        shas = set()
        for host in ("host-a", "host-b"):
            cache = RepoCache(tmp_path / host, connections)
            changes = (change(1, merge_mode=mode), change(2, merge_mode=mode))
            job = MergeJob(f"d-{mode.value}", changes)
            result = run_merge_job(job, cache)
            assert result.status is Status.OK, result.failure
            shas.add(tuple(c.merged_commit for c in result.changes))
        assert len(shas) == 1, mode


def test_pinned_base_state_is_used(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    old = a.rev("refs/heads/main")
    a.change(1, {"one": "1\n"})
    moved = a.advance("main", {"later": "l\n"})
    pinned = (ProjectState("git", "org/a", {"main": old}),)
    job = MergeJob("pin", (change(1, merge_mode=MergeMode.CHERRY_PICK),), base_state=pinned)
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    tip = result.commit_of("git", "org/a", "main")
    repo = cache.repo_path("git", "org/a")
    assert cache.git.text(["rev-parse", f"{tip}^"], repo) == old
    assert moved != old
    # A commit given without a ref that the cache already has needs no fetch.
    by_commit = MergeChange("git", "org/a", "main", commit=a.rev("refs/changes/1"))
    again = run_merge_job(MergeJob("pin2", (by_commit,), base_state=pinned), cache)
    assert again.status is Status.OK, again.failure


def test_change_given_by_commit_only_is_fetched(remotes: Remotes, cache: RepoCache) -> None:
    a = remotes.create("org/a")
    run_merge_job(MergeJob("warm", (), required=(ProjectRef("git", "org/a"),)), cache)
    sha = a.change(1, {"one": "1\n"})
    result = run_merge_job(
        MergeJob("sha", (MergeChange("git", "org/a", "main", commit=sha),)), cache
    )
    assert result.status is Status.OK, result.failure
    assert result.changes[0].commit == sha


def test_merges_do_not_depend_on_user_config(
    remotes: Remotes,
    connections: dict[str, ConnectionSettings],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    hostile = tmp_path / "hostile.gitconfig"
    hostile.write_text(
        "[commit]\n\tgpgSign = true\n[merge]\n\tff = false\n[core]\n\thooksPath = /nonexistent\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(hostile))
    monkeypatch.setenv("HOME", str(tmp_path))
    cache = RepoCache(tmp_path / "state", connections)
    a = remotes.create("org/a")
    sha = a.change(1, {"one": "1\n"})
    a.change(2, {"two": "2\n"})
    result = run_merge_job(MergeJob("cfg-free", (change(1), change(2))), cache)
    assert result.status is Status.OK, result.failure
    assert result.changes[0].merged_commit == sha  # still a fast-forward: merge.ff ignored


def test_tree_merges_are_the_commits_git_merge_makes(
    remotes: Remotes, cache: RepoCache, tmp_path: Path
) -> None:
    a = diverged(remotes)
    job = MergeJob("same", (change(1), change(2)), timestamp=1_234_567_890)
    result = run_merge_job(job, cache)
    assert result.status is Status.OK, result.failure
    clone = tmp_path / "clone"
    env = {**remotes.env, **identity_env(1_234_567_890)}

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=clone, env=env, capture_output=True, check=True)
        return proc.stdout.decode().strip()

    subprocess.run(["git", "clone", "-q", str(a.path), str(clone)], env=env, check=True)
    git("fetch", "-q", "origin", "refs/changes/*:refs/changes/*")
    git("checkout", "-q", "--detach", "origin/main")
    for n in (1, 2):
        git("merge", "-q", "--no-edit", "-m", f"Merge '{n},1'", f"refs/changes/{n}")
    assert git("rev-parse", "HEAD") == result.commit_of("git", "org/a", "main")


def test_a_conflict_reports_only_the_changes_ahead_of_it(
    remotes: Remotes, cache: RepoCache
) -> None:
    a = remotes.create("org/a")
    b = remotes.create("org/b", {"f": "base\n"})
    a.change(1, {"a1": "1\n"})
    a.change(2, {"a2": "2\n"})
    b.change(5, {"f": "change\n"})
    b.advance("main", {"f": "upstream\n"})
    job = MergeJob("order", (change(1), change(5, "org/b"), change(2)))
    result = run_merge_job(job, cache)
    assert result.status is Status.CONFLICT
    assert result.failure is not None and result.failure.change_index == 1
    assert result.failure.project == "org/b" and result.failure.files == ("f",)
    assert [c.index for c in result.changes] == [0]


def test_bad_pinned_state_is_invalid(remotes: Remotes, cache: RepoCache) -> None:
    remotes.create("org/a")
    pinned = (ProjectState("git", "org/a", {"main": "--output=/tmp/x"}),)
    result = run_merge_job(MergeJob("bad", (change(1),), base_state=pinned), cache)
    assert result.failure is not None and result.failure.kind == "invalid"


def test_ssh_remotes_in_url_and_scp_form(remotes: Remotes, tmp_path: Path) -> None:
    """An ssh baseurl becomes ``<baseurl>/<project>``; a stand-in ssh runs git locally."""
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    fake_ssh = tmp_path / "fake-ssh"
    fake_ssh.write_text('#!/bin/sh\n# fake-ssh <host> <command>: run it here\nexec sh -c "$2"\n')
    fake_ssh.chmod(0o755)
    connections = {
        "url": ConnectionSettings("url", "git", f"ssh://git@review.invalid{remotes.base}"),
        "scp": ConnectionSettings("scp", "git", f"git@review.invalid:{remotes.base}"),
    }
    cache = RepoCache(
        tmp_path / "state",
        connections,
        extra_env={"GIT_SSH_COMMAND": str(fake_ssh), "GIT_SSH_VARIANT": "simple"},
    )
    for name in connections:
        job = MergeJob("ssh", (MergeChange(name, "org/a", "main", ref="refs/changes/1"),))
        result = run_merge_job(job, cache)
        assert result.status is Status.OK, result.failure
        assert result.changes[0].commit == a.rev("refs/changes/1")


def test_a_job_run_again_gives_the_same_result(remotes: Remotes, cache: RepoCache) -> None:
    """A redelivered request is redone without effect beyond the first run's."""
    diverged(remotes)
    for mode in (MergeMode.MERGE, MergeMode.REBASE):  # in memory, and in the worktree
        job = MergeJob(
            f"again-{mode.value}", (change(1, merge_mode=mode), change(2, merge_mode=mode))
        )
        assert run_merge_job(job, cache) == run_merge_job(job, cache)


def test_unrelated_history_does_not_merge_but_applies_as_a_patch(
    remotes: Remotes, cache: RepoCache
) -> None:
    a = remotes.create("org/a")
    a.commit({"other": "o\n"}, message="a root of its own", ref="refs/changes/1")
    for mode in MergeMode:
        result = run_merge_job(MergeJob(f"u-{mode.value}", (change(1, merge_mode=mode),)), cache)
        if mode in (MergeMode.CHERRY_PICK, MergeMode.REBASE):  # git applies it as a patch
            assert result.status is Status.OK, (mode, result.failure)
            assert result.changes[0].files == ("other",)
            continue
        assert result.status is Status.CONFLICT, (mode, result.failure)
        assert result.failure is not None and result.failure.change_index == 0


def test_http_remote_with_credentials_in_the_url(remotes: Remotes, tmp_path: Path) -> None:
    """Smart HTTP (https without the TLS): fetch by ref and by sha, password never shown."""
    a = remotes.create("org/a")
    a.change(1, {"one": "1\n"})
    sha = a.change(2, {"two": "2\n"})
    with http_git_server(remotes.base, credentials="bot:s3cret") as url:
        good = {"web": ConnectionSettings("web", "git", url.replace("//", "//bot:s3cret@"))}
        cache = RepoCache(tmp_path / "state", good)
        changes = (
            MergeChange("web", "org/a", "main", ref="refs/changes/1"),
            MergeChange("web", "org/a", "main", commit=sha),
        )
        result = run_merge_job(MergeJob("http", changes), cache)
        assert result.status is Status.OK, result.failure
        assert [c.commit for c in result.changes] == [a.rev("refs/changes/1"), sha]
        bad = {"web": ConnectionSettings("web", "git", url.replace("//", "//bot:wrong@"))}
        failure = run_merge_job(MergeJob("h2", changes), RepoCache(tmp_path / "s2", bad)).failure
        assert failure is not None and failure.kind == "unreachable", failure
        assert "wrong" not in failure.message


def test_items_behind_reuse_the_merges_ahead(
    remotes: Remotes,
    cache: RepoCache,
    tmp_path: Path,
    connections: dict[str, ConnectionSettings],
    applied: list[str],
) -> None:
    """A gate: item n merges changes 1..n; with the memo it only merges change n."""
    a = remotes.create("org/a", {"shared": "a\nb\nc\n"})
    for n in (1, 2, 3):
        a.change(n, {f"file{n}": f"{n}\n"})
    a.advance("main", {"upstream": "u\n"})
    for mode in (MergeMode.MERGE, MergeMode.CHERRY_PICK):
        results = []
        for n in (1, 2, 3):
            applied.clear()
            changes = tuple(change(k, merge_mode=mode) for k in range(1, n + 1))
            results.append(run_merge_job(MergeJob(f"item{n}-{mode.value}", changes), cache))
            assert applied == [a.rev(f"refs/changes/{n}")], (mode, n)
        # The memo changes nothing but the work: a fresh cache agrees.
        fresh = RepoCache(tmp_path / f"fresh-{mode.value}", connections)
        changes = tuple(change(k, merge_mode=mode) for k in (1, 2, 3))
        again = run_merge_job(MergeJob(f"item3-{mode.value}", changes), fresh)
        assert again.changes == results[-1].changes
    # Any input that changes the outcome misses the memo (here: the date).
    applied.clear()
    dated = MergeJob("dated", (change(1), change(2)), timestamp=1_500_000_000)
    assert run_merge_job(dated, cache).status is Status.OK
    assert len(applied) == 2
