"""Pipeline state as znode documents: one document per item, buildset, job, build.

:func:`encode` turns a :class:`~scheduler.model.item.PipelineState` into a
mapping of path -> JSON document following the seed's tree
(``tenant/<t>/pipeline/<p>/item/<item>/buildset/<bs>/job/<job>/build/<b>``);
:class:`Reader` reads it back. Each document names its children (the
order document its queues and their items, a buildset its jobs, a job its
builds), so a reader fetches the tree level by level with plain gets and
never lists a directory. Pure functions: the I/O is in
:mod:`scheduler.state.store`.

The pipeline document (the root, set by every pass: its version fences
the pass) holds only the layout and the number of items, written with
schema 2. The queues and their items are the *order* document, the seed's
``queue`` node: it changes only when an item joins, leaves or moves, so a
pass that applies a build result writes neither a list nor bytes that grow
with the depth. A root written with schema 1 lists the queues itself and is
still read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.model.build import Build, JobState
from scheduler.model.item import BuildSet, ChangeQueue, ItemMap, PipelineState, QueueItem
from scheduler.state.items import EMPTY, CachedItem, Snapshot
from scheduler.zk import paths, stored

Documents = dict[str, dict[str, Any]]


# the schema of a pipeline document without queues (scheduler.zk.stored)
ROOT_SCHEMA = 2


def root_path(tenant: str, pipeline: str) -> str:
    return paths.pipeline_state(tenant, pipeline)


def order_path(tenant: str, pipeline: str) -> str:
    return paths.pipeline_queues(tenant, pipeline)


def root_doc(state: PipelineState) -> dict[str, Any]:
    """The pipeline document: written by every pass, of a size that does not grow."""
    return {**state.summary(), stored.SCHEMA_FIELD: ROOT_SCHEMA}


def encode(state: PipelineState) -> Documents:
    """Every node of the pipeline's state, by path."""
    docs: Documents = {
        root_path(state.tenant, state.pipeline): root_doc(state),
        order_path(state.tenant, state.pipeline): state.order(),
    }
    for item in state.items.peek_values():
        docs.update(encode_item(state.tenant, state.pipeline, item))
    return docs


def queue_docs(
    tenant: str, pipeline: str, docs: Mapping[str, Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The queues as stored: in the order document, or in a schema 1 root."""
    root = docs.get(root_path(tenant, pipeline)) or {}
    if "queues" in root:
        return list(root["queues"])
    return list((docs.get(order_path(tenant, pipeline)) or {}).get("queues", []))


def item_count(root: Mapping[str, Any]) -> int:
    """How many items a pipeline document says there are (without the order document)."""
    if "queues" in root:
        return sum(len(queue.get("items", [])) for queue in root["queues"])
    return int(root.get("items", 0))


def encode_item(tenant: str, pipeline: str, item: QueueItem) -> Documents:
    """The documents of one item: its own, its buildset's and those below, by path."""
    ref = paths.BuildsetRef(tenant, pipeline, item.uuid, item.buildset.uuid)
    buildset = item.buildset
    docs: Documents = {paths.item(tenant, pipeline, item.uuid): item.to_dict()}
    bs_doc = buildset.to_dict()
    bs_doc["jobs"] = sorted(buildset.jobs) if buildset.jobs is not None else []
    bs_doc["has_repo_state"] = buildset.repo_state is not None
    docs[paths.buildset(ref)] = bs_doc
    if buildset.repo_state is not None:
        docs[paths.repo_state(ref)] = {"repo_state": buildset.repo_state}
    for job in (buildset.jobs or {}).values():
        job_doc = job.to_dict()
        job_doc["builds"] = [build.uuid for build in job.builds]
        docs[paths.frozen_job(ref, job.name)] = job_doc
        for build in job.builds:
            docs[paths.build(ref, job.name, build.uuid)] = build.to_dict()
    return docs


class Reader:
    """Decodes documents fetched level by level (see :func:`children_of`).

    With a ``known`` snapshot (:mod:`scheduler.state.items`) made from this
    very tree, the state's items are the snapshot's pristine items (an
    :class:`~scheduler.model.item_map.ItemMap` clones one when a pass takes
    it) and nothing is decoded. Otherwise an item whose documents are exactly
    the ones an entry came from is not decoded again. Afterwards
    :attr:`snapshot` is the snapshot of this tree (None after a torn read)
    and :attr:`decoded` the items decoded anew.
    """

    def __init__(
        self,
        tenant: str,
        pipeline: str,
        docs: Mapping[str, dict[str, Any]],
        known: Snapshot | None = None,
    ) -> None:
        self.tenant = tenant
        self.pipeline = pipeline
        self.docs = docs
        self.known: Snapshot = known or EMPTY
        self.decoded: dict[str, CachedItem] = {}
        self.snapshot: Snapshot | None = None

    def state(self) -> PipelineState:
        state = PipelineState(self.tenant, self.pipeline)
        root_path_ = root_path(self.tenant, self.pipeline)
        root = self.docs.get(root_path_)
        if root is None:
            return state
        state.layout_uuid = str(root.get("layout_uuid", ""))
        state.consecutive_failures = int(root.get("consecutive_failures", 0))
        state.disabled = bool(root.get("disabled", False))
        for raw in queue_docs(self.tenant, self.pipeline, self.docs):
            queue = ChangeQueue.from_dict(raw)
            state.queues[queue.name] = queue
        if self.known.whole_in(self.docs, root_path_):
            self.snapshot = self.known
            state.items = ItemMap(pristine=self.known.items, origin=self.known)
            state.settled = dict(self.known.settled)
            return state
        entries: dict[str, CachedItem] = {}
        torn: dict[str, QueueItem] = {}
        for queue in state.queues.values():
            for item_uuid in queue.items:
                entry = self._cached(item_uuid) or self._item(item_uuid)
                if isinstance(entry, CachedItem):
                    entries[item_uuid] = entry
                elif entry is not None:
                    torn[item_uuid] = entry
            queue.items = [u for u in queue.items if u in entries or u in torn]
        pristine = {uuid: entry.item for uuid, entry in entries.items()}
        if not torn:
            self.snapshot = Snapshot(root, entries, pristine)
        state.items = ItemMap(torn, pristine=pristine, origin=self.snapshot)
        return state

    def _cached(self, item_uuid: str) -> CachedItem | None:
        entry = self.known.entries.get(item_uuid)
        if entry is None or not entry.current_in(self.docs):
            return None
        return entry

    def _item(self, item_uuid: str) -> CachedItem | QueueItem | None:
        """Decode an item: its entry, or the bare item if a document it lists is missing."""
        used: dict[str, dict[str, Any]] = {}
        item = self._decode_item(item_uuid, used)
        if item is None or used.pop(_TORN, None) is not None:
            return item
        entry = self.decoded[item_uuid] = CachedItem(item, used)
        return entry

    def _decode_item(self, item_uuid: str, used: dict[str, dict[str, Any]]) -> QueueItem | None:
        item_path = paths.item(self.tenant, self.pipeline, item_uuid)
        doc = self.docs.get(item_path)
        if doc is None:
            return None
        ref = paths.BuildsetRef(self.tenant, self.pipeline, item_uuid, str(doc["buildset"]))
        bs_path = paths.buildset(ref)
        bs_doc = self.docs.get(bs_path)
        if bs_doc is None:
            return None
        used[item_path] = doc
        used[bs_path] = bs_doc
        repo_state = None
        if bs_doc.get("has_repo_state"):
            repo_path = paths.repo_state(ref)
            repo_doc = self.docs.get(repo_path)
            if repo_doc is None:
                used[_TORN] = {}
            else:
                used[repo_path] = repo_doc
                repo_state = dict(repo_doc["repo_state"])
        jobs = {
            name: job
            for name in bs_doc.get("jobs", [])
            if (job := self._job(ref, name, used)) is not None
        }
        buildset = BuildSet.from_dict(bs_doc, repo_state, jobs)
        return QueueItem.from_dict(doc, buildset)

    def _job(
        self, ref: paths.BuildsetRef, name: str, used: dict[str, dict[str, Any]]
    ) -> JobState | None:
        job_path = paths.frozen_job(ref, name)
        doc = self.docs.get(job_path)
        if doc is None:
            used[_TORN] = {}
            return None  # a torn read by a reader without the lock
        used[job_path] = doc
        builds = []
        for build_uuid in doc.get("builds", []):
            build_path = paths.build(ref, name, build_uuid)
            build_doc = self.docs.get(build_path)
            if build_doc is None:
                used[_TORN] = {}
                continue
            used[build_path] = build_doc
            builds.append(Build.from_dict(build_doc))
        return JobState.from_dict(doc, builds)


# Marks a decode that missed a listed document (not a path: paths start with "/").
_TORN = "torn"


def item_paths(tenant: str, pipeline: str, docs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Level 2 of a read: the items the order document (or a schema 1 root) lists."""
    return [
        paths.item(tenant, pipeline, str(item_uuid))
        for queue in queue_docs(tenant, pipeline, docs)
        for item_uuid in queue.get("items", [])
    ]


def buildset_ref(tenant: str, pipeline: str, item_doc: Mapping[str, Any]) -> paths.BuildsetRef:
    return paths.BuildsetRef(tenant, pipeline, str(item_doc["uuid"]), str(item_doc["buildset"]))


def buildset_children(
    ref: paths.BuildsetRef, bs_doc: Mapping[str, Any]
) -> list[tuple[str, str | None]]:
    """Level 4: (path, job name or None for the repo state) of a buildset's children."""
    found: list[tuple[str, str | None]] = [
        (paths.frozen_job(ref, str(name)), str(name)) for name in bs_doc.get("jobs", [])
    ]
    if bs_doc.get("has_repo_state"):
        found.append((paths.repo_state(ref), None))
    return found


def build_paths(ref: paths.BuildsetRef, job_name: str, job_doc: Mapping[str, Any]) -> list[str]:
    """Level 5: the builds a frozen job document lists."""
    return [paths.build(ref, job_name, str(b)) for b in job_doc.get("builds", [])]
