"""The pack index reader against git's own packs (``git verify-pack`` as the reference)."""

from __future__ import annotations

import hashlib
import os
import struct
from collections import OrderedDict
from pathlib import Path

import pytest

from tests.executor.helpers import Repo, git
from tests.executor.test_checkout import deltified_commits
from workers.executor import packindex
from workers.executor.packindex import PackIndex, load, packed_commits
from workers.executor.workspace import _sha1_repository, stored_commits

TYPES = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}
OFS_DELTA = 6


def packed_repo(repo: Repo) -> list[str]:
    """A few commits, trees, blobs and a tag, all in one pack; its commits."""
    commits = []
    for n in range(5):
        repo.write(f"dir{n}/file", f"content {n}\n" * 20)
        commits.append(repo.commit(f"commit {n}"))
    git(repo.path, "tag", "-a", "-m", "release", "v1")
    git(repo.path, "gc", "-q", "--prune=now")
    return commits


def only_index(repo: Repo) -> Path:
    (idx,) = (repo.path / ".git" / "objects" / "pack").glob("*.idx")
    return idx


def verify_pack(idx: Path) -> list[list[str]]:
    """``git verify-pack -v``: name, type, size, size in pack, offset[, depth, base]."""
    lines = git(idx.parent, "verify-pack", "-v", str(idx)).splitlines()
    return [fields for fields in map(str.split, lines) if fields[1:2] and fields[1] in TYPES]


def entry_type(index: PackIndex, name: str) -> int | None:
    with packindex._packs() as packs:
        return packs.object_type(index, bytes.fromhex(name))


def test_offsets_and_types_are_gits(repo: Repo) -> None:
    packed_repo(repo)
    index = load(str(only_index(repo)))
    assert index is not None

    entries = verify_pack(only_index(repo))
    assert index.count == len(entries)
    for name, kind, _size, _packed, offset, *delta in entries:
        assert index.offset(bytes.fromhex(name)) == int(offset), name
        assert entry_type(index, name) == (OFS_DELTA if delta else TYPES[kind]), name
    assert index.offset(bytes.fromhex("0" * 40)) is None
    assert index.offset(bytes.fromhex("f" * 40)) is None


def test_commits_found_only_as_whole_commits(repo: Repo) -> None:
    commits = packed_repo(repo)
    objects = repo.path / ".git" / "objects"
    tree = git(repo.path, "rev-parse", "HEAD^{tree}")
    tag = git(repo.path, "rev-parse", "v1")

    assert packed_commits(objects, commits)
    assert not packed_commits(objects, [*commits, tree])
    assert not packed_commits(objects, [tag])  # a tag object is no commit
    assert not packed_commits(objects, ["0" * 40])
    assert not packed_commits(objects, [commits[0].upper()])
    assert not packed_commits(objects, [commits[0][:39] + " "])


def test_a_deltified_commit_is_no_answer(repo: Repo) -> None:
    repo.commit()
    base, deltas = deltified_commits(repo)
    objects = repo.path / ".git" / "objects"

    assert packed_commits(objects, [base])
    for commit in deltas:
        assert not packed_commits(objects, [commit])
        assert git(repo.path, "cat-file", "-t", commit) == "commit"  # what git says instead


def rewrite_index(idx: Path, large: bool = False) -> None:
    """Write ``idx`` again from git's, with offsets through the 8-byte table if ``large``."""
    entries = sorted((bytes.fromhex(e[0]), int(e[4])) for e in verify_pack(idx))
    data = idx.read_bytes()
    count = len(entries)
    crcs = data[8 + 1024 + 20 * count : 8 + 1024 + 24 * count]
    pack_checksum = data[-40:-20]
    fanout = [sum(1 for name, _ in entries if name[0] <= byte) for byte in range(256)]
    offsets, table = b"", b""
    for _, offset in entries:
        if large and offset != 12:  # git allows one entry fewer than objects in the table
            offsets += struct.pack(">I", 0x80000000 | len(table) // 8)
            table += struct.pack(">Q", offset)
        else:
            offsets += struct.pack(">I", offset)
    body = (
        b"\xfftOc"
        + struct.pack(">I", 2)
        + struct.pack(">256I", *fanout)
        + b"".join(name for name, _ in entries)
        + crcs
        + offsets
        + table
        + pack_checksum
    )
    idx.chmod(0o644)
    idx.write_bytes(body + hashlib.sha1(body).digest())


def test_large_offsets_are_read_from_their_table(repo: Repo) -> None:
    commits = packed_repo(repo)
    idx = only_index(repo)
    entries = verify_pack(idx)
    rewrite_index(idx, large=True)
    # git reads it too (verify-pack would not: it compares with the index it would write)
    assert git(repo.path, "cat-file", "-t", commits[0]) == "commit"

    index = load(str(idx))
    assert index is not None
    offsets = struct.unpack_from(f">{index.count}I", index.data, 8 + 1024 + 24 * index.count)
    assert sum(offset >> 31 for offset in offsets) == index.count - 1
    for name, _kind, _size, _packed, offset, *_ in entries:
        assert index.offset(bytes.fromhex(name)) == int(offset)
    assert packed_commits(repo.path / ".git" / "objects", commits)


def test_a_version_1_index_is_no_answer_and_git_is_asked(repo: Repo, tmp_path: Path) -> None:
    commits = packed_repo(repo)
    idx = only_index(repo)
    idx.unlink()
    git(repo.path, "index-pack", "--index-version=1", "-o", str(idx), str(idx.with_suffix(".pack")))

    assert load(str(idx)) is None
    assert not packed_commits(repo.path / ".git" / "objects", commits)
    assert git(repo.path, "cat-file", "-t", commits[0]) == "commit"


@pytest.mark.parametrize("damage", ["checksum", "count", "truncated", "empty-index"])
def test_a_pack_that_is_not_its_indexs_is_no_answer(repo: Repo, damage: str) -> None:
    commits = packed_repo(repo)
    idx = only_index(repo)
    pack = idx.with_suffix(".pack")
    data = pack.read_bytes()
    pack.chmod(0o644)
    idx.chmod(0o644)
    if damage == "checksum":
        pack.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "count":
        pack.write_bytes(data[:8] + struct.pack(">I", 1) + data[12:])
    elif damage == "truncated":
        pack.write_bytes(data[:10])
    else:
        idx.write_bytes(b"")

    assert not packed_commits(repo.path / ".git" / "objects", commits)


def test_each_index_is_read_once_until_it_changes(
    repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = packed_repo(repo)
    objects = repo.path / ".git" / "objects"
    loaded: list[str] = []
    real = packindex.load

    def counting(path: str) -> PackIndex | None:
        loaded.append(path)
        return real(path)

    monkeypatch.setattr(packindex, "load", counting)
    monkeypatch.setattr(packindex, "_cache", OrderedDict())

    for _ in range(3):
        assert packed_commits(objects, commits)
    first = str(only_index(repo))
    assert loaded == [first]

    repo.write("later", "text\n")
    later = repo.commit("later")
    git(repo.path, "repack", "-q", "-a", "-d")  # a new pack, the old one removed
    git(repo.path, "prune-packed")
    assert packed_commits(objects, [*commits, later])
    assert packed_commits(objects, [*commits, later])
    assert loaded == [first, str(only_index(repo))]
    assert [key[0] for key in packindex._cache] == [str(only_index(repo))]  # the old one forgotten


def test_the_cache_is_bounded(repo: Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = []
    for n in range(5):  # one pack per commit
        repo.write("file", f"{n}\n")
        commits.append(repo.commit(f"commit {n}"))
        git(repo.path, "repack", "-q", "-d")
    git(repo.path, "prune-packed")
    monkeypatch.setattr(packindex, "CACHE_SIZE", 3)
    monkeypatch.setattr(packindex, "_cache", OrderedDict())

    assert packed_commits(repo.path / ".git" / "objects", commits)
    assert len(packindex._cache) == 3


def test_sha256_repositories_are_left_to_git(tmp_path: Path) -> None:
    repo = Repo(tmp_path / "sha256")
    repo.path.mkdir()
    git(repo.path, "init", "-q", "--object-format=sha256", "--initial-branch=main")
    commit = repo.commit()
    git(repo.path, "gc", "-q", "--prune=now")
    git_dir = repo.path / ".git"

    assert len(commit) == 64
    assert not stored_commits(git_dir, git_dir / "objects", [commit])
    # even a name of SHA-1's length is never looked up in a SHA-256 repository's packs
    assert not _sha1_repository(git_dir)
    assert _sha1_repository(tmp_path / "nowhere") is False


def test_alternates_of_the_source_are_left_to_git(repo: Repo, tmp_path: Path) -> None:
    """A commit only the source's alternate holds is no answer in-process; git finds it."""
    commits = packed_repo(repo)
    borrower = tmp_path / "borrower"
    git(tmp_path, "clone", "-q", "--shared", str(repo.path), str(borrower))
    objects = borrower / ".git" / "objects"
    assert (objects / "info" / "alternates").is_file()

    assert not stored_commits(borrower / ".git", objects, commits)
    assert git(borrower, "cat-file", "-t", commits[0]) == "commit"
    assert os.listdir(objects / "pack") == []
