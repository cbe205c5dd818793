"""Whole commits found in a repository's packs, in-process (no git process).

A checkout asks whether every commit of the repo state is in the source
(:func:`workers.executor.workspace.stored_commits`). Loose objects answer
by their header; most commits of a real repository are in packs, which
this module reads: a pack's index (``objects/pack/pack-*.idx``, version 2)
lists its objects' names sorted, after a fan-out table of 256 counts, and
each one's offset in the ``.pack`` (4 bytes, or with the high bit set an
index into a table of 8-byte offsets); the first byte of the entry at that
offset holds the object's type in bits 4-6 (git's ``pack-format.txt``).

Only a sure yes counts: :func:`packed_commits` is True when each commit
is a whole (not deltified) commit in some pack. An object that is absent,
another type, stored as a delta (``OFS_DELTA``, ``REF_DELTA``: its type is
its base's), an index of another version, a pack that does not match its
index or cannot be read, all give False, and the caller asks git (which
also reads alternates, and the SHA-256 repositories this reader leaves
alone: the caller checks the object format).

An index is mapped (``mmap``), never read whole, and parsed once per
process: the cache is keyed by path, inode, mtime and size (a pack and its
index never change; a repack writes new files), keeps at most
:data:`CACHE_SIZE` of them, and forgets those a repack removed. A pack is
opened only to check that it is the index's (header, object count,
trailing checksum) and to read single bytes; the open files are closed
when the lookup ends.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

IDX_MAGIC = b"\xfftOc"
IDX_VERSION = 2
PACK_MAGIC = b"PACK"
PACK_VERSIONS = (2, 3)
HASH_SIZE = 20  # SHA-1
HEADER_SIZE = 8  # magic, version
FANOUT_SIZE = 256 * 4
TRAILER_SIZE = 2 * HASH_SIZE  # the pack's checksum, the index's own
PACK_HEADER_SIZE = 12  # magic, version, object count
LARGE_OFFSET = 0x80000000
OBJ_COMMIT = 1
CACHE_SIZE = 64
SHA1_HEX = re.compile("[0-9a-f]{40}")


@dataclass(frozen=True, eq=False)
class PackIndex:
    """One version 2 pack index, mapped read-only (see :func:`load`)."""

    path: str
    data: mmap.mmap
    fanout: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.fanout[255]

    @property
    def pack(self) -> str:
        return self.path.removesuffix(".idx") + ".pack"

    @property
    def pack_checksum(self) -> bytes:
        end = len(self.data) - HASH_SIZE
        return self.data[end - HASH_SIZE : end]

    def offset(self, name: bytes) -> int | None:
        """Where the object ``name`` (20 bytes) starts in the pack; None when not listed."""
        first = name[0]
        low = self.fanout[first - 1] if first else 0
        high = self.fanout[first]
        names = HEADER_SIZE + FANOUT_SIZE
        data = self.data
        while low < high:
            middle = (low + high) // 2
            start = names + middle * HASH_SIZE
            candidate = data[start : start + HASH_SIZE]
            if candidate < name:
                low = middle + 1
            elif candidate > name:
                high = middle
            else:
                return self._offset_at(middle)
        return None

    def _offset_at(self, position: int) -> int | None:
        offsets = HEADER_SIZE + FANOUT_SIZE + self.count * (HASH_SIZE + 4)
        (value,) = struct.unpack_from(">I", self.data, offsets + 4 * position)
        if not value & LARGE_OFFSET:
            return int(value)
        start = offsets + 4 * self.count + 8 * (value & ~LARGE_OFFSET)
        if start + 8 > len(self.data) - TRAILER_SIZE:
            return None
        (large,) = struct.unpack_from(">Q", self.data, start)
        return int(large)


def load(path: str) -> PackIndex | None:
    """``path`` mapped and checked (a version 2 index of SHA-1 names); None otherwise."""
    try:
        with open(path, "rb") as handle:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses 0 bytes)
        return None
    fanout = _fanout(data)
    if fanout is None:
        data.close()
        return None
    return PackIndex(path, data, fanout)


def _fanout(data: mmap.mmap) -> tuple[int, ...] | None:
    """The fan-out table of a version 2 index whose size fits its count; None otherwise."""
    size = len(data)
    if size < HEADER_SIZE + FANOUT_SIZE + TRAILER_SIZE or data[:4] != IDX_MAGIC:
        return None
    if struct.unpack_from(">I", data, 4)[0] != IDX_VERSION:
        return None
    fanout: tuple[int, ...] = struct.unpack_from(">256I", data, HEADER_SIZE)
    if any(a > b for a, b in pairwise(fanout)):
        return None
    # names, CRCs and 4-byte offsets per object, then the 8-byte offsets
    large = size - HEADER_SIZE - FANOUT_SIZE - TRAILER_SIZE - fanout[255] * (HASH_SIZE + 8)
    if large < 0 or large % 8 or large // 8 > max(fanout[255] - 1, 0):  # git's own bound
        return None
    return fanout


_cache: OrderedDict[tuple[str, int, int, int], PackIndex | None] = OrderedDict()
_cache_lock = threading.Lock()


def _key(path: str, stat: os.stat_result) -> tuple[str, int, int, int]:
    return (path, stat.st_ino, stat.st_mtime_ns, stat.st_size)


def cached(path: str, stat: os.stat_result) -> PackIndex | None:
    """:func:`load` once per version of the file (path, inode, mtime, size), LRU-bounded."""
    key = _key(path, stat)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    index = load(path)
    if index is not None and len(index.data) != stat.st_size:
        return index  # replaced between the stat and the open: used once, not kept
    with _cache_lock:
        _cache[key] = index
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)  # a mapping still in use stays valid
    return index


def indexes(pack_dir: Path) -> list[PackIndex]:
    """The readable version 2 indexes in ``pack_dir`` (newest first, as git orders packs).

    Indexes of this folder that are gone (a repack removed them) leave the
    cache, so that their mappings do not keep deleted files on disk.
    """
    found = []
    try:
        with os.scandir(pack_dir) as entries:
            for entry in entries:
                if entry.name.endswith(".idx") and entry.is_file(follow_symlinks=False):
                    found.append((entry.stat(follow_symlinks=False), entry.path))
    except OSError:
        return []
    _forget_gone(f"{pack_dir}{os.sep}", {_key(path, stat) for stat, path in found})
    found.sort(key=lambda pair: pair[0].st_mtime_ns, reverse=True)
    return [index for stat, path in found if (index := cached(path, stat)) is not None]


def _forget_gone(folder: str, present: set[tuple[str, int, int, int]]) -> None:
    with _cache_lock:
        for key in [k for k in _cache if k[0].startswith(folder) and k not in present]:
            del _cache[key]


class OpenPacks:
    """The packs opened during one lookup: each checked against its index once.

    Also the pack reader's (:mod:`workers.executor.objectstore`): an open
    pack stays readable if a repack deletes it meanwhile.
    """

    def __init__(self) -> None:
        self.opened: dict[str, tuple[int, int] | None] = {}

    def object_type(self, index: PackIndex, name: bytes) -> int | None:
        """The type of ``name``'s entry in ``index``'s pack (6, 7: a delta); None if absent."""
        offset = index.offset(name)
        if offset is None:
            return None
        pack = self.open(index)
        if pack is None:
            return None
        fd, size = pack
        if not PACK_HEADER_SIZE <= offset < size - HASH_SIZE:
            return None
        try:
            first = os.pread(fd, 1, offset)
        except OSError:
            return None
        return (first[0] >> 4) & 7 if first else None

    def open(self, index: PackIndex) -> tuple[int, int] | None:
        """``index``'s pack: its descriptor and size; None unless it is the index's pack."""
        pack = index.pack
        if pack in self.opened:
            return self.opened[pack]
        self.opened[pack] = None
        try:
            fd = os.open(pack, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # removed by a repack since the listing
            return None
        try:
            size = os.fstat(fd).st_size
            header = os.pread(fd, PACK_HEADER_SIZE, 0)
            checksum = os.pread(fd, HASH_SIZE, size - HASH_SIZE) if size >= HASH_SIZE else b""
        except OSError:
            os.close(fd)
            return None
        magic, version, count = struct.unpack(">4sII", header.ljust(PACK_HEADER_SIZE, b"\0"))
        matches = magic == PACK_MAGIC and version in PACK_VERSIONS and count == index.count
        if not matches or checksum != index.pack_checksum:
            os.close(fd)
            return None
        self.opened[pack] = (fd, size)
        return self.opened[pack]

    def close(self) -> None:
        for pack in self.opened.values():
            if pack is not None:
                os.close(pack[0])
        self.opened.clear()


@contextmanager
def _packs() -> Iterator[OpenPacks]:
    packs = OpenPacks()
    try:
        yield packs
    finally:
        packs.close()


def packed_commits(objects: Path, commits: Iterable[str]) -> bool:
    """Whether each of ``commits`` (40 hex digits) is a whole commit in a pack under ``objects``.

    False as soon as one is not (absent, another type, a delta, unreadable):
    the caller asks git. The caller makes sure the repository uses SHA-1.
    """
    wanted = list(commits)
    if not wanted:
        return True
    listed = indexes(objects / "pack")
    if not listed:
        return False
    with _packs() as packs:
        for commit in wanted:
            if not SHA1_HEX.fullmatch(commit):
                return False
            name = bytes.fromhex(commit)
            if not any(packs.object_type(index, name) == OBJ_COMMIT for index in listed):
                return False
    return True
