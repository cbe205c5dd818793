"""The real request formats: merge jobs for the merger, build specs for executors.

Implements :class:`~scheduler.processing.environment.RequestFormats` with
the wire types of :mod:`scheduler.wire`. Where a build fetches its git
objects from is the caller's business (``sources``): on one host it is the
merger's repo cache, which holds the speculative merge commits. A build
spec also says how that state was merged, so an executor on another host
can merge it again (:mod:`workers.executor.speculation`).

A build request carries the frozen job in the form the buildset stores it
(``JobInfo.spec``, the job's own plain form), copied as it is: the
scheduler never reads it back. Beside it goes the build's
:class:`~scheduler.wire.build_spec.BuildContext`: the item's repo state,
the commits its merge moved and each project's source and connection,
narrowed to the projects the job uses (``JobInfo.projects``); the parent
data, the hold, the merge request and the nodes. What the job and its
context make together (steps, checkouts) the executor decides
(:mod:`workers.executor.job`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler.manager.events import MergedChange, MergeOutcome
from scheduler.manager.intents import BuildIntent, MergeIntent
from scheduler.model.change import Change
from scheduler.model.item import QueueItem
from scheduler.model.results import Result
from scheduler.processing.environment import BuildOutcome, NewRequest
from scheduler.stores.job_requests import JobRequest
from scheduler.stores.merge_requests import new_request
from scheduler.wire import merger as wire
from scheduler.wire.build_result import BuildResult
from scheduler.wire.build_spec import BuildContext, BuildSpecError, request_params
from scheduler.wire.events import JobResult
from scheduler.wire.merger import config_files_key
from scheduler.zk import paths

# (connection, project) -> where an executor fetches that project's commits
Sources = Callable[[str, str], str]


def _about(item: QueueItem, **more: Any) -> dict[str, Any]:
    """What a request is about, for people (task descriptions in Flower, logs)."""
    change = item.change
    return {"project": change.project, "change": change.ref or change.commit[:12], **more}


def _wire_change(change: Change, mode: str = "merge") -> wire.MergeChange:
    return wire.MergeChange(
        connection=change.connection,
        project=change.project,
        branch=change.branch,
        ref="" if change.commit else change.ref,
        commit=change.commit,
        merge_mode=wire.MergeMode(mode),
        change_id=change.key,
    )


def _repo_state(result: wire.MergeResult) -> dict[str, dict[str, str]]:
    return {state.project: dict(state.branches) for state in result.repo_state}


def _failure_text(failure: wire.Failure | None) -> str:
    if failure is None:
        return "the merge failed"
    files = f" ({', '.join(failure.files)})" if failure.files else ""
    where = f"{failure.project} {failure.ref}".strip()
    return f"{failure.kind}: {where}: {failure.message}{files}" if where else failure.message


# (tenant, project, branch, pipeline) -> the projects the item's jobs need
Needed = Callable[[str, str, str, str], tuple[str, ...]]
# (tenant, project, branch) -> the project's merge mode (Zuul's names)
MergeModeOf = Callable[[str, str, str], str]


def _nothing_needed(tenant: str, project: str, branch: str, pipeline: str) -> tuple[str, ...]:
    return ()


def _plain_merge(tenant: str, project: str, branch: str) -> str:
    return "merge"


# (tenant, project, job, ref) -> whether an autohold wants this build held if it fails
HoldOf = Callable[[str, str, str, str], bool]
# (tenant, job, project) -> the job's expected seconds, or None
EstimateOf = Callable[[str, str, str], "float | None"]


def _no_estimate(tenant: str, job: str, project: str) -> float | None:
    return None


def _no_hold(tenant: str, project: str, job: str, ref: str) -> bool:
    return False


# (tenant, pipeline, item, action) -> what its forge hears before it merges the item
BeforeMerge = Callable[[str, str, QueueItem, str], "wire.ForgeReport | None"]


class WireFormats:
    def __init__(
        self,
        connection_of: Callable[[str, str], str],
        sources: Sources,
        needed: Needed = _nothing_needed,
        merge_mode: MergeModeOf = _plain_merge,
        hold: HoldOf = _no_hold,
        *,
        estimate: EstimateOf = _no_estimate,
        before_merge: BeforeMerge | None = None,
    ) -> None:
        # (tenant, project name) -> the project's connection
        self.connection_of = connection_of
        self.sources = sources
        self.needed = needed
        self.merge_mode = merge_mode
        self.hold = hold
        # (tenant, job, project) -> the job's expected seconds (SQL), or None
        self.estimate = estimate
        self.before_merge = before_merge

    def merge(self, tenant: str, pipeline: str, item: QueueItem, intent: MergeIntent) -> NewRequest:
        job = wire.MergeJob(
            job_id=intent.request,
            changes=tuple(
                _wire_change(c, self.merge_mode(tenant, c.project, c.branch))
                for c in intent.changes
            ),
            required=self._required(tenant, pipeline, item, intent),
            read_config=True,
        )
        request, params = new_request(
            job,
            tenant=tenant,
            pipeline=pipeline,
            buildset=intent.buildset,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
            event_id=item.event_id,
            request_uuid=intent.request,
            about=_about(item),
        )
        return NewRequest(request, params, paths.merger_queue())

    def _required(
        self, tenant: str, pipeline: str, item: QueueItem, intent: MergeIntent
    ) -> tuple[wire.ProjectRef, ...]:
        """Projects the jobs need that no change of the merge touches."""
        change = item.change
        names = set(intent.required)
        names.update(self.needed(tenant, change.project, change.branch, pipeline))
        names -= {c.project for c in intent.changes}
        refs = []
        for name in sorted(names):
            try:
                refs.append(wire.ProjectRef(self.connection_of(tenant, name), name))
            except LookupError:
                continue  # not in the tenant (any more): the build names what is missing
        return tuple(refs)

    def merge_outcome(self, result: JobResult) -> MergeOutcome:
        decoded = wire.decode_result(result.result, lost=result.lost, kind=wire.JobKind.MERGE)
        assert isinstance(decoded, wire.MergeResult)
        if decoded.failure is not None and decoded.failure.kind == wire.LOST:
            return MergeOutcome(ok=False, lost=True)
        if not decoded.ok:
            return MergeOutcome(ok=False, error=_failure_text(decoded.failure))
        files = decoded.changes[-1].files if decoded.changes else ()
        config = {config_files_key(c.project, c.branch): dict(c.files) for c in decoded.config}
        return MergeOutcome(
            ok=True,
            repo_state=_repo_state(decoded),
            files=tuple(files),
            config_files=config,
            base_state={state.project: dict(state.branches) for state in decoded.bases},
            merged=tuple(
                MergedChange(c.project, c.branch, c.merged_commit, tuple(c.files))
                for c in sorted(decoded.changes, key=lambda c: c.index)
            ),
        )

    def push(
        self, tenant: str, pipeline: str, item: QueueItem, request_uuid: str, action: str
    ) -> NewRequest:
        change = item.change
        commit = (item.buildset.repo_state or {}).get(change.project, {}).get(change.branch, "")
        job = wire.PushJob(
            request_uuid,
            change.connection,
            change.project,
            change.branch,
            commit,
            change_ref=change.ref,
            change_commit=change.commit,
            merge_request=item.buildset.merge_request or "",
            report=self.before_merge(tenant, pipeline, item, action) if self.before_merge else None,
        )
        request, params = new_request(
            job,
            tenant=tenant,
            pipeline=pipeline,
            buildset=item.buildset.uuid,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
            event_id=item.event_id,
            request_uuid=request_uuid,
            about=_about(item),
        )
        return NewRequest(request, params, paths.merger_queue())

    def push_outcome(self, result: JobResult) -> tuple[bool, str]:
        decoded = wire.decode_result(result.result, lost=result.lost, kind=wire.JobKind.PUSH)
        if decoded.failure is None:
            return True, ""
        return False, _failure_text(decoded.failure)

    def build(self, tenant: str, pipeline: str, item: QueueItem, intent: BuildIntent) -> NewRequest:
        request = JobRequest(
            uuid=intent.build.uuid,
            tenant=tenant,
            pipeline=pipeline,
            buildset_uuid=intent.buildset,
            job_name=intent.job.name,
            event_id=item.event_id,
            result_queue=paths.pipeline_result_queue(tenant, pipeline),
            info=_about(
                item,
                attempt=intent.build.attempt,
                # the executor shows it in the build's PROGRESS (reporting/estimates.py)
                estimate=self.estimate(tenant, intent.job.name, item.change.project),
                **({"zone": intent.job.zone} if intent.job.zone else {}),
            ),
        )
        # the item's buildset, or a probe judging its failure (scheduler.manager.verdicts)
        repo_state, base_state, merge_request = item.tested_state(intent.buildset)
        # the job's projects missing from the repo state: the executor names them
        projects = [p for p in intent.job.projects if p in repo_state]
        connections = self._connections(tenant, projects)
        params: dict[str, object]
        try:
            context = BuildContext(
                tenant=tenant,
                build_uuid=intent.build.uuid,
                ref=item.change.ref,
                repo_state=_narrowed(repo_state, projects),
                sources={p: self.sources(c, p) for p, c in connections.items()},
                base_state=_narrowed(base_state, projects),
                parent_data=intent.parent_data,
                hold=self.hold(tenant, item.change.project, intent.job.name, item.change.ref),
                merge_request=merge_request,
                connections=connections,
                node_request=intent.build.node_request if intent.build.nodes else "",
                nodes=tuple(dict(n) for n in intent.build.nodes),
                artifacts=intent.artifacts,
            )
            params = request_params(intent.job.spec, context)
        except BuildSpecError as exc:
            # The executor answers params it cannot read with ERROR: the
            # build ends with this message instead of the pass failing.
            params = {"invalid": str(exc)}
        root = paths.executor_queue(intent.job.zone or None)
        return NewRequest(request, params, root)

    def _connections(self, tenant: str, projects: Iterable[str]) -> dict[str, str]:
        """Each project's connection (those no longer in the tenant are left out)."""
        found: dict[str, str] = {}
        for project in projects:
            with contextlib.suppress(LookupError):
                found[project] = self.connection_of(tenant, project)
        return found

    def build_outcome(self, result: JobResult) -> BuildOutcome:
        data = result.result
        if result.lost or data.get("result") == Result.LOST.value:
            return BuildOutcome(Result.LOST, "the executor was lost")
        build = BuildResult.from_dict(data)
        return BuildOutcome(
            build.result,
            build.message,
            build.started_at,
            build.ended_at,
            dict(build.result_data),
            build.log_path,
        )


def _narrowed(state: Mapping[str, Mapping[str, str]], projects: Iterable[str]) -> dict[str, Any]:
    """``{project: {branch: commit}}`` of ``projects`` only (those ``state`` has)."""
    return {p: dict(state[p]) for p in projects if p in state}
