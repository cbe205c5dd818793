"""Pipeline state as znode documents: one document per item, buildset, job, build.

:func:`encode` turns a :class:`~scheduler.model.item.PipelineState` into a
mapping of path -> JSON document following the seed's tree
(``tenant/<t>/pipeline/<p>/item/<item>/buildset/<bs>/job/<job>/build/<b>``);
:func:`decode` reads it back. Each document names its children (the root
its queues and items, a buildset its jobs, a job its builds), so a reader
fetches the tree level by level with plain gets and never lists a
directory. Pure functions: the I/O is in :mod:`scheduler.state.store`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.model.build import Build, JobState
from scheduler.model.item import BuildSet, ChangeQueue, PipelineState, QueueItem
from scheduler.state.items import CachedItem
from scheduler.zk import paths

Documents = dict[str, dict[str, Any]]


def root_path(tenant: str, pipeline: str) -> str:
    return paths.pipeline_state(tenant, pipeline)


def encode(state: PipelineState) -> Documents:
    """Every node of the pipeline's state, by path."""
    docs: Documents = {root_path(state.tenant, state.pipeline): state.summary()}
    for item in state.items.values():
        docs.update(encode_item(state.tenant, state.pipeline, item))
    return docs


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

    With ``known`` entries (:mod:`scheduler.state.items`), an item whose
    documents are exactly the ones an entry came from is not decoded again:
    the state gets a clone of the entry's pristine item. Items decoded anew
    are in :attr:`decoded` afterwards, for the caller to keep.
    """

    def __init__(
        self,
        tenant: str,
        pipeline: str,
        docs: Mapping[str, dict[str, Any]],
        known: Mapping[str, CachedItem] | None = None,
    ) -> None:
        self.tenant = tenant
        self.pipeline = pipeline
        self.docs = docs
        self.known: Mapping[str, CachedItem] = known or {}
        self.decoded: dict[str, CachedItem] = {}

    def state(self) -> PipelineState:
        state = PipelineState(self.tenant, self.pipeline)
        root = self.docs.get(root_path(self.tenant, self.pipeline))
        if root is None:
            return state
        state.layout_uuid = str(root.get("layout_uuid", ""))
        for raw in root.get("queues", []):
            queue = ChangeQueue.from_dict(raw)
            state.queues[queue.name] = queue
            for item_uuid in queue.items:
                item = self._cached(item_uuid) or self._item(item_uuid)
                if item is not None:
                    state.items[item.uuid] = item
            queue.items = [uuid for uuid in queue.items if uuid in state.items]
        return state

    def _cached(self, item_uuid: str) -> QueueItem | None:
        entry = self.known.get(item_uuid)
        if entry is None or not entry.current_in(self.docs):
            return None
        return entry.item.clone()

    def _item(self, item_uuid: str) -> QueueItem | None:
        """Decode an item; keep it (pristine) unless a document it lists is missing."""
        used: dict[str, dict[str, Any]] = {}
        item = self._decode_item(item_uuid, used)
        if item is None or used.pop(_TORN, None) is not None:
            return item
        self.decoded[item_uuid] = CachedItem(item, used)
        return item.clone()

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


def item_paths(tenant: str, pipeline: str, root: Mapping[str, Any]) -> list[str]:
    """Level 2 of a read: the items the root document lists."""
    return [
        paths.item(tenant, pipeline, str(item_uuid))
        for queue in root.get("queues", [])
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
