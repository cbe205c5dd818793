"""``.git/index`` as ``git checkout`` writes it for a fresh checkout (git's ``gitformat-index``).

Version 2: ``DIRC``, the version and the number of entries (4 bytes each,
big-endian), then the entries sorted by path bytes, then the cache tree
extension, then the SHA-1 of everything before it. An entry is ten 32-bit
numbers from ``lstat`` of the file written (ctime and mtime as seconds and
nanoseconds, device, inode, mode, uid, gid, size; each cut to its low 32
bits, as git stores them), the blob's name (20 bytes), 16 bits of flags
(stage 0, the path's length up to 0xFFF) and the path, then 1 to 8 NUL
bytes up to a multiple of 8. The mode is git's, not the file's:
``100644``, ``100755`` or ``120000``.

The cache tree (``TREE``: its size, then per tree, depth first from the
root: its path component, NUL, ``<entries below> <subtrees>\\n``, its
name) tells later commands which trees the index already matches; git
lists a tree's subtrees by name length first, then by name. With it the
file is byte for byte what git writes, apart from the stat data.

Stat data equal to the file's makes ``git status`` and ``git diff-index``
see a clean tree without reading the files; the index is written after the
files, so entries of the same instant are "racily clean" to git, which then
compares their content once, as after its own checkouts.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workers.executor.recycle import write_over

SIGNATURE = b"DIRC"
VERSION = 2
# ctime s, ns, mtime s, ns, dev, ino, mode, uid, gid, size; name; flags
ENTRY = struct.Struct(">10I20sH")
NAME_LENGTH_MAX = 0xFFF
LOW_32 = 0xFFFFFFFF
NS = 1_000_000_000
# NUL bytes after an entry's path, by the entry's length modulo 8: at least one
PADDING = tuple(b"\0" * (8 - rest) for rest in range(8))


@dataclass(frozen=True)
class IndexEntry:
    """One file of the checkout: its path (``/``-separated bytes), git mode, blob, stat."""

    path: bytes
    mode: int
    sha: bytes
    stat: os.stat_result


@dataclass
class CacheTree:
    """A tree of the checkout: its name in its parent, its object name, what is below it."""

    name: bytes
    sha: bytes
    entry_count: int = 0  # index entries below it, at any depth
    subtrees: list[CacheTree] = field(default_factory=list)


def index_bytes(entries: Iterable[IndexEntry], tree: CacheTree) -> bytes:
    """The index file of ``entries`` (any order; paths unique) whose root tree is ``tree``."""
    ordered = sorted(entries, key=lambda entry: entry.path)
    parts = [SIGNATURE, struct.pack(">II", VERSION, len(ordered))]
    parts += [_entry(entry) for entry in ordered]
    extension = b"".join(_cache_tree(tree, []))
    parts += [b"TREE", struct.pack(">I", len(extension)), extension]
    body = b"".join(parts)
    return body + hashlib.sha1(body, usedforsecurity=False).digest()


def write_index(path: Path, entries: Sequence[IndexEntry], tree: CacheTree) -> None:
    """Write the index file (a fresh repository's: no lock, nobody else reads it yet).

    Written over in place in a recycled workspace (:mod:`workers.executor.recycle`).
    """
    write_over(path, index_bytes(entries, tree))


def _entry(entry: IndexEntry) -> bytes:
    stat, path = entry.stat, entry.path
    ctime, mtime = stat.st_ctime_ns, stat.st_mtime_ns
    head = ENTRY.pack(
        ctime // NS & LOW_32,
        ctime % NS,
        mtime // NS & LOW_32,
        mtime % NS,
        stat.st_dev & LOW_32,
        stat.st_ino & LOW_32,
        entry.mode,
        stat.st_uid & LOW_32,
        stat.st_gid & LOW_32,
        stat.st_size & LOW_32,
        entry.sha,
        min(len(path), NAME_LENGTH_MAX),  # the flags: stage 0, the name's length
    )
    return head + path + PADDING[(ENTRY.size + len(path)) % 8]


def _cache_tree(tree: CacheTree, parts: list[bytes]) -> list[bytes]:
    parts.append(b"%s\0%d %d\n%s" % (tree.name, tree.entry_count, len(tree.subtrees), tree.sha))
    for subtree in sorted(tree.subtrees, key=lambda sub: (len(sub.name), sub.name)):
        _cache_tree(subtree, parts)
    return parts
