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
from scheduler.zk import paths

Documents = dict[str, dict[str, Any]]


def root_path(tenant: str, pipeline: str) -> str:
    return paths.pipeline_state(tenant, pipeline)


def _ref(state: PipelineState, item: QueueItem) -> paths.BuildsetRef:
    return paths.BuildsetRef(state.tenant, state.pipeline, item.uuid, item.buildset.uuid)


def encode(state: PipelineState) -> Documents:
    """Every node of the pipeline's state, by path."""
    docs: Documents = {root_path(state.tenant, state.pipeline): state.summary()}
    for item in state.items.values():
        docs.update(_encode_item(state, item))
    return docs


def _encode_item(state: PipelineState, item: QueueItem) -> Documents:
    ref = _ref(state, item)
    buildset = item.buildset
    docs: Documents = {paths.item(state.tenant, state.pipeline, item.uuid): item.to_dict()}
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
    """Decodes documents fetched level by level (see :func:`children_of`)."""

    def __init__(self, tenant: str, pipeline: str, docs: Mapping[str, Mapping[str, Any]]) -> None:
        self.tenant = tenant
        self.pipeline = pipeline
        self.docs = docs

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
                item = self._item(state, item_uuid)
                if item is not None:
                    state.items[item.uuid] = item
            queue.items = [uuid for uuid in queue.items if uuid in state.items]
        return state

    def _item(self, state: PipelineState, item_uuid: str) -> QueueItem | None:
        doc = self.docs.get(paths.item(self.tenant, self.pipeline, item_uuid))
        if doc is None:
            return None
        ref = paths.BuildsetRef(self.tenant, self.pipeline, item_uuid, str(doc["buildset"]))
        bs_doc = self.docs.get(paths.buildset(ref))
        if bs_doc is None:
            return None
        repo_doc = self.docs.get(paths.repo_state(ref))
        repo_state = dict(repo_doc["repo_state"]) if repo_doc is not None else None
        jobs = {
            name: job
            for name in bs_doc.get("jobs", [])
            if (job := self._job(ref, name)) is not None
        }
        buildset = BuildSet.from_dict(bs_doc, repo_state, jobs)
        return QueueItem.from_dict(doc, buildset)

    def _job(self, ref: paths.BuildsetRef, name: str) -> JobState | None:
        doc = self.docs.get(paths.frozen_job(ref, name))
        if doc is None:
            return None  # a torn read by a reader without the lock
        builds = [
            Build.from_dict(self.docs[paths.build(ref, name, build_uuid)])
            for build_uuid in doc.get("builds", [])
            if paths.build(ref, name, build_uuid) in self.docs
        ]
        return JobState.from_dict(doc, builds)


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
