"""Git's object formats read in Python, for every worker that reads a repository.

* :func:`parse_commit`: a commit's tree, parents and committer time (what
  ``git show --format=%ct`` prints);
* :func:`parse_tree`: a tree's entries with their modes canonical, as git
  compares them;
* :func:`loose_object_kind`: the type of a loose object, from its file
  (no process at all); :func:`freshen_loose_objects` makes loose objects
  young, as git does.

Each answers exactly as git does, or not at all: a malformed object, a
tree out of git's order gives None, and the caller asks git. The merger
reads objects through its cat-file process (:mod:`workers.merger.objects`),
the executor from the files of the merger's cache
(:mod:`workers.executor.treecheckout`, :mod:`workers.executor.workspace`).
"""

from __future__ import annotations

import contextlib
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

# Modes as git canonicalizes them when it reads a tree (cache.h canon_mode).
_S_IFMT = 0o170000
_S_IFDIR = 0o040000
_S_IFREG = 0o100000
_S_IFLNK = 0o120000
_S_IFGITLINK = 0o160000

_SHA = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
# "committer <name> <<email>> <seconds> <zone>": %ct prints <seconds>, the
# digits after the first ">" that follows the first "<" (ident.c).
_IDENT_DATE = re.compile(rb" ([0-9]{1,18}) [+-][0-9]{4}")

_LOOSE_HEADER = re.compile(rb"(blob|tree|commit|tag) [0-9]+\0")


@dataclass(frozen=True)
class Commit:
    sha: str
    tree: str
    parents: tuple[str, ...]
    # committer time (seconds); None where git's %ct would print anything odd
    time: int | None


class TreeEntry(NamedTuple):
    mode: int  # canonical, as git compares them
    name: bytes
    sha: str

    @property
    def is_tree(self) -> bool:
        return self.mode == _S_IFDIR

    @property
    def is_gitlink(self) -> bool:
        return self.mode == _S_IFGITLINK


def parse_commit(sha: str, data: bytes) -> Commit | None:
    """A commit object's header; None if git would read it otherwise."""
    lines = data.partition(b"\n\n")[0].split(b"\n")
    if not lines[0].startswith(b"tree ") or not _SHA.fullmatch(lines[0][5:]):
        return None
    parents: list[str] = []
    for line in lines[1:]:
        if not line.startswith(b"parent "):
            break
        if not _SHA.fullmatch(line[7:]):
            return None
        parents.append(line[7:].decode())
    committers = [line for line in lines if line.startswith(b"committer ")]
    time = _ident_time(committers[0]) if len(committers) == 1 else None
    return Commit(sha, lines[0][5:].decode(), tuple(parents), time)


def _ident_time(ident: bytes) -> int | None:
    """The seconds of ``<name> <<email>> <seconds> <zone>``; None unless in that form."""
    mail = ident.find(b"<")
    mail_end = ident.find(b">", mail + 1) if mail >= 0 else -1
    found = _IDENT_DATE.fullmatch(ident, mail_end + 1) if mail_end >= 0 else None
    return int(found.group(1)) if found is not None else None


def parse_tree(data: bytes, raw_sha: int) -> list[TreeEntry] | None:
    """A tree object's entries; None if malformed or not in git's order."""
    entries: list[TreeEntry] = []
    pos = 0
    previous = b""
    try:
        while pos < len(data):
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            end = nul + 1 + raw_sha
            mode, name = data[pos:space], data[space + 1 : nul]
            if end > len(data) or not mode.isdigit() or not name or b"/" in name:
                return None
            entry = TreeEntry(_canon_mode(int(mode, 8)), name, data[nul + 1 : end].hex())
            key = name + b"/" if entry.is_tree else name
            if key <= previous:
                return None
            entries.append(entry)
            previous = key
            pos = end
    except ValueError:
        return None
    return entries


def loose_object_kind(objects: Path, sha: str) -> str | None:
    """The type of the loose object ``sha`` under the ``objects`` folder; None if not
    loose (or not plain).

    A loose object is a zlib stream that starts ``<type> <size>\\0``; the
    start is all ``cat-file --batch-check`` reads of it too.
    """
    try:
        with open(objects / sha[:2] / sha[2:], "rb") as f:
            raw = f.read(256)
        header = zlib.decompressobj().decompress(raw, 32)
    except (OSError, zlib.error):
        return None
    found = _LOOSE_HEADER.match(header)
    return found.group(1).decode() if found is not None else None


def freshen_loose_objects(objects: Path, shas: Iterable[str]) -> None:
    """Make loose objects young again, as git does when it would write them anew.

    A merge may hand out a commit it did not write (a memo hit, a change
    on its tip already here); once the job's refs are dropped, only its
    age keeps it from ``gc`` while a build borrows it. A packed object (its
    pack's age counts) or a missing one is left as it is.
    """
    for sha in shas:
        if _SHA.fullmatch(sha.encode()):
            with contextlib.suppress(OSError):
                os.utime(objects / sha[:2] / sha[2:])


def _canon_mode(mode: int) -> int:
    kind = mode & _S_IFMT
    if kind == _S_IFREG:
        return _S_IFREG | (0o755 if mode & 0o100 else 0o644)
    if kind in (_S_IFLNK, _S_IFDIR):
        return kind
    return _S_IFGITLINK
