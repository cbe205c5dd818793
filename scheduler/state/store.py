"""Reading and writing one pipeline's state in ZooKeeper.

Built on :mod:`scheduler.zk.doctree`: a read fetches the tree level by
level (root, items, buildsets, jobs and repo states, builds), each level in
one round trip of latency; a write commits only the documents that changed,
in one transaction fenced by the pipeline lock that also bumps the root's
version and carries the caller's extra operations (event acks, new
requests), so consuming events and applying them commit together
(DESIGN.md invariants 3 and 4).

Every committed pass bumps the root node's version. A process keeps the
documents of its last read or write per pipeline and reuses them while the
root's version is unchanged, one get instead of a full read: the cache is
validated against ZooKeeper before it is used (invariant 1).
"""

from __future__ import annotations

import threading

from scheduler.model.item import PipelineState
from scheduler.state import codec
from scheduler.zk import doctree, paths
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.context import LockContext, Transaction
from scheduler.zk.retry import SETTLE

_cache_lock = threading.Lock()
_cache: dict[tuple[int, str, str], doctree.DocTree] = {}


class PipelineStore:
    def __init__(self, client: ZooKeeperClient) -> None:
        self.client = client

    def _key(self, tenant: str, pipeline: str) -> tuple[int, str, str]:
        return (id(self.client), tenant, pipeline)

    def read(self, tenant: str, pipeline: str, *, locked: bool = False) -> doctree.DocTree:
        """The pipeline's documents, from the cache when ZooKeeper says it is current.

        A reader without the pipeline lock (``sluice status``) may race a
        pass: a level read after a commit does not match the levels read
        before it. Every commit sets the root, so the read checks the root's
        version once more at the end and starts again if it moved. The lock
        holder (``locked``) has no concurrent writer and skips that check.
        """
        tree = doctree.DocTree(codec.root_path(tenant, pipeline))
        for _ in SETTLE.tries():  # a retry lets the writer's pass finish
            tree = doctree.DocTree(codec.root_path(tenant, pipeline))
            root = doctree.get_many(self.client, tree, [tree.root])
            if not root:
                return tree
            with _cache_lock:
                cached = _cache.get(self._key(tenant, pipeline))
            if cached is not None and cached.root_version == tree.root_version:
                return cached.copy()
            self._read_levels(tenant, pipeline, tree)
            if locked or self._root_version(tree) == tree.root_version:
                self._remember(tenant, pipeline, tree)
                return tree
        return tree  # still moving: the caller gets the last read (tolerated by the decoder)

    def _root_version(self, tree: doctree.DocTree) -> int:
        stat = self.client.exists(tree.root)
        return -1 if stat is None else int(stat.version)

    def _read_levels(self, tenant: str, pipeline: str, tree: doctree.DocTree) -> None:
        items = doctree.get_many(
            self.client, tree, codec.item_paths(tenant, pipeline, tree.docs[tree.root])
        )
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
        return codec.Reader(tenant, pipeline, tree.docs).state()

    def write(
        self,
        context: LockContext,
        before: doctree.DocTree,
        state: PipelineState,
        extra: Transaction | None = None,
    ) -> doctree.DocTree:
        """Commit what changed since ``before`` (and ``extra``) in one fenced transaction."""
        after = doctree.write_diff(context, before, codec.encode(state), extra=extra)
        self._remember(state.tenant, state.pipeline, after)
        return after

    def _remember(self, tenant: str, pipeline: str, tree: doctree.DocTree) -> None:
        with _cache_lock:
            _cache[self._key(tenant, pipeline)] = tree.copy()

    def forget(self, tenant: str, pipeline: str) -> None:
        with _cache_lock:
            _cache.pop(self._key(tenant, pipeline), None)
