"""The unparsed config cache and the tenant layout states that point into it.

What is stored (seed 000 ``config/cache`` and ``layout/<tenant>``; the
tree is in docs/zookeeper.md):

* **Files**, content-addressed per project branch:
  ``config/cache/<connection>/<project>/<branch>/files/<sha256>`` holds one
  file's text (UTF-8, lone surrogates kept, zlib-compressed, sharded when
  large). A node is written once and never changed.
* **A branch index** at ``config/cache/<connection>/<project>/<branch>``:
  a small stored object naming the branch's files ``{path: sha256}`` and
  the hash of that mapping. Its ``mzxid`` is the branch's ltime.
* **A layout state** per tenant at ``layout/<tenant>``: whatever the caller
  records, plus ``sources``, the exact ``{path: sha256}`` of every branch
  the layout was built from. Any process rebuilds the layout from the
  state and the file nodes alone.

Guarantees:

* **A reader never sees half a branch update.** New file nodes are written
  first, each in its own request; then ONE transaction sets the index
  (compare-and-set on the version read) and checks that every file it names
  exists. A reader reads the index, then the files it names; file nodes
  are immutable, so what it gets is exactly one version of the branch.
* **No file a layout uses is deleted.** :func:`prune` deletes only files
  named by neither the branch's index nor any tenant's layout state, in a
  transaction that checks the index version and the version of the
  ``layout`` node, which every layout state write bumps. So a state commit
  and a prune are ordered by ZooKeeper: either the prune saw the state, or
  the state's commit (which checks each file it names) fails and
  :func:`save_layout_state` writes the missing files again and retries.
* Every write goes through a :class:`~scheduler.zk.context.LockContext`;
  with a lock node (the tenant write lock) every transaction is fenced.

On SUSPENDED or LOST a write raises before or during its transaction;
file nodes written before it are garbage a later :func:`prune` removes, and
the previous index and state stay intact and readable.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.config import BranchKey
from scheduler.zk import paths, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import (
    BAD_VERSION,
    EXISTS,
    NO_NODE,
    LockContext,
    OpFailedError,
    Transaction,
)
from scheduler.zk.errors import ConflictError, DecodeError, NoDataError
from scheduler.zk.retry import CONFLICT, TORN_READ

SCHEMA = 1
# Delete operations per prune transaction (each is small; stay far from 1 MB).
PRUNE_BATCH = 500


class CacheMissError(NoDataError):
    """A file node the caller expected is gone (pruned after a newer state)."""


def _raw(text: str) -> bytes:
    # surrogatepass: a checkout's undecodable bytes (lone surrogates) survive.
    return text.encode("utf-8", "surrogatepass")


def file_digest(text: str) -> str:
    """The name of a file's node: sha256 of its UTF-8 bytes."""
    return hashlib.sha256(_raw(text)).hexdigest()


def index_hash(digests: Mapping[str, str]) -> str:
    """The hash of a branch's ``{path: sha256}`` mapping (what changed, in one word)."""
    canonical = json.dumps(sorted(digests.items()), ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def _encode(obj: Mapping[str, Any]) -> bytes:
    """A stored object as :func:`stored.decode` reads it, ASCII so surrogates survive."""
    raw = json.dumps(
        {stored.SCHEMA_FIELD: SCHEMA, **obj},
        ensure_ascii=True,
        sort_keys=True,
        separators=(",", ":"),
    ).encode("ascii")
    return zlib.compress(raw, 6) if len(raw) > stored.COMPRESS_THRESHOLD else raw


@dataclass(frozen=True)
class BranchFiles:
    """The config files of one project branch: path -> text."""

    connection: str
    project: str
    branch: str
    files: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> BranchKey:
        return BranchKey(self.connection, self.project, self.branch)

    def digests(self) -> dict[str, str]:
        return {path: file_digest(text) for path, text in self.files.items()}

    def content_hash(self) -> str:
        return index_hash(self.digests())


@dataclass(frozen=True)
class BranchIndex:
    """A branch's index node as read: its files' digests, hash, version and ltime."""

    connection: str
    project: str
    branch: str
    digests: Mapping[str, str]
    hash: str
    version: int
    mzxid: int
    removed: bool = False


@dataclass(frozen=True)
class SourceRef:
    """One branch a layout was built from, as recorded in its layout state."""

    connection: str
    project: str
    branch: str
    digests: Mapping[str, str]
    hash: str

    @property
    def key(self) -> BranchKey:
        return BranchKey(self.connection, self.project, self.branch)

    def to_dict(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "project": self.project,
            "branch": self.branch,
            "files": dict(sorted(self.digests.items())),
            "hash": self.hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceRef:
        return cls(
            str(data["connection"]),
            str(data["project"]),
            str(data["branch"]),
            {str(k): str(v) for k, v in dict(data.get("files", {})).items()},
            str(data.get("hash", "")),
        )

    @classmethod
    def of(cls, branch: BranchFiles) -> SourceRef:
        digests = branch.digests()
        return cls(branch.connection, branch.project, branch.branch, digests, index_hash(digests))


@dataclass(frozen=True)
class LayoutStateRecord:
    """A tenant's layout state as read: the caller's fields, the sources, version, mzxid."""

    tenant: str
    data: dict[str, Any]
    sources: tuple[SourceRef, ...]
    version: int
    mzxid: int


# ---------------------------------------------------------------- paths


def _files_dir(connection: str, project: str, branch: str) -> str:
    return paths.parent(paths.config_file(connection, project, branch, "-"))


def _file_node(connection: str, project: str, branch: str, digest: str) -> str:
    return paths.config_file(connection, project, branch, digest)


# ---------------------------------------------------------------- reading


def read_index(client: ZooKeeperClient, connection: str, project: str, branch: str) -> BranchIndex:
    """The branch's index; :class:`NoDataError` if the branch was never cached."""
    path = paths.config_branch(connection, project, branch)
    blob = sharding.read(client, path)
    data = stored.decode(blob.data, path)
    digests = {str(k): str(v) for k, v in dict(data.get("files", {})).items()}
    return BranchIndex(
        connection,
        project,
        branch,
        digests,
        str(data.get("hash", "")),
        blob.version,
        blob.mzxid,
        bool(data.get("removed", False)),
    )


def cached_branches(client: ZooKeeperClient, connection: str, project: str) -> list[str]:
    """Names of the branches the cache has an index node for (removed ones included)."""
    try:
        children = client.get_children(paths.config_project(connection, project))
    except NoNodeError:
        return []
    return sorted(paths.unsegment(c) for c in children)


def _decode_file(path: str, data: bytes, digest: str) -> str:
    try:
        raw = zlib.decompress(data)
    except zlib.error as exc:
        raise DecodeError(f"{path}: not a cached config file ({exc})") from None
    if hashlib.sha256(raw).hexdigest() != digest:
        raise DecodeError(f"{path}: content does not match its name")
    return raw.decode("utf-8", "surrogatepass")


def read_files(client: ZooKeeperClient, source: SourceRef) -> dict[str, str]:
    """The texts of the files ``source`` names; :class:`CacheMissError` if one is gone."""
    wanted = sorted(set(source.digests.values()))
    nodes = {d: _file_node(source.connection, source.project, source.branch, d) for d in wanted}
    pending = [(d, client.kazoo.get_async(nodes[d])) for d in wanted]
    texts: dict[str, str] = {}
    for digest, result in pending:
        node = nodes[digest]
        try:
            raw, _ = client.wait(result)
            if sharding.decode_pointer(node, raw) is not None or not raw:
                raw = sharding.read(client, node).data
        except (NoNodeError, NoDataError):
            raise CacheMissError(f"{node}: cached config file is gone") from None
        texts[digest] = _decode_file(node, raw, digest)
    return {path: texts[digest] for path, digest in source.digests.items()}


def read_branch(
    client: ZooKeeperClient, connection: str, project: str, branch: str
) -> tuple[BranchIndex, BranchFiles] | None:
    """One consistent version of a branch's files, or None if not cached (or removed)."""
    for _ in TORN_READ.tries():
        try:
            index = read_index(client, connection, project, branch)
        except NoDataError:
            return None
        if index.removed:
            return None
        source = SourceRef(connection, project, branch, index.digests, index.hash)
        try:
            files = read_files(client, source)
        except CacheMissError:
            continue  # a newer index replaced it and its files were pruned: read again
        return index, BranchFiles(connection, project, branch, files)
    raise ConflictError(
        f"{connection}/{project}@{branch}: the cache keeps changing under the reader"
    )


# ---------------------------------------------------------------- writing


def _complete(stat: Any) -> bool:
    return stat is not None and int(stat.dataLength) > 0


def _write_missing(client: ZooKeeperClient, branch: BranchFiles) -> None:
    """Write the file nodes of ``branch`` that do not exist yet (immutable, by digest)."""
    by_digest = {file_digest(text): text for text in branch.files.values()}
    nodes = {d: _file_node(branch.connection, branch.project, branch.branch, d) for d in by_digest}
    checks = [(d, client.kazoo.exists_async(nodes[d])) for d in sorted(nodes)]
    # An empty node is a placeholder a crashed writer may have left: write it.
    missing = [d for d, result in checks if not _complete(client.wait(result))]
    if missing:
        client.ensure_path(_files_dir(branch.connection, branch.project, branch.branch))
    for digest in missing:
        data = zlib.compress(_raw(by_digest[digest]), 6)
        # Unfenced on purpose: an orphan file node is harmless and pruned later.
        try:
            sharding.write(client, nodes[digest], data, Transaction(client))
        except NoNodeError:
            continue  # pruned while written: the commit's check fails and retries
        except OpFailedError as exc:
            # EXISTS: someone wrote the same content meanwhile; NO_NODE: as above
            if exc.reason not in (EXISTS, NO_NODE):
                raise


def write_branch(context: LockContext, branch: BranchFiles) -> BranchIndex:
    """Make ``branch``'s files the cached version of that branch; returns the index.

    Nothing is written when the cache already holds exactly these files.
    Files first, then the index in one transaction that checks every file
    it names and compares-and-sets the index version; on a lost race the
    whole step is repeated (another tenant's reconfiguration wrote the same
    branch).
    """
    client = context.client
    digests = branch.digests()
    new_hash = index_hash(digests)
    where = (branch.connection, branch.project, branch.branch)
    obj = {
        "connection": branch.connection,
        "project": branch.project,
        "branch": branch.branch,
        "files": dict(sorted(digests.items())),
        "hash": new_hash,
    }
    nodes = [_file_node(*where, d) for d in sorted(set(digests.values()))]
    for _ in CONFLICT.tries():
        current = _current(client, *where)
        if current is not None and current.hash == new_hash and not current.removed:
            return current
        _write_missing(client, branch)
        if _commit_index(context, obj, current, nodes):
            return read_index(client, *where)
    raise ConflictError(f"{paths.config_branch(*where)}: could not write the index (kept changing)")


def _current(
    client: ZooKeeperClient, connection: str, project: str, branch: str
) -> BranchIndex | None:
    try:
        return read_index(client, connection, project, branch)
    except NoDataError:
        return None


def _commit_index(
    context: LockContext,
    obj: Mapping[str, Any],
    current: BranchIndex | None,
    file_nodes: Sequence[str],
) -> bool:
    """One fenced transaction: check the files, set the index; False on a lost race."""
    client = context.client
    path = paths.config_branch(str(obj["connection"]), str(obj["project"]), str(obj["branch"]))
    if current is None:
        client.ensure_path(paths.parent(path))
    exists = current is not None or client.exists(path) is not None
    version = current.version if current is not None else -1
    prepared = sharding.prepare(client, path, _encode(obj), exists=exists, version=version)
    txn = context.transaction()
    for node in file_nodes:
        txn.check(node)
    prepared.add_to(txn)
    try:
        results = txn.commit()
    except OpFailedError as exc:
        if exc.reason in (BAD_VERSION, EXISTS, NO_NODE):
            return False
        raise
    prepared.cleanup(client, results)
    return True


def remove_branch(context: LockContext, connection: str, project: str, branch: str) -> None:
    """Mark a branch gone from its repository (its files stay while a layout uses them)."""
    for _ in CONFLICT.tries():
        current = _current(context.client, connection, project, branch)
        if current is None or current.removed:
            return
        obj = {
            "connection": connection,
            "project": project,
            "branch": branch,
            "files": {},
            "hash": index_hash({}),
            "removed": True,
        }
        if _commit_index(context, obj, current, ()):
            return
    path = paths.config_branch(connection, project, branch)
    raise ConflictError(f"{path}: could not mark the branch removed (kept changing)")


# ---------------------------------------------------------------- layout states


def _layout_root() -> str:
    return paths.layout_root()


def _record(tenant: str, path: str, blob: sharding.BlobRead) -> LayoutStateRecord:
    data = stored.decode(blob.data, path)
    sources = tuple(SourceRef.from_dict(s) for s in data.pop("sources", ()))
    return LayoutStateRecord(tenant, data, sources, blob.version, blob.mzxid)


def load_layout_state(client: ZooKeeperClient, tenant: str) -> LayoutStateRecord | None:
    """The tenant's layout state, or None if it was never reconfigured."""
    path = paths.layout_state(tenant)
    try:
        blob = sharding.read(client, path)
    except NoDataError:
        return None
    return _record(tenant, path, blob)


def layout_state_mzxid(client: ZooKeeperClient, tenant: str) -> int | None:
    """The ltime of the tenant's layout state (one cheap call), None if absent."""
    stat = client.exists(paths.layout_state(tenant))
    return None if stat is None else int(stat.mzxid)


def layout_epoch(client: ZooKeeperClient) -> int:
    """The version of the ``layout`` node: it changes whenever any layout state does."""
    stat = client.exists(_layout_root())
    return -1 if stat is None else int(stat.version)


def layout_tenants(client: ZooKeeperClient) -> list[str]:
    """Tenants that have a layout state."""
    try:
        children = client.get_children(_layout_root())
    except NoNodeError:
        return []
    return sorted(paths.unsegment(c) for c in children)


def save_layout_state(
    context: LockContext,
    tenant: str,
    data: Mapping[str, Any],
    branches: Sequence[BranchFiles],
) -> LayoutStateRecord:
    """Record the tenant's layout state and the exact files it was built from.

    Missing file nodes are written first (a kept branch's last good files
    may have been pruned); the state commits in one fenced transaction that
    checks every file it names and bumps the ``layout`` node (so a
    concurrent :func:`prune` either sees this state or fails).
    """
    client = context.client
    path = paths.layout_state(tenant)
    sources = [SourceRef.of(b) for b in branches]
    obj = {**data, "sources": [s.to_dict() for s in sources]}
    client.ensure_path(_layout_root())
    for _ in CONFLICT.tries():
        for branch in branches:
            _write_missing(client, branch)
        exists = client.exists(path) is not None
        prepared = sharding.prepare(client, path, _encode(obj), exists=exists)
        txn = context.transaction()
        for source in sources:
            for digest in sorted(set(source.digests.values())):
                txn.check(_file_node(source.connection, source.project, source.branch, digest))
        txn.set(_layout_root(), b"")
        prepared.add_to(txn)
        try:
            results = txn.commit()
        except OpFailedError as exc:
            if exc.reason in (NO_NODE, EXISTS):
                continue  # a file was pruned meanwhile, or a racing create: again
            raise
        prepared.cleanup(client, results)
        return _record(tenant, path, sharding.read(client, path))
    raise ConflictError(f"{path}: could not record the layout state (files kept vanishing)")


# ---------------------------------------------------------------- pruning


@dataclass(frozen=True)
class References:
    """The files every layout state names, and the ``layout`` version they were read at."""

    epoch: int
    digests: Mapping[BranchKey, frozenset[str]]


def references(client: ZooKeeperClient) -> References:
    """Read every layout state's sources (the version first, so a later write is noticed)."""
    stat = client.exists(_layout_root())
    if stat is None:
        return References(-1, {})
    found: dict[BranchKey, set[str]] = {}
    for tenant in layout_tenants(client):
        record = load_layout_state(client, tenant)
        for source in record.sources if record else ():
            found.setdefault(source.key, set()).update(source.digests.values())
    return References(int(stat.version), {k: frozenset(v) for k, v in found.items()})


def prune(
    context: LockContext,
    connection: str,
    project: str,
    branch: str,
    *,
    keep: Iterable[str] = (),
    refs: References | None = None,
) -> int:
    """Delete the branch's file nodes no index and no layout state names; returns how many.

    ``keep`` adds digests the caller is about to use; ``refs`` saves reading
    the layout states again when pruning several branches. Gives up quietly
    (returns 0) when the index or a layout state changed meanwhile: the
    next prune collects what is left.
    """
    client = context.client
    try:
        index = read_index(client, connection, project, branch)
        children = client.get_children(_files_dir(connection, project, branch))
    except (NoDataError, NoNodeError):
        return 0
    refs = references(client) if refs is None else refs
    referenced = set(refs.digests.get(BranchKey(connection, project, branch), ()))
    referenced.update(index.digests.values(), keep)
    doomed = [c for c in children if c not in referenced][:PRUNE_BATCH]
    if not doomed:
        return 0
    txn = context.transaction()
    txn.check(paths.config_branch(connection, project, branch), index.version)
    if refs.epoch >= 0:
        txn.check(_layout_root(), refs.epoch)
    for digest in doomed:
        sharding.delete_ops(client, _file_node(connection, project, branch, digest), txn)
    try:
        txn.commit()
    except OpFailedError as exc:
        if exc.reason in (BAD_VERSION, NO_NODE):
            return 0
        raise
    return len(doomed)


def prune_branches(context: LockContext, branches: Iterable[BranchKey]) -> int:
    """:func:`prune` several branches, reading the layout states once."""
    refs = references(context.client)
    return sum(prune(context, *key, refs=refs) for key in branches)


__all__ = [
    "BranchFiles",
    "BranchIndex",
    "CacheMissError",
    "LayoutStateRecord",
    "References",
    "SourceRef",
    "cached_branches",
    "file_digest",
    "index_hash",
    "layout_epoch",
    "layout_state_mzxid",
    "layout_tenants",
    "load_layout_state",
    "prune",
    "prune_branches",
    "read_branch",
    "read_files",
    "read_index",
    "references",
    "remove_branch",
    "save_layout_state",
    "write_branch",
]
