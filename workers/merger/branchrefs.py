"""The branch heads (and other refs) of a bare cache repo, read from its files.

What ``git for-each-ref --format='%(objectname) %(refname)' refs/heads/``
prints, without a git process: the ``refs/heads/`` entries of
``packed-refs``, overridden by the loose ref files below ``refs/heads/``,
in refname (byte) order. Like for-each-ref, it does not look whether the
objects exist. :func:`read_refs` does the same for any prefix.

Only the plain form is read: a ``packed-refs`` that says it is sorted
(every git since 2.x writes it so; the lines of the prefix are found by
bisection, so thousands of packed job refs cost nothing), and loose refs
that are regular files holding one lowercase sha and a newline, named as
git would name a branch. Anything else (a symbolic ref, a broken or
hidden file, a ``*.lock`` left by a killed git, a name git would refuse,
a reftable repo, an unreadable file) returns None, and the caller asks
git, which decides as it always did.

The caller holds the repo's lock, so no git process of ours writes refs
meanwhile.
"""

from __future__ import annotations

import mmap
import os
import re
from pathlib import Path

from workers.merger.errors import InvalidJobError
from workers.merger.names import check_ref_name

HEADS = b"refs/heads/"
_LOOSE = re.compile(rb"([0-9a-f]{40}|[0-9a-f]{64})\n")
_PACKED = re.compile(rb"([0-9a-f]{40}|[0-9a-f]{64}) ([^ \n]+)")
_PACKED_HEADER = b"# pack-refs with:"


def read_heads(repo: Path) -> dict[str, str] | None:
    """Branch name -> sha, or None where git should be asked instead."""
    refs = read_refs(repo, HEADS)
    if refs is None:
        return None
    return {name[len(HEADS) :].decode("utf-8", "replace"): sha for name, sha in refs.items()}


def read_refs(repo: Path, prefix: bytes) -> dict[bytes, str] | None:
    """Refname -> sha of the refs under ``prefix`` (ending in ``/``), in refname order."""
    if (repo / "reftable").exists():
        return None
    try:
        packed = _packed_refs(repo / "packed-refs", prefix)
        loose = _loose_refs(repo / os.fsdecode(prefix), prefix)
    except (OSError, ValueError, InvalidJobError):
        return None
    if packed is None or loose is None:
        return None
    merged = {**packed, **loose}
    return {name: merged[name] for name in sorted(merged)}


def _loose_refs(folder: Path, prefix: bytes) -> dict[bytes, str] | None:
    refs: dict[bytes, str] = {}
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return refs
    for entry in entries:
        refname = prefix + os.fsencode(entry.name)
        check_ref_name(refname.decode(), "ref")  # InvalidJobError: git decides
        if entry.is_dir(follow_symlinks=False):
            below = _loose_refs(Path(entry.path), refname + b"/")
            if below is None:
                return None
            refs.update(below)
            continue
        if not entry.is_file(follow_symlinks=False):
            return None
        with open(entry.path, "rb") as f:
            content = f.read(100)
        if not _LOOSE.fullmatch(content):
            return None
        refs[refname] = content[:-1].decode()
    return refs


def _packed_refs(path: Path, prefix: bytes) -> dict[bytes, str] | None:
    try:
        f = open(path, "rb")  # noqa: SIM115 - mapped below, closed by the with
    except FileNotFoundError:
        return {}
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            return {}
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _refs_in(data, prefix)


def _refs_in(data: mmap.mmap, prefix: bytes) -> dict[bytes, str] | None:
    newline = data.find(b"\n")
    header_end = len(data) if newline < 0 else newline + 1
    header = data[:header_end]
    traits = header[len(_PACKED_HEADER) :].split()
    if not header.startswith(_PACKED_HEADER) or b"sorted" not in traits:
        return None  # an old git's unsorted file: ask git
    refs: dict[bytes, str] = {}
    pos = _first_record_at_or_after(data, header_end, prefix)
    while pos < len(data):
        end = data.find(b"\n", pos)
        line = data[pos : end if end >= 0 else len(data)]
        pos = len(data) if end < 0 else end + 1
        if line.startswith(b"^"):
            continue  # the peeled value of the ref before
        found = _PACKED.fullmatch(line)
        if found is None:
            return None  # git reads this line too, and would stop at it
        if not found.group(2).startswith(prefix):
            break  # sorted: none of the prefix after the first other ref
        refs[found.group(2)] = found.group(1).decode()
    return refs


def _first_record_at_or_after(data: mmap.mmap, lo: int, target: bytes) -> int:
    """Offset of the first ref line (from ``lo``) whose refname is >= ``target``."""
    hi = len(data)
    while lo < hi:
        record = _record_start(data, lo, (lo + hi) // 2)
        end = data.find(b"\n", record)
        line = data[record : end if end >= 0 else len(data)]
        if line.partition(b" ")[2] < target:
            lo = _next_record(data, record)
        else:
            hi = record
    return lo


def _record_start(data: mmap.mmap, lo: int, pos: int) -> int:
    """Start of the ref line holding ``pos`` (a peeled line belongs to the ref before)."""
    start = data.rfind(b"\n", lo, pos) + 1 or lo
    if start > lo and data[start : start + 1] == b"^":
        start = data.rfind(b"\n", lo, start - 1) + 1 or lo
    return max(start, lo)


def _next_record(data: mmap.mmap, record: int) -> int:
    pos = record
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return len(data)
        pos = end + 1
        if data[pos : pos + 1] != b"^":
            return pos
