"""Sharded blobs: byte strings of any size up to a hard maximum, never half read.

Layout of a blob at ``path``:

* small data (up to :data:`INLINE_LIMIT`) sits in the node itself;
* larger data is cut into shards of :data:`SHARD_SIZE` bytes stored as
  children ``path/%shard-<generation>-<index>``, and the node holds a small
  pointer: :data:`POINTER_MAGIC` followed by JSON naming the generation,
  the shard count, the size and the sha256 of the whole.

``%shard-`` can never be produced by :func:`scheduler.zk.paths.segment`
(there a ``%`` is followed by upper-case hex digits or by the ``%`` of a
hash mark, never by ``s``), so shard children never collide with children
named after outside names.

Guarantees: shards are written first, each in its own request, and only
then the pointer (in the caller's transaction, so it can be fenced and
combined with other writes). A new write uses a new generation, so readers
of the previous pointer still find complete data until the old shards are
deleted after the commit; a reader that loses that race (a shard vanished
under it) re-reads the pointer and retries. A node whose data is empty is a
placeholder being written and reads as absent. Data over
:data:`MAX_BLOB_SIZE` raises :class:`~scheduler.zk.errors.DataTooLargeError`
before anything is written.

On SUSPENDED or LOST mid-write: shards already written are harmless
garbage (they belong to a generation no pointer names) and are removed by
the next successful write of the same blob or by deleting the blob; the
old pointer, and so the old data, stays intact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import Transaction
from scheduler.zk.errors import DataTooLargeError, DecodeError, NoDataError
from scheduler.zk.retry import TORN_READ

INLINE_LIMIT = 900_000
SHARD_SIZE = 900_000
# ZooKeeper keeps everything in memory: a hard ceiling of ~14 MB per blob.
MAX_SHARDS = 16
MAX_BLOB_SIZE = SHARD_SIZE * MAX_SHARDS
POINTER_MAGIC = b"#sluice-shards "
SHARD_PREFIX = "%shard-"


@dataclass(frozen=True)
class BlobRead:
    data: bytes
    version: int  # of the node at ``path`` (for compare-and-set)
    mzxid: int
    ctime: float  # seconds since the epoch


@dataclass
class PreparedBlob:
    """A blob whose shards are written; :meth:`add_to` commits its node in a transaction."""

    path: str
    node_data: bytes
    create: bool
    version: int
    generation: str | None  # of the shards just written; None when inline
    index: int = -1  # of the node's operation in the transaction

    def add_to(self, txn: Transaction) -> int:
        """Add the node's create or set to ``txn``; returns the operation's index."""
        if self.create:
            self.index = txn.create(self.path, self.node_data)
        else:
            self.index = txn.set(self.path, self.node_data, self.version)
        return self.index

    def cleanup(self, client: ZooKeeperClient, results: list[Any]) -> None:
        """After the commit: delete shards of earlier generations, if the node has any.

        The set's result (the node's stat) says whether there are children,
        so a write that replaced inline data costs no extra round trip.
        """
        if self.create or self.index < 0:
            return
        stat = results[self.index]
        if not getattr(stat, "numChildren", 0):
            return
        keep = None if self.generation is None else f"{SHARD_PREFIX}{self.generation}-"
        old = [
            paths.join(self.path, c)
            for c in client.get_children(self.path)
            if c.startswith(SHARD_PREFIX) and (keep is None or not c.startswith(keep))
        ]
        _delete_all(client, old)


def _shard_name(generation: str, index: int) -> str:
    return f"{SHARD_PREFIX}{generation}-{index:04d}"


def _delete_all(client: ZooKeeperClient, nodes: list[str]) -> None:
    pending = [client.kazoo.delete_async(n) for n in nodes]
    for result in pending:
        with contextlib.suppress(NoNodeError):  # someone else cleaned up already
            client.wait(result)


def check_size(data: bytes, path: str) -> None:
    if len(data) > MAX_BLOB_SIZE:
        raise DataTooLargeError(
            f"{path}: {len(data)} bytes can never be stored (maximum {MAX_BLOB_SIZE} bytes)"
        )


def prepare(
    client: ZooKeeperClient,
    path: str,
    data: bytes,
    *,
    exists: bool,
    version: int = -1,
    inline_limit: int = INLINE_LIMIT,
) -> PreparedBlob:
    """Write the shards of ``data`` (if it needs any); return what commits it.

    ``exists`` says whether the node at ``path`` exists already (``set``)
    or must be created. A sharded blob needs its node as the shards'
    parent, so a new one is first created as an empty placeholder.
    ``inline_limit`` lets a caller that writes several blobs in one
    transaction shard earlier, so the transaction stays under its limit.
    """
    check_size(data, path)
    if not data:
        raise DecodeError(f"{path}: refusing to store empty data (it marks a placeholder)")
    if len(data) <= min(inline_limit, INLINE_LIMIT):
        return PreparedBlob(path, data, not exists, version, None)
    if not exists:
        with contextlib.suppress(NodeExistsError):  # a placeholder from an earlier attempt
            client.create(path, b"", makepath=True)
    generation = uuid.uuid4().hex[:16]
    chunks = [data[i : i + SHARD_SIZE] for i in range(0, len(data), SHARD_SIZE)]
    pending = [
        client.kazoo.create_async(paths.join(path, _shard_name(generation, i)), chunk)
        for i, chunk in enumerate(chunks)
    ]
    for result in pending:
        client.wait(result)
    pointer = {
        "generation": generation,
        "count": len(chunks),
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    node_data = POINTER_MAGIC + json.dumps(pointer).encode()
    return PreparedBlob(path, node_data, False, version, generation)


def write(client: ZooKeeperClient, path: str, data: bytes, txn: Transaction) -> None:
    """Write a blob, creating or replacing it, with its node committed through ``txn``."""
    exists = client.exists(path) is not None
    prepared = prepare(client, path, data, exists=exists)
    prepared.add_to(txn)
    prepared.cleanup(client, txn.commit())


def read(client: ZooKeeperClient, path: str) -> BlobRead:
    """The whole blob; :class:`NoDataError` when absent or still a placeholder."""
    for _ in TORN_READ.tries():
        try:
            raw, stat = client.get(path)
        except NoNodeError:
            raise NoDataError(f"{path} does not exist") from None
        data = _assemble(client, path, raw)
        if data is not None:
            return BlobRead(data, stat.version, stat.mzxid, stat.ctime / 1000.0)
    raise DecodeError(f"{path}: shards keep changing under the reader")


def decode_pointer(path: str, raw: bytes) -> dict[str, object] | None:
    if not raw.startswith(POINTER_MAGIC):
        return None
    try:
        pointer = json.loads(raw[len(POINTER_MAGIC) :])
    except ValueError:
        raise DecodeError(f"{path}: corrupt shard pointer") from None
    if not isinstance(pointer, dict):
        raise DecodeError(f"{path}: corrupt shard pointer")
    return pointer


def _assemble(client: ZooKeeperClient, path: str, raw: bytes) -> bytes | None:
    """The blob's bytes, or None if a shard vanished (re-read the pointer)."""
    if not raw:
        raise NoDataError(f"{path} is still being written")
    pointer = decode_pointer(path, raw)
    if pointer is None:
        return raw
    generation = str(pointer["generation"])
    count = int(str(pointer["count"]))
    pending = [
        client.kazoo.get_async(paths.join(path, _shard_name(generation, i))) for i in range(count)
    ]
    chunks: list[bytes] = []
    missing = False
    for result in pending:
        try:
            chunks.append(client.wait(result)[0])
        except NoNodeError:  # a newer write replaced this generation
            missing = True
    if missing:
        return None
    data = b"".join(chunks)
    if hashlib.sha256(data).hexdigest() != pointer["sha256"]:
        raise DecodeError(f"{path}: shards do not match their pointer's checksum")
    return data


def delete_ops(client: ZooKeeperClient, path: str, txn: Transaction, version: int = -1) -> None:
    """Add the deletes of a blob (its shards, then the node) to ``txn``."""
    stat = client.exists(path)
    if stat is None:
        return
    if stat.numChildren:
        for child in client.get_children(path):
            txn.delete(paths.join(path, child))
    txn.delete(path, version)
