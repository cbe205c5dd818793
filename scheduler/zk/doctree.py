"""Document trees: a subtree of stored objects, read in parallel, written as a diff.

A *document tree* is a set of stored objects (:mod:`scheduler.zk.stored`)
under one root node, such as one pipeline's state. The caller knows its
shape and asks for documents level by level with :func:`get_many`, whose
gets are all sent before the first answer is awaited, so a level costs one
round trip of latency whatever its width. Nothing lists a directory.

:func:`write_diff` commits the difference between the documents as read
and the documents wanted in ONE transaction: creates (parents first,
including the empty container nodes between documents), sets at the
version read (compare-and-set), deletes (children first), and always a set
of the root at its version read, so every commit bumps the root's version
and two writers can never both commit changes based on the same read.
Documents larger than ``inline_limit`` are sharded before the transaction
(:mod:`scheduler.zk.sharding`). The transaction comes from the caller's
:class:`~scheduler.zk.context.LockContext`, so it is fenced by the caller's
lock and refused once that lock is lost.

On SUSPENDED or LOST the commit raises and nothing of it is applied
(ZooKeeper multis are atomic); shards written for it are orphans of an
unnamed generation, removed by the next write of the same document.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from scheduler.zk import paths, sharding, stored
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, Transaction
from scheduler.zk.errors import NoDataError

Document = dict[str, Any]


@dataclass
class DocTree:
    """Documents of one tree as read or last written, with node versions."""

    root: str
    docs: dict[str, Document] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    sharded: set[str] = field(default_factory=set)
    # the nodes between the root and the documents (computed once per tree)
    containers: frozenset[str] | None = None
    # the zxid of the root's last write (-1: unknown): with its version, what a
    # cache of the tree is validated by (a recreated root restarts its version)
    root_zxid: int = -1

    @property
    def root_version(self) -> int:
        return self.versions.get(self.root, -1)

    def copy(self) -> DocTree:
        """A tree sharing the documents: they are never mutated once read or written
        (decoders copy what they keep, writers encode fresh ones), so a per-process
        cache can hand them out without a deep copy."""
        return DocTree(
            self.root,
            dict(self.docs),
            dict(self.versions),
            set(self.sharded),
            self.containers,
            self.root_zxid,
        )

    def container_nodes(self) -> frozenset[str]:
        if self.containers is None:
            self.containers = frozenset(_containers(self.docs, self.root))
        return self.containers


def get_many(client: ZooKeeperClient, tree: DocTree, wanted: Iterable[str]) -> dict[str, Document]:
    """Fetch the documents at ``wanted`` into ``tree``; absent ones are skipped."""
    pending = [(path, client.kazoo.get_async(path)) for path in wanted]
    found: dict[str, Document] = {}
    for path, result in pending:
        try:
            raw, stat = client.wait(result)
        except NoNodeError:
            continue
        version, zxid = stat.version, stat.mzxid
        if not raw:
            # A node without a document: a container created on the way to a
            # child (e.g. by a flag's makepath) or a placeholder being
            # written. It exists, so a write sets it rather than creating it.
            tree.versions[path] = version
            continue
        if raw.startswith(sharding.POINTER_MAGIC):
            try:
                blob = sharding.read(client, path)
            except NoDataError:
                continue  # a placeholder being written
            raw, version, zxid = blob.data, blob.version, blob.mzxid
            tree.sharded.add(path)
        doc = stored.decode(raw, path)
        doc.pop(stored.SCHEMA_FIELD, None)
        found[path] = doc
        tree.versions[path] = version
        if path == tree.root:
            tree.root_zxid = zxid
    tree.docs.update(found)
    if found:
        tree.containers = None
    return found


def _depth(path: str) -> int:
    return path.count("/")


def _containers(docs: Iterable[str], root: str) -> set[str]:
    """Nodes between the root and the documents that are not documents themselves."""
    doc_paths = set(docs)
    found: set[str] = set()
    for path in doc_paths:
        node = paths.parent(path)
        while node.startswith(root + "/") and node not in doc_paths:
            found.add(node)
            node = paths.parent(node)
    return found


def write_diff(
    context: LockContext,
    before: DocTree,
    after: Mapping[str, Document],
    *,
    extra: Transaction | None = None,
    inline_limit: int = 128 * 1024,
) -> DocTree:
    """Commit ``after`` over ``before`` (plus ``extra``) in one fenced transaction.

    ``after`` must contain the root document. Returns the tree as now stored.
    """
    # Documents are never mutated once read or written, so an unchanged one is
    # usually the very object read: an identity test first, equality only if not.
    changed = [
        path
        for path, doc in after.items()
        if path == before.root or ((old := before.docs.get(path)) is not doc and old != doc)
    ]
    gone = [path for path in before.docs if path not in after]
    return _commit(context, before, after, changed, gone, extra=extra, inline_limit=inline_limit)


def write_changes(
    context: LockContext,
    before: DocTree,
    changes: Mapping[str, Document],
    gone: Iterable[str],
    *,
    extra: Transaction | None = None,
    inline_limit: int = 128 * 1024,
) -> DocTree:
    """:func:`write_diff` for a caller that knows what changed: ``changes`` (the root's
    document among them) and the paths ``gone``; the others stay as in ``before``.

    Nothing here looks at the documents that did not change, so a commit
    costs what it writes, not the size of the tree (bar dictionary copies,
    and a recount of the container nodes when something is deleted).
    """
    if before.root not in changes:
        raise ValueError(f"write_changes: the root document {before.root} must be written")
    gone = [path for path in gone if path in before.docs and path not in changes]
    after = dict(before.docs)
    for path in gone:
        del after[path]
    after.update(changes)
    changed = list(changes)
    return _commit(context, before, after, changed, gone, extra=extra, inline_limit=inline_limit)


def _commit(
    context: LockContext,
    before: DocTree,
    after: Mapping[str, Document],
    changed: list[str],
    gone: list[str],
    *,
    extra: Transaction | None,
    inline_limit: int,
) -> DocTree:
    client = context.client
    txn = context.transaction()  # refuses first if the lock is lost (before any write)
    if before.root not in before.versions:
        client.ensure_path(paths.parent(before.root))
    prepared: dict[str, sharding.PreparedBlob] = {}
    for path in sorted(changed, key=_depth):
        prepared[path] = sharding.prepare(
            client,
            path,
            stored.encode(after[path]),
            exists=path in before.versions,
            version=before.versions.get(path, -1),
            inline_limit=inline_limit,
        )
    containers_before = before.container_nodes()
    containers_after = _containers_after(before, after, changed, gone)
    new_containers = containers_after - containers_before
    creates = sorted([*new_containers, *prepared], key=_depth)
    for path in creates:
        if path in prepared:
            prepared[path].add_to(txn)
        else:
            txn.create(path)
    _add_deletes(client, txn, before, gone, containers_before - containers_after)
    if extra is not None:
        txn.extend(extra)
    results = txn.commit()
    for path, blob in prepared.items():
        # Only a document that was or is sharded can have shards to delete;
        # an inline one's children are documents (the root's items): no listing.
        if path in before.sharded or blob.generation is not None:
            blob.cleanup(client, results)
    return _stored_tree(
        before, after, prepared, gone=gone, containers=containers_after, results=results
    )


def _containers_after(
    before: DocTree, after: Mapping[str, Document], changed: list[str], gone: list[str]
) -> frozenset[str]:
    """The container nodes of ``after``: from ``before``'s and the new documents'
    when nothing is deleted (a pass that only updates costs nothing per document),
    recomputed when a deletion may leave a container empty."""
    containers = before.container_nodes()
    new_docs = [path for path in changed if path not in before.docs]
    if gone or any(path in containers for path in new_docs):
        return frozenset(_containers(after, before.root))
    added: set[str] = set()
    for path in new_docs:
        node = paths.parent(path)
        while node.startswith(before.root + "/") and node not in after:
            if node in containers or node in added:
                break  # its ancestors are known already
            added.add(node)
            node = paths.parent(node)
    return containers | added if added else containers


def _add_deletes(
    client: ZooKeeperClient,
    txn: Transaction,
    before: DocTree,
    gone_docs: list[str],
    empty_containers: frozenset[str],
) -> None:
    gone = [*gone_docs, *empty_containers]
    for path in sorted(gone, key=_depth, reverse=True):
        if path in before.sharded:
            sharding.delete_ops(client, path, txn, before.versions.get(path, -1))
        else:
            txn.delete(path, before.versions.get(path, -1))


def _stored_tree(
    before: DocTree,
    after: Mapping[str, Document],
    prepared: Mapping[str, sharding.PreparedBlob],
    *,
    gone: list[str],
    containers: frozenset[str],
    results: list[Any],
) -> DocTree:
    """The tree as committed; its documents are ``after``'s (never mutated once written)."""
    tree = DocTree(before.root, dict(after), dict(before.versions), set(before.sharded))
    tree.containers = containers
    root_blob = prepared[before.root]
    if not root_blob.create and root_blob.index >= 0:
        tree.root_zxid = getattr(results[root_blob.index], "mzxid", -1)
    for path in before.versions.keys() - after.keys():
        del tree.versions[path]  # deleted documents and empty nodes read on the way
    tree.sharded.difference_update(gone)
    for path, blob in prepared.items():
        tree.versions[path] = 0 if blob.create else before.versions.get(path, 0) + 1
        if blob.generation is not None:
            tree.sharded.add(path)
        else:
            tree.sharded.discard(path)
    return tree
