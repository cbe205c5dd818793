"""Trees for the in-process checkout's tests, and how its results are compared with git's."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executor.helpers import Repo, git
from workers.executor import packindex, workspace
from workers.executor.workspace import checkout

ENTRY_HEAD = 62  # the fixed part of a version 2 index entry
OFS_DELTA, REF_DELTA = 6, 7


def pseudo_random(size: int, seed: bytes = b"") -> bytes:
    """Incompressible bytes, the same each run."""
    blocks = (hashlib.sha256(seed + n.to_bytes(4, "big")).digest() for n in range(size // 32 + 1))
    return b"".join(blocks)[:size]


def lines(count: int, changed: int = -1) -> str:
    return "".join(
        f"line {n} of a text that changes a little{' (changed)' if n == changed else ''}\n"
        for n in range(count)
    )


def rich_tree(repo: Repo) -> str:
    """Nested folders, names that sort apart in trees and paths, every kind of file."""
    for name in ("a-b", "a.b", "a/b", "a/b.c/d", "a0", "a/b-c", "deep/er/and/deeper/file"):
        repo.write(name, f"{name}\n")
    repo.write("README", "read me\n")
    repo.write("empty", "")
    repo.write("spaced name ünïcode.txt", "text\n")
    (repo.path / os.fsdecode(b"latin-\xe9")).write_bytes(b"not utf-8 in its name\n")
    repo.script("bin/run.sh", "true")
    repo.symlink("link", "a/b")
    repo.symlink("dir-link", "deep/er")
    repo.symlink("dangling", "../nowhere")
    (repo.path / "big.bin").write_bytes(pseudo_random(200_000))
    repo.write("lines.txt", lines(3000))
    return repo.commit("rich")


def deltified(repo: Repo, *, ref_delta: bool = False) -> str:
    """History where big files changed a little, packed hard; the commit whose blobs are
    deepest in their delta chains."""
    commits = [rich_tree(repo)]
    for n in range(8):
        repo.write("lines.txt", lines(3000, changed=n * 300))
        data = bytearray(pseudo_random(200_000))
        data[n * 1000 : n * 1000 + 10] = b"0123456789"
        (repo.path / "big.bin").write_bytes(bytes(data))
        commits.append(repo.commit(f"change {n}"))
    offsets = "false" if ref_delta else "true"
    repack = ["repack", "-q", "-adf", "--window=250", "--depth=50"]
    git(repo.path, "-c", f"repack.useDeltaBaseOffset={offsets}", *repack)
    git(repo.path, "prune-packed")
    assert not list((repo.path / ".git" / "objects").glob("??/*"))
    depths = delta_depths(repo)
    blobs = {commit: git(repo.path, "rev-parse", f"{commit}:lines.txt") for commit in commits}
    chosen = max(commits, key=lambda commit: depths.get(blobs[commit], 0))
    assert depths[blobs[chosen]] >= 2
    return chosen


def delta_depths(repo: Repo) -> dict[str, int]:
    (idx,) = (repo.path / ".git" / "objects" / "pack").glob("*.idx")
    found = {}
    for fields in map(str.split, git(repo.path, "verify-pack", "-v", str(idx)).splitlines()):
        if len(fields) == 7 and fields[1] in ("blob", "tree", "commit"):
            found[fields[0]] = int(fields[5])
    return found


def entry_type(repo: Repo, name: str) -> int | None:
    (index,) = packindex.indexes(repo.path / ".git" / "objects" / "pack")
    with packindex._packs() as packs:
        return packs.object_type(index, bytes.fromhex(name))


def reference(repo: Repo, dest: Path, commit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``commit`` checked out by git (the in-process checkout turned off)."""
    with monkeypatch.context() as patched:
        patched.setattr(workspace, "checkout_commit", lambda *args, **kwargs: False)
        checkout(str(repo.path), dest, {"main": commit}, "main")


def listing(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under ``root`` but ``.git``: its kind, permission bits and content."""
    found: dict[str, tuple[str, int, bytes]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (folder == str(root) and d == ".git")]
        for name in dirs + files:
            path = Path(folder, name)
            stat = path.lstat()
            relative = str(path.relative_to(root))
            if path.is_symlink():
                found[relative] = ("link", 0, os.readlink(path).encode(errors="surrogateescape"))
            elif path.is_dir():
                found[relative] = ("dir", stat.st_mode & 0o7777, b"")
            else:
                found[relative] = ("file", stat.st_mode & 0o7777, path.read_bytes())
    return found


def index_entries(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(fixed part, path) of each entry of a version 2 index."""
    assert data[:8] == b"DIRC\0\0\0\2"
    (count,) = struct.unpack(">I", data[8:12])
    position = 12
    for _ in range(count):
        flags = struct.unpack(">H", data[position + 60 : position + 62])[0]
        path = data[position + ENTRY_HEAD : position + ENTRY_HEAD + (flags & 0xFFF)]
        yield data[position : position + ENTRY_HEAD], path
        position += (ENTRY_HEAD + len(path) + 8) & ~7


def without_stat_data(data: bytes) -> bytes:
    """The index without its checksum, each entry's times, device and inode zeroed."""
    body = bytearray(data[:-20])
    position = 12
    for _head, path in index_entries(data):
        body[position : position + 24] = bytes(24)
        position += (ENTRY_HEAD + len(path) + 8) & ~7
    return bytes(body)


def assert_stat_data_of_the_files(dest: Path) -> None:
    data = (dest / ".git" / "index").read_bytes()
    assert hashlib.sha1(data[:-20]).digest() == data[-20:]
    for head, path in index_entries(data):
        stat = os.lstat(dest / os.fsdecode(path))
        numbers = struct.unpack(">10I", head[:40])
        expected = (
            *divmod(stat.st_ctime_ns, 10**9),
            *divmod(stat.st_mtime_ns, 10**9),
            stat.st_dev,
            stat.st_ino,
        )
        assert numbers[:6] == tuple(n & 0xFFFFFFFF for n in expected), path
        assert numbers[7:] == (stat.st_uid, stat.st_gid, stat.st_size & 0xFFFFFFFF), path


def assert_same_as_git(fast: Path, slow: Path) -> None:
    """The in-process checkout ``fast`` is git's ``slow``, and clean to git."""
    fast_index, slow_index = ((root / ".git" / "index").read_bytes() for root in (fast, slow))
    assert without_stat_data(fast_index) == without_stat_data(slow_index)
    assert_stat_data_of_the_files(fast)
    assert listing(fast) == listing(slow)
    assert git(fast, "ls-files", "-s") == git(slow, "ls-files", "-s")
    assert git(fast, "status", "--porcelain", "--ignored") == ""
    git(fast, "diff-index", "--quiet", "HEAD")  # fails (exit 1) on a difference
    git(fast, "fsck", "--no-dangling")


def commit_tree(repo: Repo, *entries: str) -> str:
    """A commit of a tree made by ``git mktree`` (which takes names ``git add`` refuses)."""
    tree = subprocess.run(
        ["git", "mktree"],
        cwd=repo.path,
        input="".join(f"{entry}\n" for entry in entries),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return git(repo.path, "commit-tree", "-m", "made by hand", tree)


def blob(repo: Repo, text: str) -> str:
    done = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        cwd=repo.path,
        input=text.encode(),
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip()


def fresh_repository(repo: Repo, dest: Path, commit: str) -> Path:
    """What the workspace makes before it checks out: ``.git`` only, objects borrowed."""
    workspace._init_repository(dest / ".git", "main")
    objects = (repo.path / ".git" / "objects").resolve()
    (dest / ".git" / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    workspace._write_refs(dest / ".git", {"main": commit})
    return dest
