"""Answers to a pass's requests: merge, build and node events applied to an item.

What the pass asked for (:mod:`scheduler.manager.intents`) comes back as
events (:mod:`scheduler.manager.events`): a merge's outcome (the item's jobs
are frozen under it), a build that started, paused or completed, a node
request fulfilled or failed. :meth:`PipelineManager.apply
<scheduler.manager.base.PipelineManager.apply>` hands them here. An event
for a buildset that was reset, an item that left, a build that was
cancelled or one already applied is stale or a duplicate: it changes
nothing (a stale node answer only gets its request deleted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from scheduler.manager import events as ev
from scheduler.manager import requirements
from scheduler.manager.intents import BuildIntent, Intents, NodeIntent
from scheduler.manager.settings import FreezeResult, LayoutProvider, PipelineSettings
from scheduler.model import reasons
from scheduler.model.build import Build, BuildState, JobInfo, JobState
from scheduler.model.item import MergeState, PipelineState, QueueItem
from scheduler.model.results import RETRYABLE, Result

log = logging.getLogger(__name__)


class Answered(Protocol):
    """What applying an answer needs of its pipeline's manager (``PipelineManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def layouts(self) -> LayoutProvider: ...

    @property
    def intents(self) -> Intents: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def records(self) -> requirements.Records: ...

    def dequeue(
        self, state: PipelineState, item: QueueItem, why: str, report: bool, kind: str = ...
    ) -> None: ...

    def freeze_jobs(
        self, state: PipelineState, item: QueueItem, outcome: ev.MergeOutcome
    ) -> FreezeResult: ...

    def merge_shared(
        self, state: PipelineState, item: QueueItem, outcome: ev.MergeOutcome
    ) -> None: ...

    def abort_job(self, item: QueueItem, job: JobState) -> None: ...

    def release_semaphores(self, item: QueueItem, job: JobState) -> None: ...


def _item_and_buildset(
    state: PipelineState, item_uuid: str, buildset_uuid: str
) -> QueueItem | None:
    item = state.items.get(item_uuid)
    if item is None or item.buildset.uuid != buildset_uuid or item.dequeued:
        return None  # a stale event for a reset buildset or a finished item
    return item


def merge_completed(manager: Answered, state: PipelineState, event: ev.MergeCompleted) -> None:
    item = _item_and_buildset(state, event.item, event.buildset)
    if item is None or item.buildset.merge_state is not MergeState.PENDING:
        return
    buildset = item.buildset
    if buildset.merge_request != event.request:
        return
    outcome = event.outcome
    if outcome.lost:
        log.warning("%s: merge %s was lost; merging again", manager.settings.name, event.request)
        buildset.merge_state = MergeState.NEW
        buildset.merge_request = None
        return
    buildset.merge_state = MergeState.COMPLETE
    if not outcome.ok:
        buildset.merge_error = outcome.error or "merge failed"
        return
    buildset.repo_state = dict(outcome.repo_state)
    buildset.base_state = {p: dict(b) for p, b in outcome.base_state.items()}
    buildset.files = list(outcome.files)
    frozen = manager.freeze_jobs(state, item, outcome)
    if frozen.errors:
        buildset.config_errors = list(frozen.errors)
        return
    missing = sorted({p for job in frozen.jobs for p in job.projects} - set(outcome.repo_state))
    if missing and not set(missing) <= set(buildset.required):
        # A job needs a project the merge did not report (a speculative
        # config added it): merge again with it, Zuul's second repo-state step.
        buildset.required = sorted({*buildset.required, *missing})
        buildset.merge_state = MergeState.NEW
        buildset.merge_request = None
        return
    buildset.fail_fast = frozen.fail_fast
    buildset.jobs = {job.name: JobState(info=job) for job in frozen.jobs}
    if frozen.jobs:
        manager.merge_shared(state, item, outcome)
    else:
        # Zuul's rule: a change with no jobs is reported to the no-jobs reporters only
        log.info("%s: no jobs for %s; dequeued", manager.settings.name, item.change.key)
        told = "no-jobs" in manager.settings.reporter_actions
        manager.dequeue(state, item, "no jobs to run", report=told, kind=reasons.NO_JOBS)


def _find_build(
    state: PipelineState,
    event: ev.BuildStarted | ev.BuildPaused | ev.BuildCompleted | ev.BuildPreFailed,
) -> tuple[QueueItem, JobState, Build] | None:
    item = _item_and_buildset(state, event.item, event.buildset)
    if item is None or item.buildset.jobs is None:
        return None
    job = item.buildset.jobs.get(event.job)
    if job is None:
        return None
    for build in job.builds:
        if build.uuid == event.build:
            return item, job, build
    return None


def build_progress(state: PipelineState, event: ev.BuildStarted | ev.BuildPaused) -> None:
    found = _find_build(state, event)
    if found is None or found[2].done:
        return
    _, _, build = found
    if isinstance(event, ev.BuildStarted):
        build.state = BuildState.RUNNING
        build.start_time = event.time
        build.worker = event.worker
    else:
        build.state = BuildState.PAUSED
        build.result_data = dict(event.result_data)


def build_prefailed(state: PipelineState, event: ev.BuildPreFailed) -> None:
    """Its output matched the job's failure-output: failing now, still running.

    Stale (a reset buildset), late (the build already ended) or repeated,
    it changes nothing.
    """
    found = _find_build(state, event)
    if found is None or found[2].done or found[2].pre_fail:
        return
    found[2].pre_fail = True


def build_completed(manager: Answered, state: PipelineState, event: ev.BuildCompleted) -> None:
    found = _find_build(state, event)
    if found is None or found[2].done:
        return  # duplicate or stale
    item, job, build = found
    was_paused = build.paused
    build.state = BuildState.COMPLETED
    build.result = event.result
    build.message = event.message
    if build.pre_fail and (event.result is Result.SUCCESS or event.result in RETRYABLE):
        # Zuul: a pre-failed build is a FAILURE even if its steps succeed (the
        # executor says so already; the items behind were moved off it); its
        # output said it failed, so it is not run again either
        build.result = Result.FAILURE
        build.message = event.message or "failure-output matched"
    build.start_time = event.start_time or build.start_time
    build.end_time = event.end_time or manager.clock()
    build.result_data = dict(event.result_data)
    build.log_path = event.log_path
    manager.release_semaphores(item, job)
    if was_paused and job.needs_retry:
        _rerun_dependents(manager, item, job)


def nodes_answered(manager: Answered, state: PipelineState, event: ev.NodesAnswered) -> None:
    """The build's nodes are ready (submit it) or cannot be had (NODE_FAILURE)."""
    item = _item_and_buildset(state, event.item, event.buildset)
    if item is None or item.buildset.jobs is None:
        return
    job = item.buildset.jobs.get(event.job)
    build = job.current if job is not None else None
    if job is None or build is None or build.node_request != event.request:
        # stale: the build was cancelled or reset. The pass that did so
        # deletes its request after committing; if that pass's worker died
        # in between, this answer is the last word on the request: delete it
        # (else its nodes stay allocated to nobody, counted against quotas).
        manager.intents.node_deletes.append(event.request)
        return
    if not build.waiting_for_nodes:
        return  # duplicate
    if not event.fulfilled:
        if _next_alternative(manager, item, job, build, event.request):
            return
        build.state = BuildState.COMPLETED
        build.result = Result.NODE_FAILURE
        build.message = event.reason or "NODE_FAILURE"
        if build.node_choice:
            build.message += f" (the last of {build.node_choice + 1} alternatives)"
        build.start_time = build.end_time = manager.clock()
        manager.release_semaphores(item, job)
        return
    name_nodes(manager.settings, job.info, build, event)
    parent_data = item.buildset.graph.parent_data(job)
    found = requirements.resolve(state, item, job, manager.records)  # met: nodes were asked
    manager.intents.builds.append(
        BuildIntent(item.uuid, item.buildset.uuid, build, job.info, parent_data, found.artifacts)
    )


def name_nodes(
    settings: PipelineSettings, info: JobInfo, build: Build, event: ev.NodesAnswered
) -> None:
    """The build's nodes as the job's nodeset names and groups them, in its order."""
    names = [name for name, _ in settings.nodes_for(info, build.node_choice)]
    groups = settings.groups_for(info, build.node_choice)
    build.nodes = []
    for n, node in enumerate(event.nodes):
        name = names[n] if n < len(names) else str(node.get("label", ""))
        named = {**dict(node), "name": name}
        if groups.get(name):
            named["groups"] = list(groups[name])
        build.nodes.append(named)


def _next_alternative(
    manager: Answered, item: QueueItem, job: JobState, build: Build, failed: str
) -> bool:
    """Ask for the nodeset's next alternative after ``failed``; False if none is left."""
    choice = build.node_choice + 1
    while choice < manager.settings.node_choices(job.info):
        wanted = manager.settings.nodes_for(job.info, choice)
        if wanted:
            build.node_choice = choice
            manager.intents.node_deletes.append(failed)
            manager.intents.node_requests.append(
                NodeIntent(item.uuid, item.buildset.uuid, build, job.name, wanted)
            )
            return True
        choice += 1  # an alternative without labelled nodes asks for nothing
    return False


def _rerun_dependents(manager: Answered, item: QueueItem, job: JobState) -> None:
    """A paused job is retried (its build was lost): so is every job that depends on it.

    Zuul's rule (TestJobPause.test_job_pause_retry): their builds are
    cancelled (ABORTED) and they run again, from their first try, once the
    new build of ``job`` has paused or succeeded.
    """
    for dependent in item.buildset.graph.dependents(job.name):
        manager.abort_job(item, dependent)
        dependent.reset()
