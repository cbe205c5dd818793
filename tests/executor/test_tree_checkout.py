"""The in-process checkout (workers/executor/treecheckout.py) against ``git checkout``.

Each tree is checked out twice from the same source: by the workspace as
it is, and with the in-process checkout turned off (git's checkout, the
reference). Files, modes, link targets, ``git ls-files -s``, ``git status``
and the index itself (apart from its stat data, checked against the files)
must be the same; the common case must start no process at all.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.executor.helpers import Repo, git
from tests.executor.trees import (
    OFS_DELTA,
    REF_DELTA,
    assert_same_as_git,
    blob,
    commit_tree,
    deltified,
    entry_type,
    fresh_repository,
    listing,
    reference,
    rich_tree,
)
from workers.executor import packindex, treecheckout
from workers.executor.errors import WorkspaceError
from workers.executor.workspace import checkout


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every process started (they still run)."""
    started: list[list[str]] = []
    real = subprocess.Popen

    class Counting(real):  # type: ignore[valid-type, misc]
        def __init__(self, args: Any, *rest: Any, **kwargs: Any) -> None:
            started.append(list(args))
            super().__init__(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Counting)
    return started


@pytest.mark.parametrize("layout", ["loose", "packed"])
def test_a_rich_tree_is_gits_and_starts_no_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    processes: list[list[str]],
    layout: str,
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = rich_tree(repo)
    if layout == "packed":
        git(repo.path, "gc", "-q", "--prune=now")
    reference(repo, tmp_path / "git", commit, monkeypatch)
    processes.clear()

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert processes == []
    assert_same_as_git(tmp_path / "fast", tmp_path / "git")
    assert os.access(tmp_path / "fast" / "bin" / "run.sh", os.X_OK)
    assert os.readlink(tmp_path / "fast" / "link") == "a/b"


@pytest.mark.parametrize("ref_delta", [False, True], ids=["ofs-delta", "ref-delta"])
def test_deltified_blobs_are_gits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool], ref_delta: bool
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = deltified(repo, ref_delta=ref_delta)
    blob = git(repo.path, "rev-parse", f"{commit}:lines.txt")
    assert entry_type(repo, blob) == (REF_DELTA if ref_delta else OFS_DELTA)
    reference(repo, tmp_path / "git", commit, monkeypatch)

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [True]
    assert_same_as_git(tmp_path / "fast", tmp_path / "git")


def test_modes_follow_the_umask_as_gits_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool]
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = rich_tree(repo)
    previous = os.umask(0o027)
    try:
        reference(repo, tmp_path / "git", commit, monkeypatch)
        checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")
    finally:
        os.umask(previous)

    assert fast_path == [True]
    assert listing(tmp_path / "fast") == listing(tmp_path / "git")
    assert (tmp_path / "fast" / "bin" / "run.sh").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "fast" / "README").stat().st_mode & 0o777 == 0o640


def gitlink_commit(repo: Repo) -> str:
    repo.write("README", "with a submodule\n")
    git(repo.path, "add", "README")
    head = repo.commit()
    git(repo.path, "update-index", "--add", "--cacheinfo", f"160000,{head},sub")
    git(repo.path, "commit", "-q", "-m", "a gitlink")  # (commit would add -A: no gitlink)
    assert git(repo.path, "ls-tree", "HEAD", "sub").startswith("160000 commit")
    return git(repo.path, "rev-parse", "HEAD")


def attributes_commit(repo: Repo) -> str:
    repo.write("docs/.gitattributes", "*.txt text eol=crlf\n")
    repo.write("docs/a.txt", "one\ntwo\n")
    return repo.commit("attributes")


@pytest.mark.parametrize("case", ["gitattributes", "gitlink", "empty-tree"])
def test_what_git_must_handle_is_checked_out_by_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool], case: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    rich_tree(repo)
    make: dict[str, Callable[[Repo], str]] = {
        "gitattributes": attributes_commit,
        "gitlink": gitlink_commit,
        "empty-tree": commit_tree,
    }
    commit = make[case](repo)
    reference(repo, tmp_path / "git", commit, monkeypatch)

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [False]
    assert_same_as_git(tmp_path / "fast", tmp_path / "git")
    if case == "gitattributes":
        assert (tmp_path / "fast" / "docs" / "a.txt").read_bytes() == b"one\r\ntwo\r\n"


@pytest.mark.parametrize(
    "name", [".GIT", ".git.", ".Git ", "git~1", ".git:x", ".gitattributes", ".GitAttributes"]
)
def test_names_git_may_refuse_are_left_to_git(
    tmp_path: Path, fast_path: list[bool], name: str
) -> None:
    repo = Repo.create(tmp_path / "source")
    readme = blob(repo, "text\n")
    inner = commit_tree(repo, f"100644 blob {readme}\tconfig")
    inner_tree = git(repo.path, "rev-parse", f"{inner}^{{tree}}")
    commit = commit_tree(repo, f"100644 blob {readme}\tREADME", f"040000 tree {inner_tree}\t{name}")
    dest = tmp_path / "fast"

    try:
        checkout(str(repo.path), dest, {"main": commit}, "main")
    except WorkspaceError as exc:  # git refuses the path
        assert "invalid path" in str(exc)
    else:
        assert git(dest, "status", "--porcelain") == ""
    assert fast_path == [False]


def test_a_name_twice_is_left_to_git(tmp_path: Path) -> None:
    repo = Repo.create(tmp_path / "source")
    readme = blob(repo, "text\n")
    inner = commit_tree(repo, f"100644 blob {readme}\tx")
    inner_tree = git(repo.path, "rev-parse", f"{inner}^{{tree}}")
    commit = commit_tree(repo, f"100644 blob {readme}\ta", f"040000 tree {inner_tree}\ta")
    dest = fresh_repository(repo, tmp_path / "fast", commit)

    assert not treecheckout.checkout_commit(repo.path / ".git" / "objects", dest, commit)
    assert os.listdir(dest) == [".git"]


def test_a_symlinked_gitmodules_is_left_to_git() -> None:
    assert treecheckout.safe_name(b".gitmodules", treecheckout.REGULAR)
    assert not treecheckout.safe_name(b".gitmodules", treecheckout.SYMLINK_MODE)
    assert not treecheckout.safe_name(b"GITMOD~1", treecheckout.SYMLINK_MODE)
    for fine in (b".github", b".gitignore", b".git.d", b".gitx", b"a.git", b"git", b"x~1"):
        assert treecheckout.safe_name(fine, treecheckout.REGULAR), fine
    for refused in (b"", b".", b"..", b"a/b", b"a\0b", b".git\\x", b".GIT. .", b"Git~2"):
        assert not treecheckout.safe_name(refused, treecheckout.REGULAR), refused


@pytest.fixture
def cleanups(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """What each clean-up before git's checkout found written (and removed)."""
    found: list[list[str]] = []
    real = treecheckout._remove_written

    def spy(dest: Path) -> None:
        found.append(sorted(os.listdir(dest)))
        real(dest)
        assert os.listdir(dest) == [".git"]
        assert not (dest / ".git" / "index").exists()

    monkeypatch.setattr(treecheckout, "_remove_written", spy)
    return found


@pytest.mark.parametrize("late", [False, True], ids=["a-tree", "the-last-blob"])
def test_objects_only_in_the_sources_alternates_are_read_by_git(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast_path: list[bool],
    cleanups: list[list[str]],
    late: bool,
) -> None:
    """Found by git through the source's own alternates; the in-process checkout, which
    does not follow them, misses a tree (before writing) or the last blob (after)."""
    lender = Repo.create(tmp_path / "lender")
    rich_tree(lender)
    lender.write("zz-last", "the last file\n")
    lender.commit()
    git(lender.path, "gc", "-q")
    source = tmp_path / "source"
    git(tmp_path, "clone", "-q", "--shared", str(lender.path), str(source))
    repo = Repo(source)
    if late:  # every tree changes (loose here); links' and zz-last's blobs stay the lender's
        for path in repo.path.glob("**/*"):
            regular = path.is_file() and not path.is_symlink()
            if regular and ".git" not in path.parts and path.name != "zz-last":
                path.write_text("the source's own\n")
    else:
        repo.write("README", "the source's own\n")
    commit = repo.commit()
    reference(repo, tmp_path / "git", commit, monkeypatch)

    checkout(str(source), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [False]
    assert len(cleanups) == late and all("README" in written for written in cleanups)
    assert_same_as_git(tmp_path / "fast", tmp_path / "git")


def test_a_damaged_pack_entry_is_read_by_git_from_a_clean_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast_path: list[bool],
    cleanups: list[list[str]],
) -> None:
    """The last blob's stream is damaged in the pack, a sound copy lies loose: git, which
    then reads the loose copy, checks out after everything written before was removed."""
    repo = Repo.create(tmp_path / "source")
    rich_tree(repo)
    repo.write("zz-last", "the last file, " * 20 + "\n")
    commit = repo.commit()
    git(repo.path, "gc", "-q", "--prune=now")
    name = git(repo.path, "rev-parse", f"{commit}:zz-last")
    (idx,) = (repo.path / ".git" / "objects" / "pack").glob("*.idx")
    index = packindex.load(str(idx))
    assert index is not None
    offset = index.offset(bytes.fromhex(name))
    assert offset is not None and entry_type(repo, name) == 3  # a whole blob
    pack = Path(index.pack)
    data = bytearray(pack.read_bytes())
    data[offset + 8] ^= 0xFF  # inside its zlib stream (the entry's header is 2 bytes)
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    content = (repo.path / "zz-last").read_bytes()
    loose = repo.path / ".git" / "objects" / name[:2] / name[2:]
    loose.parent.mkdir(exist_ok=True)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(content) + content))
    reference(repo, tmp_path / "git", commit, monkeypatch)

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [False]
    assert len(cleanups) == 1 and "README" in cleanups[0]
    assert (tmp_path / "fast" / "zz-last").read_bytes() == content
    assert listing(tmp_path / "fast") == listing(tmp_path / "git")
    assert git(tmp_path / "fast", "status", "--porcelain") == ""


def test_a_folder_holding_more_than_git_is_left_to_git(tmp_path: Path) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = rich_tree(repo)
    dest = fresh_repository(repo, tmp_path / "fast", commit)
    (dest / "leftover").write_text("not the checkout's\n")

    assert not treecheckout.checkout_commit(repo.path / ".git" / "objects", dest, commit)
    assert sorted(os.listdir(dest)) == [".git", "leftover"]


@pytest.mark.parametrize(
    "limit, value",
    [("MAX_FILES", 16), ("MAX_DEPTH", 4), ("TREE_BYTES_PER_FILE", 1), ("MAX_BLOB_BYTES", 199_999)],
)
def test_large_and_deep_trees_are_left_to_git(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fast_path: list[bool],
    limit: str,
    value: int,
) -> None:
    repo = Repo.create(tmp_path / "source")
    commit = rich_tree(repo)  # 17 files, 4 folders deep, 789 bytes of trees, 200,000 at most
    reference(repo, tmp_path / "git", commit, monkeypatch)
    monkeypatch.setattr(treecheckout, limit, value)
    read: list[str] = []
    real = treecheckout.parse_tree
    monkeypatch.setattr(treecheckout, "parse_tree", lambda *a: read.append("") or real(*a))

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [False]
    assert read if limit != "TREE_BYTES_PER_FILE" else not read
    assert_same_as_git(tmp_path / "fast", tmp_path / "git")


def test_the_limits_leave_the_rich_tree_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fast_path: list[bool]
) -> None:
    """The limits just above the test's tree: what the test above takes away is all."""
    repo = Repo.create(tmp_path / "source")
    commit = rich_tree(repo)
    monkeypatch.setattr(treecheckout, "MAX_FILES", 17)
    monkeypatch.setattr(treecheckout, "MAX_DEPTH", 5)
    monkeypatch.setattr(treecheckout, "TREE_BYTES_PER_FILE", 47)  # 799 bytes
    monkeypatch.setattr(treecheckout, "MAX_BLOB_BYTES", 200_000)

    checkout(str(repo.path), tmp_path / "fast", {"main": commit}, "main")

    assert fast_path == [True]
