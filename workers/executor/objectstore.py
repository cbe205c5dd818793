"""Git objects read in-process from one ``objects`` folder: loose, or packed and deltified.

The in-process checkout (:mod:`workers.executor.treecheckout`) reads a
commit, its trees and its blobs here instead of starting ``git checkout``.
An object is looked for in the packs of version 2 indexes listed by
:func:`workers.executor.packindex.indexes` (first the pack that held the
last object found), then loose (``objects/xx/yyyy``: a zlib stream of
``<type> <size>\\0`` and the content), as git looks: most objects of a
cache are packed. The caller makes sure the repository uses SHA-1.

A pack entry (git's ``gitformat-pack``) starts with its type (bits 4-6 of
the first byte) and its inflated size (the low 4 bits of that byte, then
7 bits a byte while the high bit is set); the zlib stream of the content
follows. A delta has its base before the stream: ``OFS_DELTA`` as a
distance back in the same pack (7 bits a byte, each continuation adding
one before the shift), ``REF_DELTA`` as a name, looked up in the same pack
as git does. The delta itself is two sizes (base, result; 7 bits a byte,
little-endian) and instructions: with the high bit set, copy a range of
the base (bits 0-3 say which offset bytes follow, bits 4-6 which size
bytes; a size of 0 means 0x10000), otherwise insert the next 1-127 bytes.
Bases may be deltas themselves: the chain is followed down to a whole
object and the deltas applied on the way up. The objects met on the way
are kept for the store's life (:data:`BASE_CACHE_BYTES` at most): files
that changed a little in each commit share their chains.

Commits, trees and whatever a delta made are checked against their names
(the SHA-1 of header and content); a blob stored whole is covered by its
stream's checksum, as git relies on when it checks out (hashing a file
costs about half as much as inflating it). A failure raises
:class:`~workers.executor.errors.ObjectReadError`: an object found nowhere
(the source's own alternates are not followed; a ``gc`` may have moved it
since the packs were listed, so a miss lists them once more first), a
truncated or corrupt stream, a bad delta, an unknown type, a name that
does not match. The caller leaves the work to git.

Packs are opened once per store and checked against their index
(:class:`workers.executor.packindex.OpenPacks`); an open pack stays
readable if a repack deletes it meanwhile. The parsed indexes are the only
cache that outlives a store (packindex's, per process): opening the packs
again costs a few microseconds a checkout.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from workers.executor import packindex
from workers.executor.errors import ObjectReadError
from workers.executor.packindex import HASH_SIZE, PACK_HEADER_SIZE, OpenPacks, PackIndex

OBJ_COMMIT = 1
OBJ_TREE = 2
OBJ_BLOB = 3
OBJ_TAG = 4
OFS_DELTA = 6
REF_DELTA = 7
TYPE_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob", OBJ_TAG: b"tag"}
TYPE_NUMBERS = {name: number for number, name in TYPE_NAMES.items()}
# An entry's header: up to 10 bytes of type and size (64 bits), then up to
# 10 bytes of distance or a 20-byte name.
ENTRY_HEADER_MAX = 32
# Longer chains are refused (git's repack makes them 50 deep at most by default).
MAX_CHAIN = 10_000
BASE_CACHE_BYTES = 32 << 20
READ_SIZE = 1 << 20  # pack bytes read at a time for larger objects
SMALL_OBJECT = 64 * 1024  # inflated in one call from one read
OBJECT_SIZE_MAX = 1 << 40


class ObjectStore:
    """The objects under one ``objects`` folder; close it (or use ``with``) when done."""

    def __init__(self, objects: Path, size_max: int = OBJECT_SIZE_MAX) -> None:
        self.objects = objects
        self.size_max = size_max  # larger objects are not read: an error
        self._folder = os.fsencode(objects)
        self._packs = OpenPacks()
        self._indexes: list[PackIndex] | None = None
        self._listed_again = False
        # (pack, offset) -> type, content, whether a delta made it
        self._bases: dict[tuple[str, int], tuple[int, bytes, bool]] = {}
        self._base_bytes = 0

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._packs.close()
        self._bases.clear()

    def read(self, name: bytes, expected: int) -> bytes:
        """The content of the object ``name`` (20 bytes), which must be of type ``expected``.

        Checked against its name unless it is a blob stored whole (zlib's
        checksum covers it, as git relies on when it checks out).
        """
        found = self._packed(name)  # packs first, as git looks: most objects are packed
        if found is None:
            found = self._loose(name)
        if found is None and not self._listed_again:
            self._listed_again = True  # a repack may have moved it to a new pack
            self._indexes = None
            found = self._packed(name)
        if found is None:
            raise ObjectReadError(f"{name.hex()}: no such object")
        kind, data, from_delta = found
        if kind != expected:
            wanted = TYPE_NAMES.get(expected, b"?").decode()
            raise ObjectReadError(f"{name.hex()}: type {kind}, not a {wanted}")
        if from_delta or kind != OBJ_BLOB:
            digest = hashlib.sha1(b"%s %d\0" % (TYPE_NAMES[kind], len(data)), usedforsecurity=False)
            digest.update(data)
            if digest.digest() != name:
                raise ObjectReadError(f"{name.hex()}: content does not match the name")
        return data

    def _loose(self, name: bytes) -> tuple[int, bytes, bool] | None:
        hex_name = name.hex().encode()
        path = b"%s/%s/%s" % (self._folder, hex_name[:2], hex_name[2:])
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ObjectReadError(f"{name.hex()}: {exc}") from None
        stream = zlib.decompressobj()
        try:
            data = stream.decompress(raw, self.size_max + 64)  # (64: the header's room)
        except zlib.error as exc:
            raise ObjectReadError(f"{name.hex()}: loose object: {exc}") from None
        if not stream.eof:
            raise ObjectReadError(f"{name.hex()}: loose object cut short or too large")
        header, _, content = data.partition(b"\0")
        kind_name, _, size = header.partition(b" ")
        kind = TYPE_NUMBERS.get(kind_name)
        if kind is None or not size.isdigit() or int(size) != len(content):
            raise ObjectReadError(f"{name.hex()}: loose object with a bad header")
        if len(content) > self.size_max:
            raise ObjectReadError(f"{name.hex()}: loose object larger than wanted")
        return kind, content, False

    def _packed(self, name: bytes) -> tuple[int, bytes, bool] | None:
        if self._indexes is None:
            self._indexes = packindex.indexes(self.objects / "pack")
        for position, index in enumerate(self._indexes):
            offset = index.offset(name)
            if offset is None:
                continue
            pack = self._packs.open(index)
            if pack is not None:  # else removed by a repack: maybe in another pack
                if position:  # the objects of a tree are mostly in one pack: ask it first
                    self._indexes.insert(0, self._indexes.pop(position))
                return self._resolve(index, pack, offset)
        return None

    def _resolve(
        self, index: PackIndex, pack: tuple[int, int], offset: int
    ) -> tuple[int, bytes, bool]:
        """The entry at ``offset``, its delta chain followed to a whole object and applied;
        whether it was a delta."""
        fd, size = pack
        end = size - HASH_SIZE
        deltas: list[tuple[int, bytes]] = []  # (offset, delta), the entry wanted first
        seen: set[int] = set()
        while (cached := self._bases.get((index.pack, offset))) is None:
            if offset in seen or len(seen) > MAX_CHAIN:
                raise ObjectReadError(f"{index.pack}: a delta chain loops or is too long")
            seen.add(offset)
            kind, inflated, start, base = _entry_header(index, fd, offset, end)
            if inflated > self.size_max:
                raise ObjectReadError(f"{index.pack}: entry at {offset} larger than wanted")
            body = _inflate(fd, start, inflated, end)
            if base is None:
                cached = (kind, body, False)
                if deltas:  # the whole object a chain ends at: a base of others too
                    self._keep((index.pack, offset), cached)
                break
            deltas.append((offset, body))
            offset = base
        kind, data, from_delta = cached
        for position in range(len(deltas) - 1, -1, -1):
            delta_offset, delta = deltas[position]
            data = apply_delta(data, delta, self.size_max)
            if position:  # a base of the entry wanted
                self._keep((index.pack, delta_offset), (kind, data, True))
        return kind, data, from_delta or bool(deltas)

    def _keep(self, key: tuple[str, int], entry: tuple[int, bytes, bool]) -> None:
        size = len(entry[1])
        if size > BASE_CACHE_BYTES // 4:
            return
        if self._base_bytes + size > BASE_CACHE_BYTES:
            self._bases.clear()
            self._base_bytes = 0
        self._bases[key] = entry
        self._base_bytes += size


def readable_commits(objects: Path, commits: Iterable[str]) -> bool:
    """Whether each of ``commits`` (40 hex digits) reads as a commit under ``objects``.

    For commits stored as deltas (git deltifies look-alike commits against
    each other when it packs): each is rebuilt and checked against its
    name. False as soon as one cannot be (the caller asks git).
    """
    try:
        with ObjectStore(objects) as store:
            for commit in commits:
                store.read(bytes.fromhex(commit), OBJ_COMMIT)
    except (ObjectReadError, ValueError):
        return False
    return True


def _entry_header(
    index: PackIndex, fd: int, offset: int, end: int
) -> tuple[int, int, int, int | None]:
    """A pack entry's type, inflated size, where its stream starts, and its base's offset."""
    if not PACK_HEADER_SIZE <= offset < end:
        raise ObjectReadError(f"{index.pack}: an entry at {offset}, outside the pack")
    try:
        head = os.pread(fd, min(ENTRY_HEADER_MAX, end - offset), offset)
        byte = head[0]
        kind, size, shift, position = (byte >> 4) & 7, byte & 0x0F, 4, 1
        while byte & 0x80:
            byte = head[position]
            size |= (byte & 0x7F) << shift
            shift, position = shift + 7, position + 1
        base, position = _base(index, head, kind, offset, position)
    except (OSError, IndexError) as exc:
        raise ObjectReadError(f"{index.pack}: entry at {offset}: {exc}") from None
    if (base is None and kind not in TYPE_NAMES) or size > OBJECT_SIZE_MAX:
        raise ObjectReadError(f"{index.pack}: entry at {offset} of type {kind}")
    return kind, size, offset + position, base


def _base(
    index: PackIndex, head: bytes, kind: int, offset: int, position: int
) -> tuple[int | None, int]:
    """Where a delta's base starts in the pack (None: no delta), and where the stream does."""
    if kind == OFS_DELTA:
        byte = head[position]
        distance, position = byte & 0x7F, position + 1
        while byte & 0x80:
            byte = head[position]
            distance, position = ((distance + 1) << 7) | (byte & 0x7F), position + 1
        base: int | None = offset - distance
        if not PACK_HEADER_SIZE <= offset - distance < offset:
            raise ObjectReadError(f"{index.pack}: entry at {offset} has its base at {base}")
        return base, position
    if kind == REF_DELTA:  # the base may follow (a thin pack completed by index-pack)
        name = head[position : position + HASH_SIZE]
        base = index.offset(name) if len(name) == HASH_SIZE else None
        if base is None:
            raise ObjectReadError(f"{index.pack}: a delta's base is not in its pack")
        return base, position + HASH_SIZE
    return None, position


def _inflate(fd: int, start: int, size: int, end: int) -> bytes:
    """The zlib stream at ``start``, which must inflate to exactly ``size`` bytes."""
    try:
        # zlib adds a few bytes to any content (5 a block of 64 KiB stored as it is)
        chunk = os.pread(fd, min(size + 64, READ_SIZE, end - start), start)
        if size <= SMALL_OBJECT:  # all of the stream is in the chunk: inflated at once
            data = zlib.decompress(chunk, bufsize=max(size, 1))
        else:
            data = _inflate_stream(fd, chunk, start, size, end)
    except (OSError, zlib.error) as exc:
        raise ObjectReadError(f"pack entry at {start}: {exc}") from None
    if len(data) != size:
        raise ObjectReadError(f"pack entry at {start}: {len(data)} bytes, not {size}")
    return data


def _inflate_stream(fd: int, chunk: bytes, start: int, size: int, end: int) -> bytes:
    """A larger object's stream, read :data:`READ_SIZE` at a time, ``chunk`` first."""
    stream = zlib.decompressobj()
    parts: list[bytes] = []
    inflated, position = 0, start + len(chunk)
    while True:
        if not chunk:
            raise ObjectReadError(f"pack entry at {start}: stream cut short")
        part = stream.decompress(chunk, size + 1 - inflated)  # never more than one too many
        inflated += len(part)
        parts.append(part)
        if inflated > size or stream.eof:
            return b"".join(parts)
        chunk = os.pread(fd, min(READ_SIZE, end - position), position) if position < end else b""
        position += len(chunk)


def _delta_size(delta: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = delta[position]
        value |= (byte & 0x7F) << shift
        shift, position = shift + 7, position + 1
        if not byte & 0x80:
            return value, position


def _copy_range(delta: bytes, op: int, position: int) -> tuple[int, int, int]:
    """A copy instruction's offset and size: the bytes present are those ``op``'s bits name.

    Bits 0-3 say which of the offset's four little-endian bytes follow,
    bits 4-6 which of the size's three; a size of 0 means 0x10000.
    """
    values = [0, 0]
    for bit in range(7):
        if op & (1 << bit):
            field, byte = (0, bit) if bit < 4 else (1, bit - 4)
            values[field] |= delta[position] << (8 * byte)
            position += 1
    return values[0], values[1] or 0x10000, position


def apply_delta(base: bytes, delta: bytes, size_max: int = OBJECT_SIZE_MAX) -> bytes:
    """``delta`` applied to ``base``; :class:`ObjectReadError` if it does not fit, or would
    make more than ``size_max`` bytes."""
    try:
        base_size, position = _delta_size(delta, 0)
        result_size, position = _delta_size(delta, position)
        if base_size != len(base):
            raise ObjectReadError(f"a delta for a base of {base_size} bytes, not {len(base)}")
        if result_size > size_max:
            raise ObjectReadError(f"a delta would make {result_size} bytes")
        source, delta_size = memoryview(base), len(delta)
        parts: list[bytes | memoryview] = []
        while position < delta_size:
            op = delta[position]
            position += 1
            if op & 0x80:  # copy from the base
                start, length, position = _copy_range(delta, op, position)
                if start + length > base_size:
                    raise ObjectReadError("a delta copies past the end of its base")
                parts.append(source[start : start + length])
            elif op:  # insert the next op bytes
                parts.append(delta[position : position + op])
                position += op
            else:
                raise ObjectReadError("a delta with the reserved instruction 0")
    except IndexError:
        raise ObjectReadError("a delta cut short") from None
    result = b"".join(parts)
    if len(result) != result_size or position != delta_size:
        raise ObjectReadError(f"a delta made {len(result)} bytes, not {result_size}")
    return result
