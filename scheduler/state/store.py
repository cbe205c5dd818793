"""Reading and writing one pipeline's state in ZooKeeper.

Built on :mod:`scheduler.zk.doctree`: a read fetches the tree level by
level (root, items, buildsets, jobs and repo states, builds), each level in
one round trip of latency; a write commits only the documents that changed,
in one transaction fenced by the pipeline lock that also bumps the root's
version and carries the caller's extra operations (event acks, new
requests), so consuming events and applying them commit together
(docs/architecture.md invariants 3 and 4).

Every committed pass bumps the root node's version. A process keeps the
documents of its last read or write per pipeline and reuses them while the
root's version is unchanged, one get instead of a full read: the cache is
validated against ZooKeeper before it is used (invariant 1).

Decoded items are kept too (:mod:`scheduler.state.items`), valid while
their documents are the very objects of the tree in hand: decoding costs
only the items whose documents changed, and a write encodes only the items
a pass touched (an item equal to its pristine copy keeps its documents).
"""

from __future__ import annotations

import dataclasses
import threading
from types import EllipsisType

from scheduler.model.item import PipelineState, Settled
from scheduler.state import codec, items
from scheduler.zk import doctree, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, Transaction
from scheduler.zk.multiread import Stat
from scheduler.zk.retry import SETTLE

_cache_lock = threading.Lock()
_cache: dict[tuple[int, str, str], doctree.DocTree] = {}


class PipelineStore:
    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    def _key(self, tenant: str, pipeline: str) -> tuple[int, str, str]:
        return (id(self.client), tenant, pipeline)

    def read(
        self,
        tenant: str,
        pipeline: str,
        *,
        locked: bool = False,
        root_stat: Stat | EllipsisType | None = ...,
    ) -> doctree.DocTree:
        """The pipeline's documents, from the cache when ZooKeeper says it is current.

        With a cached tree, the root's version is asked first (a stat, no
        data): an unchanged pipeline costs one small round trip, however
        many items it holds. Otherwise the tree is read level by level.

        A reader without the pipeline lock (``sluice status``) may race a
        pass: a level read after a commit does not match the levels read
        before it. Every commit sets the root, so the read checks the root's
        version once more at the end and starts again if it moved. The lock
        holder (``locked``) has no concurrent writer and skips that check.

        The lock holder may pass the root's stat it read under the lock
        (``root_stat``, None if the root does not exist): the cache is then
        validated without a request of its own.
        """
        tree = doctree.DocTree(codec.root_path(tenant, pipeline))
        for _ in SETTLE.tries():  # a retry lets the writer's pass finish
            with _cache_lock:
                cached = _cache.get(self._key(tenant, pipeline))
            if cached is not None:
                if root_stat is ... or not locked:
                    stat = self.client.exists(cached.root)
                else:
                    stat, root_stat = root_stat, ...  # (a retry asks ZooKeeper)
                if stat is None:
                    return doctree.DocTree(cached.root)  # the pipeline's state is gone
                if (stat.version, stat.mzxid) == (cached.root_version, cached.root_zxid):
                    return cached.copy()
            tree = doctree.DocTree(codec.root_path(tenant, pipeline))
            level1 = [tree.root, codec.order_path(tenant, pipeline)]
            if tree.root not in doctree.get_many(self.client, tree, level1):
                return tree
            self._read_levels(tenant, pipeline, tree)
            if locked or self._root_version(tree) == tree.root_version:
                self._remember(tenant, pipeline, tree)
                return tree
        return tree  # still moving: the caller gets the last read (tolerated by the decoder)

    def _root_version(self, tree: doctree.DocTree) -> int:
        stat = self.client.exists(tree.root)
        return -1 if stat is None else int(stat.version)

    def _read_levels(self, tenant: str, pipeline: str, tree: doctree.DocTree) -> None:
        items = doctree.get_many(self.client, tree, codec.item_paths(tenant, pipeline, tree.docs))
        refs = [codec.buildset_ref(tenant, pipeline, doc) for doc in items.values()]
        buildsets = doctree.get_many(self.client, tree, [paths.buildset(r) for r in refs])
        jobs: dict[str, tuple[paths.BuildsetRef, str]] = {}
        level4: list[str] = []
        for ref in refs:
            doc = buildsets.get(paths.buildset(ref))
            for path, job in codec.buildset_children(ref, doc or {}):
                level4.append(path)
                if job is not None:
                    jobs[path] = (ref, job)
        found = doctree.get_many(self.client, tree, level4)
        builds = [
            build
            for path, (ref, job) in jobs.items()
            if path in found
            for build in codec.build_paths(ref, job, found[path])
        ]
        doctree.get_many(self.client, tree, builds)

    @staticmethod
    def state(tenant: str, pipeline: str, tree: doctree.DocTree) -> PipelineState:
        """The state of ``tree``: items whose documents are unchanged come from the cache."""
        reader = codec.Reader(tenant, pipeline, tree.docs, items.snapshot(tenant, pipeline))
        state = reader.state()
        if reader.snapshot is None:
            items.add(tenant, pipeline, reader.decoded)  # a torn read: no snapshot of it
        elif reader.snapshot is not reader.known:
            items.keep(tenant, pipeline, reader.snapshot)
        return state

    def write(
        self,
        context: LockContext,
        before: doctree.DocTree,
        state: PipelineState,
        extra: Transaction | None = None,
    ) -> doctree.DocTree:
        """Commit what changed since ``before`` (and ``extra``) in one fenced transaction.

        When the state was read from ``before`` through a snapshot, only the
        items the pass took (``ItemMap.owned_uuids``) are looked at: one that
        differs from its pristine copy is encoded, and only its documents
        that changed are written. Any other state is compared item by item
        (:meth:`_write_all`). The snapshot is replaced once the commit
        succeeded, and the state's pristine items follow it (a report's
        second commit starts from there).
        """
        tenant, pipeline = state.tenant, state.pipeline
        root = codec.root_path(tenant, pipeline)
        base = state.items.origin
        if not (isinstance(base, items.Snapshot) and base.whole_in(before.docs, root)):
            return self._write_all(context, before, state, extra)
        entries = dict(base.entries)
        pristine = dict(base.items)
        settled = dict(state.settled)
        changes: codec.Documents = {root: codec.root_doc(state)}
        order_path, order = codec.order_path(tenant, pipeline), state.order()
        if before.docs.get(order_path) != order:
            changes[order_path] = order
        gone: list[str] = []
        for uuid in state.items.removed_uuids():
            entry = entries.pop(uuid, None)
            pristine.pop(uuid, None)
            settled.pop(uuid, None)
            if entry is not None:
                gone.extend(entry.docs)
        for uuid in state.items.owned_uuids():
            item = state.items.peek(uuid)
            entry = entries.get(uuid)
            if item is None or (entry is not None and item == entry.item):
                continue
            new = item.clone()  # the pass's item stays the pass's to mutate
            docs = codec.encode_item(tenant, pipeline, new)
            old = entry.docs if entry is not None else {}
            changes.update((p, doc) for p, doc in docs.items() if old.get(p) != doc)
            gone.extend(p for p in old if p not in docs)
            entries[uuid] = items.CachedItem(new, docs)
            pristine[uuid] = new
            settled.pop(uuid, None)  # changed since its advance decided nothing
        after = doctree.write_changes(context, before, changes, gone, extra=extra)
        return self._committed(
            state, after, items.Snapshot(after.docs[root], entries, pristine, settled)
        )

    def _write_all(
        self,
        context: LockContext,
        before: doctree.DocTree,
        state: PipelineState,
        extra: Transaction | None,
    ) -> doctree.DocTree:
        """Every item against its entry, when the state was not read from ``before``."""
        tenant, pipeline = state.tenant, state.pipeline
        root = codec.root_path(tenant, pipeline)
        known = items.snapshot(tenant, pipeline).entries
        wanted: codec.Documents = {
            root: codec.root_doc(state),
            codec.order_path(tenant, pipeline): state.order(),
        }
        entries: dict[str, items.CachedItem] = {}
        settled: dict[str, Settled] = {}
        for uuid, item in state.items.peek_items():
            entry = known.get(uuid)
            if entry is None or not entry.current_in(before.docs) or item != entry.item:
                new = item.clone()
                entry = items.CachedItem(new, codec.encode_item(tenant, pipeline, new))
            elif uuid in state.settled:
                settled[uuid] = state.settled[uuid]
            wanted.update(entry.docs)
            entries[uuid] = entry
        after = doctree.write_diff(context, before, wanted, extra=extra)
        pristine = {uuid: entry.item for uuid, entry in entries.items()}
        return self._committed(
            state, after, items.Snapshot(after.docs[root], entries, pristine, settled)
        )

    @staticmethod
    def keep_settled(state: PipelineState) -> None:
        """A pass that commits nothing still keeps the items it found settled.

        The marks are this process's hints about the tree the state was read
        from, which is unchanged: the snapshot is kept with them (for the
        items still equal to their pristine copies) if it is still the one
        the state came from.
        """
        origin = state.items.origin
        tenant, pipeline = state.tenant, state.pipeline
        if not isinstance(origin, items.Snapshot) or items.snapshot(tenant, pipeline) is not origin:
            return
        mine = state.items
        settled = {
            uuid: mark
            for uuid, mark in state.settled.items()
            if not mine.owns(uuid) or mine.peek(uuid) == mine.pristine(uuid)
        }
        items.keep(tenant, pipeline, dataclasses.replace(origin, settled=settled))

    def _committed(
        self, state: PipelineState, after: doctree.DocTree, kept: items.Snapshot
    ) -> doctree.DocTree:
        items.keep(state.tenant, state.pipeline, kept)
        state.items.rebase(kept.items, kept)
        self._remember(state.tenant, state.pipeline, after)
        return after

    def _remember(self, tenant: str, pipeline: str, tree: doctree.DocTree) -> None:
        with _cache_lock:
            _cache[self._key(tenant, pipeline)] = tree.copy()

    def forget(self, tenant: str, pipeline: str) -> None:
        with _cache_lock:
            _cache.pop(self._key(tenant, pipeline), None)
        items.forget(tenant, pipeline)
