"""Objects read in-process (workers/executor/objectstore.py) and the index written for them
(workers/executor/gitindex.py), against git's own answers."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
import zlib

import pytest

from tests.executor.helpers import Repo, git
from tests.executor.trees import OFS_DELTA, deltified, entry_type, rich_tree
from workers.executor.errors import ObjectReadError
from workers.executor.gitindex import CacheTree, IndexEntry, index_bytes
from workers.executor.objectstore import (
    OBJ_BLOB,
    OBJ_COMMIT,
    OBJ_TREE,
    TYPE_NUMBERS,
    ObjectStore,
    apply_delta,
)

# A stat result's nanosecond times (0 here), as ``os.lstat`` gives them.
NO_TIMES = {"st_atime_ns": 0, "st_mtime_ns": 0, "st_ctime_ns": 0}


def every_object(repo: Repo) -> dict[str, tuple[str, bytes]]:
    """name -> (type, content) of every object in the repository, as git reads them."""
    names = git(repo.path, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    answer = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=repo.path,
        input=names.encode() + b"\n",
        capture_output=True,
        check=True,
    ).stdout
    found, position = {}, 0
    while position < len(answer):
        header_end = answer.index(b"\n", position)
        name, kind, size = answer[position:header_end].decode().split()
        start = header_end + 1
        found[name] = (kind, answer[start : start + int(size)])
        position = start + int(size) + 1
    return found


@pytest.mark.parametrize("ref_delta", [False, True], ids=["ofs-delta", "ref-delta"])
def test_every_object_of_a_deltified_pack_is_gits(repo: Repo, ref_delta: bool) -> None:
    deltified(repo, ref_delta=ref_delta)
    objects = every_object(repo)

    with ObjectStore(repo.path / ".git" / "objects") as store:
        for name, (kind, content) in objects.items():
            assert store.read(bytes.fromhex(name), TYPE_NUMBERS[kind.encode()]) == content, name


def test_a_pack_written_after_the_listing_is_found(repo: Repo) -> None:
    first = rich_tree(repo)
    git(repo.path, "gc", "-q", "--prune=now")
    repo.write("later", "written after the store listed the packs\n")
    later = repo.commit()
    name = bytes.fromhex(git(repo.path, "rev-parse", f"{later}:later"))

    with ObjectStore(repo.path / ".git" / "objects") as store:
        store.read(bytes.fromhex(first), OBJ_COMMIT)  # the packs are listed
        git(repo.path, "repack", "-q", "-a", "-d")  # a new pack; the old one is deleted
        git(repo.path, "prune-packed")
        assert not list((repo.path / ".git" / "objects").glob("??/*"))
        assert store.read(name, OBJ_BLOB) == b"written after the store listed the packs\n"
        assert store.read(bytes.fromhex(later), OBJ_COMMIT).startswith(b"tree ")


@pytest.mark.parametrize("layout", ["loose", "whole", "delta"])
def test_objects_larger_than_wanted_are_an_error(repo: Repo, layout: str) -> None:
    commit = rich_tree(repo) if layout == "loose" else deltified(repo)
    if layout == "whole":  # the newest version of lines.txt: stored whole
        commit = git(repo.path, "rev-parse", "main")
    name = bytes.fromhex(git(repo.path, "rev-parse", f"{commit}:lines.txt"))
    if layout != "loose":
        assert entry_type(repo, name.hex()) == (OBJ_BLOB if layout == "whole" else OFS_DELTA)
    objects = repo.path / ".git" / "objects"
    with ObjectStore(objects) as store:
        size = len(store.read(name, OBJ_BLOB))

    with ObjectStore(objects, size_max=size - 1) as store, pytest.raises(ObjectReadError):
        store.read(name, OBJ_BLOB)


def test_what_is_missing_or_of_another_type_is_an_error(repo: Repo) -> None:
    commit = rich_tree(repo)
    tree = git(repo.path, "rev-parse", f"{commit}^{{tree}}")

    with ObjectStore(repo.path / ".git" / "objects") as store:
        with pytest.raises(ObjectReadError, match="no such object"):
            store.read(bytes(20), OBJ_BLOB)
        with pytest.raises(ObjectReadError, match="type 2, not a blob"):
            store.read(bytes.fromhex(tree), OBJ_BLOB)
        assert store.read(bytes.fromhex(tree), OBJ_TREE)


@pytest.mark.parametrize(
    "raw",
    [b"not zlib", zlib.compress(b"blob 5\0four"), zlib.compress(b"thing 4\0four")],
    ids=["not-zlib", "wrong-size", "unknown-type"],
)
def test_a_bad_loose_object_is_an_error(repo: Repo, raw: bytes) -> None:
    name = hashlib.sha1(b"blob 4\0four").hexdigest()
    path = repo.path / ".git" / "objects" / name[:2] / name[2:]
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)

    with ObjectStore(repo.path / ".git" / "objects") as store, pytest.raises(ObjectReadError):
        store.read(bytes.fromhex(name), OBJ_BLOB)


def size(value: int) -> bytes:
    """A delta's size: 7 bits a byte, least significant first."""
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def copy(offset: int, length: int) -> bytes:
    """A copy instruction with only its non-zero bytes present (a length of 0x10000: none)."""
    op, args = 0x80, bytearray()
    for value, first_bit, count in ((offset, 0, 4), (length % 0x10000, 4, 3)):
        for byte in range(count):
            if (value >> (8 * byte)) & 0xFF:
                op |= 1 << (first_bit + byte)
                args.append((value >> (8 * byte)) & 0xFF)
    return bytes([op]) + bytes(args)


def test_deltas_copy_and_insert() -> None:
    base = bytes(range(256)) * 600  # 153,600 bytes: offsets of 3 bytes, a copy of 0x10000
    delta = (
        size(len(base))
        + size(3 + 0x10000 + 10 + 1)
        + b"\x03new"
        + copy(0, 0x10000)
        + copy(0x012345, 10)
        + copy(255, 1)
    )
    expected = b"new" + base[:0x10000] + base[0x012345 : 0x012345 + 10] + base[255:256]

    assert apply_delta(base, delta) == expected


@pytest.mark.parametrize(
    "delta, message",
    [
        (size(9) + size(1) + copy(0, 1), "a base of 9 bytes"),
        (size(10) + size(4) + copy(8, 4), "past the end of its base"),
        (size(10) + size(2) + b"\x00", "reserved instruction"),
        (size(10) + size(3) + b"\x05ab", "made"),
        (size(10) + size(5) + copy(0, 4), "made 4 bytes, not 5"),
        (size(10) + size(5) + b"\x91", "cut short"),
        (b"\x80", "cut short"),
    ],
)
def test_a_bad_delta_is_an_error(delta: bytes, message: str) -> None:
    with pytest.raises(ObjectReadError, match=message):
        apply_delta(bytes(10), delta)


def test_a_long_path_is_written_as_git_writes_it(repo: Repo) -> None:
    """Flags cap the name's length at 0xFFF; padding as for any entry (git's own index)."""
    blob = hashlib.sha1(b"blob 0\0").hexdigest()
    paths = ["a" * 5000, "b" * 4094, "c" * 4095, "d", "e" * 9]
    info = "".join(f"100644 {blob}\t{path}\n" for path in paths)
    subprocess.run(
        ["git", "update-index", "--index-info"], cwd=repo.path, input=info.encode(), check=True
    )
    stat = os.stat_result((0o100644, 0, 0, 1, 0, 0, 0, 0, 0, 0), NO_TIMES)
    entries = [IndexEntry(path.encode(), 0o100644, bytes.fromhex(blob), stat) for path in paths]

    ours = index_bytes(entries, CacheTree(b"", bytes(20)))
    theirs = (repo.path / ".git" / "index").read_bytes()

    body = theirs[:-20]  # git's has no cache tree yet
    assert ours[: len(body)] == body
    assert struct.unpack(">H", ours[12 + 60 : 12 + 62])[0] == 0xFFF
    assert hashlib.sha1(ours[:-20]).digest() == ours[-20:]
