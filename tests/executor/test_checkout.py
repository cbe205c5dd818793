"""Checkouts written in-process (packed-refs, commits found in packs, the files) against git.

The files and the index are compared with git's own checkout in
tests/executor/test_tree_checkout.py; here the repository around them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.executor.helpers import Repo, git, make_spec
from workers.executor import BaseControl, Result, RunnerOptions, run_build, workspace
from workers.executor.errors import WorkspaceError
from workers.executor.workspace import PACKED_REFS_HEADER, checkout, stored_commits

GitCalls = list[str]


@pytest.fixture
def git_calls(monkeypatch: pytest.MonkeyPatch) -> GitCalls:
    """The git commands a checkout runs (``checkout``, ``cat-file``, ...), in order."""
    calls: GitCalls = []
    real: Callable[..., str] = workspace._git

    def spy(args: Sequence[str], cwd: Path | None = None, stdin: str | None = None) -> str:
        calls.append(args[0])
        return real(args, cwd=cwd, stdin=stdin)

    monkeypatch.setattr(workspace, "_git", spy)
    return calls


def many_branches(repo: Repo, count: int = 22) -> dict[str, str]:
    """``main`` and ``count - 1`` more branches (some with slashes), each at a commit of its own."""
    repo.script("run.sh", "true")
    state = {"main": repo.commit("main")}
    for n in range(count - 1):
        repo.write("README", f"branch {n}\n")
        name = ("feature/x" if n == 0 else f"stable/{n}.x") if n % 4 == 0 else f"topic-{n}"
        state[name] = repo.commit(f"commit {n}")
    git(repo.path, "checkout", "-q", "-B", "main", state["main"])
    return state


def pack_everything(repo: Repo, state: dict[str, str]) -> None:
    """Every commit of ``state`` into one pack (refs keep them), no loose object left."""
    for name, commit in state.items():
        git(repo.path, "update-ref", f"refs/keep/{name}", commit)
    git(repo.path, "gc", "-q", "--prune=now")
    assert not list((repo.path / ".git" / "objects").glob("??/*"))


def assert_sound(dest: Path, state: dict[str, str], branch: str) -> None:
    """What a job sees: every branch at its commit, ``branch`` checked out, a clean tree."""
    assert git(dest, "branch", "--show-current") == branch
    assert git(dest, "rev-parse", "HEAD") == state[branch]
    listed = git(dest, "branch", "--list", "--format=%(refname:short) %(objectname)")
    assert sorted(listed.splitlines()) == sorted(f"{n} {c}" for n, c in state.items())
    for name, commit in state.items():
        assert git(dest, "rev-parse", f"refs/heads/{name}") == commit
        assert git(dest, "log", "-1", "--format=%H", name) == commit
    assert git(dest, "status", "--porcelain") == ""
    git(dest, "fsck", "--no-dangling")


@pytest.mark.parametrize("layout", ["loose", "packed", "mixed"])
def test_no_git_process_for_loose_packed_and_mixed_commits(
    tmp_path: Path, git_calls: GitCalls, layout: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    state = many_branches(repo)
    if layout != "loose":
        pack_everything(repo, state)
    if layout == "mixed":  # fresh merges on top of a packed history, loose
        repo.write("README", "speculative\n")
        state["main"] = repo.commit("merge")
        state["feature/x"] = repo.dangling_commit()
    dest = tmp_path / "work" / "project"

    checkout(str(repo.path), dest, state, "main")

    assert git_calls == []
    assert_sound(dest, state, "main")
    packed_refs = (dest / ".git" / "packed-refs").read_text().splitlines(keepends=True)
    assert packed_refs[0] == PACKED_REFS_HEADER
    refs = [line.split()[1] for line in packed_refs[1:]]
    assert refs == sorted(f"refs/heads/{name}" for name in state)
    assert not [p for p in (dest / ".git" / "refs").rglob("*") if p.is_file()]  # no loose ref


def test_a_branch_with_slashes_checked_out(tmp_path: Path, git_calls: GitCalls) -> None:
    repo = Repo.create(tmp_path / "source")
    state = many_branches(repo, count=3)
    pack_everything(repo, state)
    dest = tmp_path / "work" / "project"

    checkout(str(repo.path), dest, state, "feature/x")

    assert git_calls == []
    assert_sound(dest, state, "feature/x")
    assert (dest / ".git" / "HEAD").read_text() == "ref: refs/heads/feature/x\n"


def test_a_job_may_change_the_branches_afterwards(tmp_path: Path) -> None:
    """Packed refs are git's own: fetch, branch -f/-D, commit and pack-refs work on them."""
    repo = Repo.create(tmp_path / "source")
    state = many_branches(repo, count=6)
    pack_everything(repo, state)
    dest = tmp_path / "work" / "project"
    checkout(str(repo.path), dest, state, "main")
    repo.write("README", "upstream moved on\n")
    upstream = repo.commit("later")

    git(dest, "fetch", "-q", str(repo.path), "main:refs/heads/upstream")
    git(dest, "branch", "-f", "topic-1", upstream)
    git(dest, "branch", "-D", "topic-2")
    git(dest, "checkout", "-q", "-b", "work", "feature/x")
    (dest / "NEW").write_text("job's file\n")
    git(dest, "add", "NEW")
    git(dest, "commit", "-q", "-m", "the job's commit")
    git(dest, "pack-refs", "--all")

    assert git(dest, "rev-parse", "upstream") == upstream
    assert git(dest, "rev-parse", "topic-1") == upstream
    assert git(dest, "rev-parse", "work^") == state["feature/x"]
    assert git(dest, "rev-parse", "main") == state["main"]
    names = git(dest, "branch", "--list", "--format=%(refname:short)").split()
    assert "topic-2" not in names and {"upstream", "work", "stable/4.x"} <= set(names)
    git(dest, "fsck", "--no-dangling")


@pytest.mark.parametrize("packed", [False, True], ids=["loose", "packed"])
@pytest.mark.parametrize("kind", ["missing", "tree", "blob"])
def test_no_such_commit_asks_git_and_says_so(
    tmp_path: Path, git_calls: GitCalls, packed: bool, kind: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    repo.write("README", "text\n")
    state = {"main": repo.commit()}
    objects = {
        "missing": "1" * 40,
        "tree": git(repo.path, "rev-parse", "HEAD^{tree}"),
        "blob": git(repo.path, "rev-parse", "HEAD:README"),
    }
    if packed:
        pack_everything(repo, state)
    state["stable"] = objects[kind]
    dest = tmp_path / "work" / "project"

    with pytest.raises(WorkspaceError) as raised:
        checkout(str(repo.path), dest, state, "main")

    assert str(raised.value) == f"{repo.path}: no such commit for stable at {objects[kind]}"
    assert git_calls == ["cat-file"]


def deltified_commits(repo: Repo) -> tuple[str, list[str]]:
    """Commits stored as deltas of another (the base): similar long messages, packed hard."""
    body = "\n".join(f"line {n} of a long and repetitive commit message" for n in range(40))
    for n in range(12):
        git(repo.path, "commit", "-q", "--allow-empty", "-m", f"change {n}", "-m", body)
    git(repo.path, "repack", "-q", "-a", "-d", "-f", "--depth=50", "--window=250")
    git(repo.path, "prune-packed")
    (idx,) = (repo.path / ".git" / "objects" / "pack").glob("*.idx")
    base, deltas = "", []
    for line in git(repo.path, "verify-pack", "-v", str(idx)).splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[1] == "commit":
            if len(fields) == 7:  # name type size packed offset depth base
                deltas.append(fields[0])
            else:
                base = fields[0]
    assert base and deltas, "git stored no commit as a delta"
    return base, deltas


def test_a_deltified_commit_is_rebuilt_in_process(tmp_path: Path, git_calls: GitCalls) -> None:
    """Look-alike commits that git stored as deltas are read without a git process."""
    repo = Repo.create(tmp_path / "source")
    repo.script("run.sh", "true")
    repo.commit()
    base, deltas = deltified_commits(repo)
    objects = repo.path / ".git" / "objects"
    assert stored_commits(repo.path / ".git", objects, [base, *deltas])
    assert not stored_commits(repo.path / ".git", objects, [base, "1" * 40])
    state = {"main": deltas[0], "stable": base, **{f"c{n}": c for n, c in enumerate(deltas)}}
    dest = tmp_path / "work" / "project"

    checkout(str(repo.path), dest, state, "main")

    assert git_calls == []
    assert_sound(dest, state, "main")


def test_a_deltified_commit_that_does_not_read_is_looked_up_by_git(
    tmp_path: Path, git_calls: GitCalls
) -> None:
    """A delta whose base is damaged: git is asked, and says the commit is missing."""
    repo = Repo.create(tmp_path / "source")
    repo.commit()
    base, deltas = deltified_commits(repo)
    (idx,) = (repo.path / ".git" / "objects" / "pack").glob("*.idx")
    offsets = {
        line.split()[0]: int(line.split()[4])
        for line in git(repo.path, "verify-pack", "-v", str(idx)).splitlines()
        if len(line.split()) >= 5 and line.split()[1] == "commit"
    }
    pack = idx.with_suffix(".pack")
    pack.chmod(0o644)
    with pack.open("r+b") as f:  # the base's zlib stream broken: its deltas cannot be rebuilt
        f.seek(offsets[base] + 8)
        f.write(b"\xff\xff\xff\xff")
    assert not stored_commits(repo.path / ".git", repo.path / ".git" / "objects", [deltas[0]])

    with pytest.raises(WorkspaceError):
        checkout(str(repo.path), tmp_path / "work" / "project", {"main": deltas[0]}, "main")

    assert git_calls[:1] == ["cat-file"]


@pytest.mark.parametrize(
    "names",
    [("a", "a/b"), ("a/b", "a"), ("a", "a-b", "a.c", "a/b"), ("x/y", "x/y/z/w")],
    ids=["folder-first", "folder-last", "sorted-apart", "deeper"],
)
def test_a_branch_that_is_another_branchs_folder_is_refused(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    repo = Repo.create(tmp_path / "source", branch=names[0])
    commit = repo.commit()
    nested = max(names, key=lambda name: name.count("/"))
    folder = next(n for n in names if nested.startswith(n + "/"))

    with pytest.raises(WorkspaceError) as raised:
        checkout(str(repo.path), tmp_path / "work" / "p", dict.fromkeys(names, commit), names[0])

    assert str(raised.value) == (
        f"cannot write the ref of branch {nested}: branch {folder} is in its way"
    )


def test_names_that_share_a_prefix_only_are_fine(tmp_path: Path) -> None:
    repo = Repo.create(tmp_path / "source", branch="a")
    commit = repo.commit()
    state = dict.fromkeys(("a", "ab", "a-b/c", "a.b", "b/a"), commit)
    dest = tmp_path / "work" / "p"

    checkout(str(repo.path), dest, state, "a")

    assert_sound(dest, state, "a")


def test_a_folder_conflict_ends_the_build_with_retry(
    repo: Repo, tmp_path: Path, options: RunnerOptions
) -> None:
    repo.script("run.sh", "true")
    commit = repo.commit()
    lib = Repo.create(tmp_path / "repos" / "lib", branch="a")
    lib_commit = lib.commit()
    state = {"a": lib_commit, "a/b": lib_commit}
    spec = make_spec(
        repo, commit, others={"org/lib": (str(lib.path), state)}, checkouts={"org/lib": "a"}
    )

    result = run_build(spec, BaseControl(), options)

    assert result.result is Result.RETRY
    assert result.message == (
        "workspace: cannot write the ref of branch a/b: branch a is in its way"
    )


def test_a_commit_found_once_is_not_looked_up_again(tmp_path: Path) -> None:
    """Every build asks for every branch of the repo state: each commit is read once."""
    repo = Repo.create(tmp_path / "source")
    repo.write("README", "text\n")
    commit = repo.commit()
    git_dir, objects = repo.path / ".git", repo.path / ".git" / "objects"
    loose = objects / commit[:2] / commit[2:]
    assert loose.is_file() and stored_commits(git_dir, objects, [commit])

    loose.rename(tmp_path / "away")  # gone since (git would not prune it: this shows the memo)

    assert stored_commits(git_dir, objects, [commit])
    assert not stored_commits(git_dir, objects, [commit, "2" * 40])
    assert not stored_commits(tmp_path / "elsewhere", tmp_path / "elsewhere" / "objects", [commit])
