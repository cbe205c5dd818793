"""A verdict for each gate failure: the failed job run again, to say what failed.

With ``failure-verdict: true`` on a dependent pipeline, an item that failed
because a voting job failed is not reported at once. Its first failed job
runs twice more, in *probes* (:class:`~scheduler.model.item.Probe`):

* **same-state**: on the very repo state the item was tested on (its
  buildset's merge, no new merge);
* **alone**: on the tip of its target branch with its change alone (a merge
  of that change only).

Both start at once, beside the gate (the item is failing: the walk has
moved the items behind it off it already). When both have ended:

* the same-state run passed: **flaky** (the same code passed);
* else the change alone failed (or did not merge on the tip): **culprit**;
* else (alone it passes, on what it was tested on it fails): **broken-base**:
  the failure comes from what was ahead of it.

The verdict goes into the item's reason and message, hence into its report,
the status JSON, the SQL buildset record and ``sluice buildsets``. A probe
takes the job's semaphores (as its own holder, waiting while they are
taken) and asks for the job's nodes (its nodeset's first choice) like any
build. A probe that cannot say anything (its nodes failed, it was lost or
retried, it ended in an error) leaves the failure **unjudged**. Probes are
in the item's document; their requests carry the probe's uuid as their
buildset, so their answers come back here (:func:`apply`), and a reset or
dequeue of the item cancels them with its builds (their node requests
deleted, their semaphores released).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Protocol

from scheduler.manager import answers
from scheduler.manager import events as ev
from scheduler.manager.intents import BuildIntent, CancelIntent, Intents, MergeIntent, NodeIntent
from scheduler.manager.settings import PipelineSettings, SemaphoreLedger, take_all
from scheduler.model import reasons
from scheduler.model.build import Build, BuildState, JobState
from scheduler.model.item import MergeState, PipelineState, Probe, QueueItem
from scheduler.model.results import Result

log = logging.getLogger(__name__)

SAME_STATE = "same-state"
ALONE = "alone"
FLAKY = "flaky"
CULPRIT = "culprit"
BROKEN_BASE = "broken-base"
UNJUDGED = "unjudged"
# what a probe's run may end with and still say something of the code it ran
TELLING = frozenset(
    {Result.SUCCESS, Result.FAILURE, Result.TIMED_OUT, Result.POST_FAILURE, Result.MERGE_CONFLICT}
)


class Judging(Protocol):
    """What verdicts need of their pipeline's manager (``PipelineManager``)."""

    @property
    def settings(self) -> PipelineSettings: ...

    @property
    def intents(self) -> Intents: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def make_uuid(self) -> Callable[[], str]: ...

    @property
    def semaphores(self) -> SemaphoreLedger: ...


def wanted(manager: Judging, item: QueueItem) -> bool:
    """Whether ``item``'s failure is to be judged (and is not yet)."""
    if not manager.settings.failure_verdict or item.probes or item.result is not Result.FAILURE:
        return False
    if item.verdict not in ("", "failed") or item.reason is None:
        return False
    return item.reason.kind == reasons.FAILED and _job(manager, item) is not None


def _job(manager: Judging, item: QueueItem) -> str | None:
    """The first failed voting job."""
    for job in item.buildset.graph:
        if job.info.voting and job.result not in (None, Result.SUCCESS, Result.SKIPPED):
            return job.name
    return None


def start(manager: Judging, item: QueueItem) -> None:
    """Run the failed job again on the same state and on the tip with the change alone."""
    job = _job(manager, item)
    assert job is not None
    buildset = item.buildset
    same = Probe(
        SAME_STATE,
        manager.make_uuid(),
        job,
        merge_state=MergeState.COMPLETE,
        merge_request=buildset.merge_request,
        repo_state=dict(buildset.repo_state or {}),
        base_state={p: dict(b) for p, b in buildset.base_state.items()},
    )
    alone = Probe(ALONE, manager.make_uuid(), job)
    _merge_alone(manager, item, alone)
    item.probes = [same, alone]
    log.info("%s: judging the failure of %s (%s)", manager.settings.name, item.uuid, job)


def _merge_alone(manager: Judging, item: QueueItem, probe: Probe) -> None:
    probe.merge_state = MergeState.PENDING
    probe.merge_request = manager.make_uuid()
    required = tuple(item.buildset.required)
    manager.intents.merges.append(
        MergeIntent(item.uuid, probe.uuid, probe.merge_request, (item.change,), required)
    )


def advance(manager: Judging, item: QueueItem) -> bool:
    """Start what the probes can run now; True once every probe has ended (judged)."""
    jobs = item.buildset.jobs or {}
    for probe in item.probes:
        if probe.kind == ALONE and probe.merge_state is MergeState.NEW:
            _merge_alone(manager, item, probe)  # its merger was lost: merge again
        if probe.merge_state is not MergeState.COMPLETE or probe.merge_error is not None:
            continue
        if probe.build is None and probe.job in jobs and _take_semaphores(manager, probe, jobs):
            _start(manager, item, probe, jobs)
    if any(probe.result is None for probe in item.probes):
        return False
    if item.verdict in ("", "failed"):
        _decide(item)
    return True


def _holder(probe: Probe) -> str:
    return f"{probe.uuid}/{probe.job}"


def _take_semaphores(manager: Judging, probe: Probe, jobs: Mapping[str, JobState]) -> bool:
    """Take all of the job's semaphores for the probe, or none (it waits: False)."""
    return take_all(manager.semaphores, jobs[probe.job].info.semaphores, _holder(probe)) is None


def _release_semaphores(manager: Judging, probe: Probe, jobs: Mapping[str, JobState]) -> None:
    if probe.job in jobs:
        for name in jobs[probe.job].info.semaphores:
            manager.semaphores.release(name, _holder(probe))


def _start(manager: Judging, item: QueueItem, probe: Probe, jobs: Mapping[str, JobState]) -> None:
    """The probe's build: its nodes asked for first where the job has a nodeset."""
    info = jobs[probe.job].info
    probe.build = Build(uuid=manager.make_uuid(), job=probe.job, attempt=1)
    wanted = manager.settings.nodes_for(info, 0)
    if wanted:
        manager.intents.node_requests.append(
            NodeIntent(item.uuid, probe.uuid, probe.build, probe.job, wanted)
        )
        return
    parent_data = item.buildset.graph.parent_data(jobs[probe.job])
    manager.intents.builds.append(
        BuildIntent(item.uuid, probe.uuid, probe.build, info, parent_data)
    )


def _decide(item: QueueItem) -> None:
    outcome = {probe.kind: probe.result for probe in item.probes}
    silent = sorted(f"{kind} {result}" for kind, result in outcome.items() if result not in TELLING)
    if silent or outcome.get(SAME_STATE) is Result.MERGE_CONFLICT:
        item.verdict = UNJUDGED
        why = ", ".join(silent) or "its stored state did not merge"
        item.message = item.buildset.message = (
            f"{item.message} (no verdict: the re-run ended {why})"
        )
        if item.reason is not None:
            item.reason = replace(item.reason, verdict=UNJUDGED, message=item.message)
        return
    if outcome.get(SAME_STATE) is Result.SUCCESS:
        verdict, why = FLAKY, "it passed when run again on the same state"
    elif outcome.get(ALONE) is not Result.SUCCESS:
        verdict, why = CULPRIT, "it fails on the branch tip with the change alone"
    else:
        verdict, why = BROKEN_BASE, "it passes with the change alone: what was ahead broke it"
    item.verdict = verdict
    item.message = item.buildset.message = f"{item.message} (verdict: {verdict}, {why})"
    if item.reason is not None:
        item.reason = replace(item.reason, verdict=verdict, message=item.message)


def abort(manager: Judging, item: QueueItem) -> None:
    """Cancel the probes' running builds (the item is reset or leaves)."""
    jobs = item.buildset.jobs or {}
    for probe in item.probes:
        build = probe.build
        if build is not None and not build.done:
            zone = jobs[probe.job].info.zone if probe.job in jobs else ""
            if build.node_request:
                manager.intents.node_deletes.append(build.node_request)
            if not build.waiting_for_nodes:
                manager.intents.cancels.append(CancelIntent(build.uuid, zone))
            build.state = BuildState.COMPLETED
            build.result = Result.ABORTED
            build.end_time = manager.clock()
        _release_semaphores(manager, probe, jobs)


ProbeEvent = (
    ev.MergeCompleted | ev.BuildStarted | ev.BuildPaused | ev.BuildCompleted | ev.NodesAnswered
)


def apply(manager: Judging, state: PipelineState, event: ev.PipelineEvent) -> bool:
    """Apply an answer to a probe's request; False if ``event`` is not one."""
    if not isinstance(event, ProbeEvent):
        return False
    item = state.items.peek(event.item)
    if item is None or item.probe(event.buildset) is None:
        return False
    item = state.items[event.item]
    probe = item.probe(event.buildset)
    assert probe is not None
    if isinstance(event, ev.MergeCompleted):
        _merged(probe, event)
    elif isinstance(event, ev.NodesAnswered):
        _nodes(manager, item, probe, event)
    elif probe.build is not None and probe.build.uuid == event.build and not probe.build.done:
        build = probe.build
        if isinstance(event, ev.BuildStarted):
            build.state = BuildState.RUNNING
            build.start_time = event.time
        elif isinstance(event, ev.BuildCompleted):
            _release_semaphores(manager, probe, item.buildset.jobs or {})
            build.state = BuildState.COMPLETED
            build.result = event.result
            build.message = event.message
            build.start_time = event.start_time or build.start_time
            build.end_time = event.end_time
            build.log_path = event.log_path
    return True


def _nodes(manager: Judging, item: QueueItem, probe: Probe, event: ev.NodesAnswered) -> None:
    """The probe's nodes are ready (its build is submitted) or cannot be had (unjudged)."""
    build = probe.build
    jobs = item.buildset.jobs or {}
    if build is None or build.node_request != event.request or probe.job not in jobs:
        manager.intents.node_deletes.append(event.request)  # stale: nobody takes them
        return
    if not build.waiting_for_nodes:
        return  # duplicate
    if not event.fulfilled:
        build.state = BuildState.COMPLETED
        build.result = Result.NODE_FAILURE
        build.message = event.reason or "NODE_FAILURE"
        build.start_time = build.end_time = manager.clock()
        _release_semaphores(manager, probe, jobs)
        return
    info = jobs[probe.job].info
    answers.name_nodes(manager.settings, info, build, event)
    parent_data = item.buildset.graph.parent_data(jobs[probe.job])
    manager.intents.builds.append(BuildIntent(item.uuid, probe.uuid, build, info, parent_data))


def _merged(probe: Probe, event: ev.MergeCompleted) -> None:
    if probe.merge_state is not MergeState.PENDING or event.request != probe.merge_request:
        return
    outcome = event.outcome
    if outcome.lost:
        probe.merge_state = MergeState.NEW  # asked again by the next step
        return
    probe.merge_state = MergeState.COMPLETE
    if not outcome.ok:
        probe.merge_error = outcome.error or "merge failed"
        return
    probe.repo_state = dict(outcome.repo_state)
    probe.base_state = {p: dict(b) for p, b in outcome.base_state.items()}
