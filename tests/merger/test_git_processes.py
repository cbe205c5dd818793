"""Git processes per merge: the common merge is pinned, and the shortcuts change no result.

The engine answers most questions without a git command each (one cat-file
and one update-ref process per repo, parked between lock sessions, branch
heads read from the repo's files, no ``merge-base`` for a change on top of
its tip: ``workers/merger/repo.py``). The number of git processes of the
common merge is pinned here, so a regression shows; every scenario gives
the same result with the shortcuts turned off, i.e. with the git commands
the engine ran before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scheduler.settings.sections import ConnectionSettings
from scheduler.wire.merger import (
    BranchHeadsJob,
    ConfigJob,
    FilesChangesJob,
    MergeChange,
    MergeJob,
    MergeMode,
    ProjectRef,
    ProjectState,
    Status,
)
from tests.merger.gitrepos import Remotes
from tests.merger.test_errors import damage_object
from workers.merger import (
    RepoCache,
    run_branch_heads_job,
    run_config_job,
    run_files_changes_job,
    run_merge_job,
)
from workers.merger import repo as repo_module
from workers.merger.catfile import CatFileError
from workers.merger.errors import GitCommandError
from workers.merger.gitcmd import Git
from workers.merger.parking import close_parked
from workers.merger.repo import MAINTENANCE_EVERY

CONFIG = {
    "README": "r\n",
    "zuul.yaml": "- job: {name: j}\n",
    "zuul.d/more.yaml": "- job: {name: k}\n",
}


def turn_off_shortcuts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine as it was: a git command for every question."""

    class NoCatFile:
        def __init__(self, *args: object) -> None:
            raise CatFileError("turned off by the test")

    monkeypatch.setattr(repo_module, "CatFile", NoCatFile)
    monkeypatch.setattr(repo_module, "read_heads", lambda path: None)


def check_change(number: int, sha: str = "", project: str = "org/a") -> MergeChange:
    ref = f"refs/changes/{number}"
    return MergeChange("git", project, "main", ref=ref, commit=sha, change_id=f"{number},1")


def warm(cache: RepoCache, project: str = "org/a") -> None:
    job = MergeJob("warm", (), required=(ProjectRef("git", project),))
    assert run_merge_job(job, cache).status is Status.OK


def test_a_change_on_its_tip_takes_the_fetch_alone_once_the_processes_are_parked(
    remotes: Remotes, cache: RepoCache, git_processes: list[str]
) -> None:
    a = remotes.create("org/a", CONFIG)
    warm(cache)
    sha = a.change(1, {"one": "1\n"})
    git_processes.clear()
    result = run_merge_job(MergeJob("check", (check_change(1, sha),)), cache)
    assert result.status is Status.OK, result.failure
    # The first merge in this process: is the commit here (a cat-file, which
    # goes on across the fetch to answer for dates, memo, ancestry, files
    # and config); the fetch; the refs.
    assert git_processes == ["cat-file", "fetch", "update-ref"]
    assert result.changes[0].merged_commit == sha and result.changes[0].files == ("one",)
    (config,) = result.config
    assert config.files == {
        "zuul.d/more.yaml": "- job: {name: k}\n",
        "zuul.yaml": "- job: {name: j}\n",
    }
    # The next merges take the two processes back: the fetch is all.
    two = a.change(2, {"two": "2\n"})
    git_processes.clear()
    second = run_merge_job(MergeJob("check-2", (check_change(2, two),)), cache)
    assert second.status is Status.OK, second.failure
    assert git_processes == ["fetch"]
    assert second.changes[0].files == ("two",) and second.config[0].files == config.files
    # Merged again (a gate after the check): the commit is here, a loose
    # object, which needs no process to be found.
    git_processes.clear()
    again = run_merge_job(MergeJob("gate", (check_change(1, sha),)), cache)
    assert again.status is Status.OK, again.failure
    assert git_processes == ["fetch"]
    assert again.changes[0].files == ("one",) and again.config == result.config
    # Given by ref alone, nothing is looked up before the fetch.
    a.change(3, {"three": "3\n"})
    git_processes.clear()
    assert run_merge_job(MergeJob("by-ref", (check_change(3),)), cache).status is Status.OK
    assert git_processes == ["fetch"]


def test_a_stack_and_a_gate_take_as_few(
    remotes: Remotes, cache: RepoCache, git_processes: list[str]
) -> None:
    a = remotes.create("org/a", CONFIG)
    warm(cache)
    shas = [a.change(1, {"one": "1\n"})]
    for n in (2, 3):
        shas.append(a.commit({f"f{n}": "x\n"}, parent=shas[-1], ref=f"refs/changes/{n}"))
    git_processes.clear()
    ahead = run_merge_job(
        MergeJob("item2", (check_change(1, shas[0]), check_change(2, shas[1]))), cache
    )
    assert ahead.status is Status.OK, ahead.failure
    assert git_processes == ["cat-file", "fetch", "update-ref"]
    assert [c.files for c in ahead.changes] == [("one",), ("f2", "one")]
    git_processes.clear()
    changes = tuple(check_change(n, sha) for n, sha in enumerate(shas, 1))
    item = run_merge_job(MergeJob("item3", changes, timestamp=None), cache)
    assert item.status is Status.OK, item.failure
    assert git_processes == ["fetch"]
    assert item.changes[-1].files == ("f2", "f3", "one")


def test_a_busy_repo_takes_as_few(
    remotes: Remotes,
    connections: dict[str, ConnectionSettings],
    tmp_path: Path,
    git_processes: list[str],
) -> None:
    """Dropping the refs of old jobs rides in the merge's own ref transaction."""
    a = remotes.create("org/a", CONFIG)
    state = tmp_path / "state"
    cache = RepoCache(state, connections, keep_refs=12)
    warm(cache)
    for n in range(1, 9):  # beyond the window: each merge drops the oldest job's refs
        sha = a.change(n, {f"f{n}": "x\n"})
        git_processes.clear()
        result = run_merge_job(MergeJob(f"check-{n}", (check_change(n, sha),)), cache)
        assert result.status is Status.OK, result.failure
        assert git_processes == (["cat-file", "fetch", "update-ref"] if n == 1 else ["fetch"]), n
    repo = cache.repo_path("git", "org/a")
    refs = cache.git.text(["for-each-ref", "--format=%(refname)", "refs/sluice/"], repo).split()
    assert len(refs) == 12
    # A new process scans the repo's refs once, in-process, among hundreds of old ones.
    lines = "".join(f"update refs/sluice/jobs/old-{n}/heads/main {sha}\n" for n in range(300))
    cache.git.run(["update-ref", "--stdin"], repo, stdin=lines.encode())
    (repo / "sluice-jobs").unlink()
    close_parked()  # another process, as it were: nothing parked
    later = RepoCache(state, connections, keep_refs=12)
    warm(later)
    sha = a.change(9, {"f9": "x\n"})
    git_processes.clear()
    result = run_merge_job(MergeJob("check-9", (check_change(9, sha),)), later)
    assert result.status is Status.OK, result.failure
    assert git_processes == ["cat-file", "fetch", "update-ref"]


def test_a_diverged_merge_needs_git_for_the_merge_only(
    remotes: Remotes, cache: RepoCache, git_processes: list[str]
) -> None:
    a = remotes.create("org/a", CONFIG)
    warm(cache)
    a.change(1, {"one": "1\n"})
    a.advance("main", {"upstream": "u\n"})
    git_processes.clear()
    assert run_merge_job(MergeJob("merge", (check_change(1),)), cache).status is Status.OK
    # the merge-base is the change's parent, where the moved branch's one line leads
    assert git_processes == ["fetch", "cat-file", "merge-tree", "commit-tree", "update-ref"]
    a.change(2, {"two": "2\n"})
    a.advance("main", {"upstream": "v\n"})
    git_processes.clear()
    assert run_merge_job(MergeJob("merge-2", (check_change(2),)), cache).status is Status.OK
    assert git_processes == ["fetch", "merge-tree", "commit-tree"]


# --------------------------------------------------------------------------
# The same results with the shortcuts turned off


def modes(remotes: Remotes) -> list[MergeJob]:
    a = remotes.create("org/a", {"README": "hello\n", "shared": "a\nb\nc\n", **CONFIG})
    a.change(1, {"one": "1\n", "zuul.d/new.yaml": "- job: {name: new}\n"})
    a.change(2, {"two": "2\n", "shared": "a\nb\nC\n"})
    a.advance("main", {"upstream": "u\n", "shared": "A\nb\nc\n"})
    jobs = []
    for mode in MergeMode:
        changes = tuple(
            MergeChange("git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=mode)
            for n in (1, 2)
        )
        jobs.append(MergeJob(f"d-{mode.value}", changes))
    return jobs


def stacks(remotes: Remotes) -> list[MergeJob]:
    a = remotes.create("org/a", CONFIG)
    first = a.change(1, {"one": "1\n", "zuul.yaml": "- job: {name: changed}\n"})
    second = a.commit({".zuul.d/x.yaml": "- job: {name: x}\n"}, parent=first, ref="refs/changes/2")
    squash = MergeChange(
        "git", "org/a", "main", ref="refs/changes/2", merge_mode=MergeMode.SQUASH_MERGE
    )
    return [
        MergeJob("stack", (check_change(1, first), check_change(2, second))),
        MergeJob("dated", (check_change(1), check_change(2, second)), timestamp=1_600_000_000),
        MergeJob("squash", (check_change(1, first), squash)),
        MergeJob("twice", (check_change(1, first), check_change(1, first))),
    ]


def conflicts(remotes: Remotes) -> list[MergeJob]:
    a = remotes.create("org/a", {"shared": "base\n", "other": "o\n"})
    a.change(1, {"shared": "first\n"})
    a.change(2, {"shared": "second\n", "other": "O\n"})
    a.commit({"other": "o\n"}, message="a root of its own", ref="refs/changes/3")
    jobs = []
    for mode in MergeMode:
        changes = tuple(
            MergeChange("git", "org/a", "main", ref=f"refs/changes/{n}", merge_mode=mode)
            for n in (1, 2)
        )
        unrelated = MergeChange("git", "org/a", "main", ref="refs/changes/3", merge_mode=mode)
        jobs += [MergeJob(f"c-{mode.value}", changes), MergeJob(f"u-{mode.value}", (unrelated,))]
    return jobs


def projects(remotes: Remotes) -> list[MergeJob]:
    a = remotes.create("org/a", CONFIG)
    b = remotes.create("org/b")
    remotes.create("org/lib")
    old = a.rev("refs/heads/main")
    b.git("update-ref", "refs/heads/stable/1.0", b.rev("refs/heads/main"))
    a.change(1, {"a1": "x\n"})
    b.change(2, {"b2": "x\n"}, branch="stable/1.0")
    a.advance("main", {"later": "l\n"})
    on_stable = MergeChange("git", "org/b", "stable/1.0", ref="refs/changes/2")
    pinned = (ProjectState("git", "org/a", {"main": old}),)
    missing = MergeChange("git", "org/a", "nope", ref="refs/changes/1")
    return [
        MergeJob("p", (check_change(1), on_stable), required=(ProjectRef("git", "org/lib"),)),
        MergeJob("pin", (check_change(1),), base_state=pinned),
        MergeJob("missing-branch", (missing,)),
        MergeJob("missing-ref", (check_change(1), check_change(9))),
        MergeJob("no-config", (check_change(1),), read_config=False),
    ]


@pytest.mark.parametrize("scenario", [modes, stacks, conflicts, projects])
def test_merges_are_those_of_the_git_commands(
    remotes: Remotes,
    connections: dict[str, ConnectionSettings],
    monkeypatch: pytest.MonkeyPatch,
    git_processes: list[str],
    scenario: Callable[[Remotes], list[MergeJob]],
) -> None:
    jobs = scenario(remotes)
    state = remotes.base.parent
    fast = RepoCache(state / "fast", connections)
    results = [run_merge_job(job, fast).to_dict() for job in jobs]
    with monkeypatch.context() as patch:
        turn_off_shortcuts(patch)
        slow = RepoCache(state / "slow", connections)
        git_processes.clear()
        assert [run_merge_job(job, slow).to_dict() for job in jobs] == results
        assert "cat-file" in git_processes and "for-each-ref" in git_processes
    assert any(r["status"] == "ok" for r in results)


def test_other_jobs_are_those_of_the_git_commands(
    remotes: Remotes,
    connections: dict[str, ConnectionSettings],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = remotes.create("org/a", CONFIG)
    a.git("update-ref", "refs/heads/feature/x", a.rev("refs/heads/main"))
    first = a.change(1, {"one": "1\n", "README": None})
    a.commit({"two": "2\n"}, parent=first, ref="refs/changes/2")
    a.advance("main", {"upstream": "u\n"})

    def answers(cache: RepoCache) -> list[dict[str, Any]]:
        return [
            run_files_changes_job(FilesChangesJob("f1", check_change(1, first)), cache).to_dict(),
            run_files_changes_job(FilesChangesJob("f2", check_change(2)), cache).to_dict(),
            run_config_job(ConfigJob("c", "git", "org/a"), cache).to_dict(),
            run_branch_heads_job(BranchHeadsJob("h", "git", "org/a"), cache).to_dict(),
        ]

    fast = answers(RepoCache(tmp_path / "fast", connections))
    with monkeypatch.context() as patch:
        turn_off_shortcuts(patch)
        assert answers(RepoCache(tmp_path / "slow", connections)) == fast


def test_a_corrupt_config_blob_is_found_and_the_repo_cloned_again(
    remotes: Remotes, cache: RepoCache
) -> None:
    lines = "".join(f"- job: {{name: job{i}}}\n" for i in range(60))
    a = remotes.create("org/a", {"README": "r\n", "zuul.yaml": lines})
    warm(cache)
    repo = cache.repo_path("git", "org/a")
    blob = cache.git.text(["rev-parse", "refs/heads/main:zuul.yaml"], repo)
    damage_object(cache, repo, blob)
    marker = repo / "marker-of-the-old-clone"
    marker.touch()
    sha = a.change(1, {"one": "1\n"})
    result = run_merge_job(MergeJob("check", (check_change(1, sha),)), cache)
    assert result.status is Status.OK, result.failure
    assert not marker.exists(), "the damaged repo was replaced by a fresh clone"
    assert result.config[0].files == {"zuul.yaml": lines}


def test_git_maintenance_runs_on_the_first_fetch_and_every_25th(
    remotes: Remotes,
    cache: RepoCache,
    connections: dict[str, ConnectionSettings],
    git_processes: list[str],
) -> None:
    """A fetch starts no ``git maintenance run --auto`` of its own; the merger asks for it."""
    a = remotes.create("org/a", CONFIG)
    warm(cache)  # the clone and this process's first fetch
    assert git_processes.count("maintenance") == 1
    repo = cache.repo_path("git", "org/a")
    assert cache.git.text(["config", "maintenance.auto"], repo) == "false"
    for n in range(1, MAINTENANCE_EVERY + 1):
        git_processes.clear()
        sha = a.change(n, {f"f{n}": "x\n"})
        result = run_merge_job(MergeJob(f"check-{n}", (check_change(n, sha),)), cache)
        assert result.status is Status.OK, result.failure
        assert git_processes.count("maintenance") == (1 if n == MAINTENANCE_EVERY else 0), n
    # A repo an older version cloned (auto maintenance on) is set once per process.
    cache.git.run(["config", "maintenance.auto", "true"], repo)
    git_processes.clear()
    warm(RepoCache(cache.root.parent, connections))  # another process, as it were
    assert cache.git.text(["config", "maintenance.auto"], repo) == "false"
    assert git_processes.count("maintenance") == 1


def test_a_failed_maintenance_is_logged_not_the_jobs(
    remotes: Remotes,
    cache: RepoCache,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = remotes.create("org/a", CONFIG)
    real_run = Git.run

    def run(self: Git, args: Any, *rest: Any, **kw: Any) -> Any:
        if args[0] == "maintenance":
            raise GitCommandError(list(args), 128, "fatal: cannot lock ref")
        return real_run(self, args, *rest, **kw)

    monkeypatch.setattr(Git, "run", run)
    sha = a.change(1, {"one": "1\n"})  # the first fetch: maintenance is due
    result = run_merge_job(MergeJob("check", (check_change(1, sha),)), cache)
    assert result.status is Status.OK, result.failure
    assert "org/a: git maintenance failed" in caplog.text
