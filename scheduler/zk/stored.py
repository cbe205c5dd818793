"""Stored objects: JSON documents with a schema version, compressed and sharded as needed.

The persistence contract (Zuul's, kept small): an object is a JSON mapping
with a ``schema`` field; :func:`encode` adds it, :func:`decode` checks it.
Readers accept every schema up to :data:`SCHEMA_VERSION` (so workers of two
versions run side by side during an upgrade) and refuse a newer one with
:class:`~scheduler.zk.errors.DecodeError` rather than misread it.

Encoding: compact UTF-8 JSON; above :data:`COMPRESS_THRESHOLD` bytes it is
zlib-compressed (zlib streams start with ``0x78``, JSON with ``{``, so the
reader tells them apart without a header). The result is stored through
:mod:`scheduler.zk.sharding`, so an object of any size up to
:data:`~scheduler.zk.sharding.MAX_BLOB_SIZE` (after compression) round
trips, and a larger one fails at once with
:class:`~scheduler.zk.errors.DataTooLargeError`.

Writes go through a :class:`~scheduler.zk.context.LockContext`: they are
refused once its lock is lost, and fenced on the server. On SUSPENDED or
LOST see :mod:`scheduler.zk.sharding`: the previous version stays readable.

Schema changelog: see docs/zookeeper.md ("Schema versions").
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.exceptions import NoNodeError

from scheduler.zk import sharding
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import (
    MAX_TRANSACTION_BYTES,
    NO_NODE,
    LockContext,
    OpFailedError,
    Transaction,
)
from scheduler.zk.errors import DecodeError, NewerSchemaError, NoDataError

# The newest schema a reader accepts (docs/zookeeper.md, "Schema versions"):
# 1: initial layout (2026-11).
# 2: the pipeline document lists no queues, its ``queue`` child does (2026-11-27);
#    only pipeline documents are written with it (scheduler.state.codec).
# 3: a build request's params are the frozen job as frozen and its build's
#    context (2026-12); only those are written with it (scheduler.wire.build_spec).
SCHEMA_VERSION = 3
# what an object is written with unless its format needs a newer one
BASE_SCHEMA = 1
COMPRESS_THRESHOLD = 16 * 1024
SCHEMA_FIELD = "schema"


K = TypeVar("K")


def encode(obj: Mapping[str, Any], schema: int = BASE_SCHEMA) -> bytes:
    """The stored bytes of ``obj`` with its schema version (``obj``'s own ``schema``
    field, if it has one, wins)."""
    document = {SCHEMA_FIELD: schema, **obj}
    try:
        raw = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"object is not JSON-serialisable: {exc}") from None
    if len(raw) > COMPRESS_THRESHOLD:
        return zlib.compress(raw, 6)
    return raw


def decode(data: bytes, path: str = "<bytes>") -> dict[str, Any]:
    """The mapping stored in ``data``; :class:`DecodeError` naming ``path`` if it is not one."""
    try:
        if data[:1] == b"\x78":
            data = zlib.decompress(data)
        document = json.loads(data)
    except (ValueError, zlib.error) as exc:
        raise DecodeError(f"{path}: not a stored Sluice object ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get(SCHEMA_FIELD), int):
        raise DecodeError(f"{path}: stored object has no schema version")
    if document[SCHEMA_FIELD] > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{path}: written with schema {document[SCHEMA_FIELD]}, "
            f"this Sluice reads up to {SCHEMA_VERSION}"
        )
    return document


@dataclass(frozen=True)
class Stored:
    """An object as read: its fields (with ``schema``) and the node's version and mzxid."""

    data: dict[str, Any]
    version: int
    mzxid: int


def load(context: LockContext, path: str) -> Stored:
    """Read the object at ``path``; :class:`NoDataError` when there is none."""
    blob = sharding.read(context.client, path)
    return Stored(decode(blob.data, path), blob.version, blob.mzxid)


def prepare(
    context: LockContext,
    path: str,
    obj: Mapping[str, Any],
    *,
    exists: bool,
    version: int = -1,
    inline_limit: int = sharding.INLINE_LIMIT,
) -> sharding.PreparedBlob:
    """Encode ``obj`` and write any shards; the caller adds the node to its transaction."""
    return sharding.prepare(
        context.client,
        path,
        encode(obj),
        exists=exists,
        version=version,
        inline_limit=inline_limit,
    )


def save(
    context: LockContext,
    path: str,
    obj: Mapping[str, Any],
    *,
    version: int = -1,
    extra: Transaction | None = None,
) -> None:
    """Create or replace the object at ``path`` in one fenced transaction.

    ``version`` makes it a compare-and-set (:class:`~scheduler.zk.context.OpFailedError`
    with reason ``bad-version`` when someone wrote in between); ``extra``
    adds other operations to the same transaction.
    """
    context.ensure_valid()
    # A version means the caller read the node: it exists, no need to ask.
    exists = version >= 0 or context.client.exists(path) is not None
    prepared = prepare(context, path, obj, exists=exists, version=version)
    for attempt in range(2):
        txn = context.transaction()
        prepared.add_to(txn)
        if extra is not None:
            txn.extend(extra)
        try:
            results = txn.commit()
            break
        except OpFailedError as exc:
            # A new object whose parent does not exist yet: create the parent once.
            if attempt or not prepared.create or exc.reason != NO_NODE or exc.path != path:
                raise
            context.client.ensure_path(path.rsplit("/", 1)[0] or "/")
    prepared.cleanup(context.client, results)


@dataclass(frozen=True)
class Write:
    """One object of :func:`save_all`; ``version`` >= 0 makes it a compare-and-set."""

    path: str
    obj: Mapping[str, Any]
    version: int = -1


def save_all(
    context: LockContext, writes: Sequence[Write], extra: Transaction | None = None
) -> None:
    """Write several objects (and ``extra``) in ONE fenced transaction: all or none.

    For a processing pass that writes back what it changed: one round trip
    for the existence checks of new objects (in parallel), shards if any,
    and one transaction. Objects are sharded early enough that the whole
    transaction stays under ZooKeeper's request limit; a failed
    compare-and-set of any object aborts every write.
    """
    context.ensure_valid()
    client = context.client
    unknown = [(w, client.kazoo.exists_async(w.path)) for w in writes if w.version < 0]
    exists = {w.path: client.wait(r) is not None for w, r in unknown}
    budget = max(1024, (MAX_TRANSACTION_BYTES // 2) // max(1, len(writes)))
    prepared = [
        prepare(
            context,
            w.path,
            w.obj,
            exists=w.version >= 0 or exists[w.path],
            version=w.version,
            inline_limit=budget,
        )
        for w in writes
    ]
    for attempt in range(len(writes) + 1):
        txn = context.transaction()
        for blob in prepared:
            blob.add_to(txn)
        if extra is not None:
            txn.extend(extra)
        try:
            results = txn.commit()
            break
        except OpFailedError as exc:
            creates = {b.path for b in prepared if b.create}
            if attempt == len(writes) or exc.reason != NO_NODE or exc.path not in creates:
                raise
            client.ensure_path(exc.path.rsplit("/", 1)[0] or "/")
    for blob in prepared:
        blob.cleanup(client, results)


def decode_each(
    client: ZooKeeperClient, paths: Mapping[K, str]
) -> list[tuple[K, dict[str, Any], int]]:
    """Each object of ``paths`` (by key) decoded, with its version; absent ones left out.

    One pipelined round of reads (:meth:`ZooKeeperClient.get_each`), for
    plain objects (no shards, no placeholders: :func:`load_many` has those).
    """
    reads = client.get_each(list(paths.values()))
    return [
        (key, decode(read[0], path), int(read[1].version))
        for (key, path), read in zip(paths.items(), reads, strict=True)
        if read is not None
    ]


def load_many(context: LockContext, paths: Sequence[str]) -> dict[str, Stored]:
    """Read several objects in parallel; absent ones are left out of the result."""
    client = context.client
    pending = [(p, client.kazoo.get_async(p)) for p in paths]
    found: dict[str, Stored] = {}
    for path, result in pending:
        try:
            raw, stat = client.wait(result)
        except NoNodeError:
            continue
        if not raw:
            continue  # a placeholder still being written
        if sharding.decode_pointer(path, raw) is not None:
            with contextlib.suppress(NoDataError):
                found[path] = load(context, path)
            continue
        found[path] = Stored(decode(raw, path), stat.version, stat.mzxid)
    return found


def delete(context: LockContext, path: str, version: int = -1) -> bool:
    """Delete the object (and its shards); False if it did not exist."""
    txn = context.transaction()
    sharding.delete_ops(context.client, path, txn, version)
    if len(txn) <= (1 if context.lock_node else 0):
        return False
    try:
        txn.commit()
    except OpFailedError as exc:
        if exc.reason == NO_NODE:
            return False
        raise
    return True


__all__ = [
    "SCHEMA_VERSION",
    "NoDataError",
    "Stored",
    "Write",
    "decode",
    "delete",
    "encode",
    "load",
    "load_many",
    "prepare",
    "save",
    "save_all",
]
