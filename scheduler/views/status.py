"""The status of pipelines as plain data: ``sluice status --json`` and the status page.

The JSON shape is a stable interface (later issues add keys, never remove
or rename them):

``{"tenants": [{"name", "pipelines": [{"name", "queues": [{"name", "items":
[{"id", "project", "branch", "ref", "commit", "enqueued", "result",
"message", "jobs": [{"name", "state", "result", "voting", "attempt",
"build", "elapsed", "waiting_for_semaphore", "pre_fail"}], "failing_reasons",
"dequeue_reason", "resets", "reset_cost"}]}]}]}]}``

``failing_reasons`` is Zuul's list of strings (why the item will not merge
as tested; empty while it may). ``dequeue_reason`` is ``{"kind", "message",
"jobs", "verdict"}`` (``scheduler/model/reasons.py``: why it failed or was
dequeued) or null. ``resets`` is ``{"count", "builds", "ci_seconds",
"cause"}``: the resets the item went through, the builds and CI seconds
they threw away, and the last one's cause ``{"item", "project", "ref",
"kind", "message"}`` (the item ahead and its reason; null if never reset).
``reset_cost`` is ``{"resets", "builds", "ci_seconds"}``: what the item's
failure or dequeue cost the items behind it.

Job ``state`` is one of ``waiting`` (for its dependencies or a merge),
``waiting_for_semaphore``, ``queued``, ``running``, ``paused``,
``completed``, ``skipped``. ``pre_fail`` (Zuul's name) is true once a line of
the current build's run output matched the job's ``failure-output``: it is
known to fail while it still runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from scheduler.model import reasons
from scheduler.model.build import BuildState, JobState
from scheduler.model.item import PipelineState, QueueItem
from scheduler.model.results import Result

# Zuul's failing reasons, by the kind of the item's reason
FAILING_REASONS = {
    reasons.FAILED: "at least one job failed",
    reasons.MERGE_CONFLICT: "it has a merge conflict",
    reasons.CONFIG_ERROR: "it has an invalid configuration",
    reasons.DEPENDENCY_FAILED: "a needed change is failing",
    reasons.DEPENDENCY_ERROR: "it has an invalid dependency",
    reasons.PUSH_FAILED: "it did not merge",
}


def job_state(job: JobState) -> str:
    if job.skipped is not None:
        return "skipped"
    if job.waiting_for_semaphore:
        return "waiting_for_semaphore"
    build = job.current
    if build is None or (job.needs_retry and build.done):
        return "waiting"
    return {
        BuildState.REQUESTED: "queued",
        BuildState.RUNNING: "running",
        BuildState.PAUSED: "paused",
        BuildState.COMPLETED: "completed",
    }[build.state]


def job_status(job: JobState, now: float) -> dict[str, Any]:
    build = job.current
    elapsed = None
    if build is not None and build.start_time is not None:
        elapsed = round((build.end_time or now) - build.start_time, 1)
    result = job.result
    return {
        "name": job.name,
        "state": job_state(job),
        "result": result.value if result else None,
        "voting": job.info.voting,
        "attempt": build.attempt if build else 0,
        "build": build.uuid if build else None,
        "elapsed": elapsed,
        "waiting_for_semaphore": job.waiting_for_semaphore,
        "pre_fail": bool(build is not None and build.pre_fail),
    }


def failing_reasons(item: QueueItem) -> list[str]:
    """Zuul's ``failing_reasons``: why the item will not merge as tested."""
    if item.reason is not None:
        return [FAILING_REASONS.get(item.reason.kind, item.reason.message)]
    passed = (None, Result.SUCCESS, Result.SKIPPED)
    if any(job.info.voting and job.result not in passed for job in item.buildset.graph):
        return [FAILING_REASONS[reasons.FAILED]]
    return []


def item_status(item: QueueItem, now: float) -> dict[str, Any]:
    change = item.change
    return {
        "id": item.uuid,
        "buildset": item.buildset.uuid,
        "project": change.project,
        "branch": change.branch,
        "ref": change.ref,
        "commit": change.commit,
        "enqueued": item.enqueue_time,
        "result": item.result.value if item.result else None,
        "message": item.message,
        "merge": item.buildset.merge_state.value,
        "jobs": [job_status(job, now) for job in item.buildset.graph],
        # a report that did not land yet (the database is down): retried
        "report_failures": item.report_failures,
        "report_error": item.report_error,
        "failing_reasons": failing_reasons(item),
        "dequeue_reason": item.reason.to_dict() if item.reason else None,
        "resets": item.resets.to_dict(),
        "reset_cost": item.reset_cost.to_dict(),
        # the batch it is tested in and the splits that made it; the dependency
        # cycle it is tested, reported and merged with (None: none)
        "batch": item.batch or None,
        "bisect_depth": item.bisect_depth,
        "cycle": item.cycle or None,
    }


def pipeline_status(state: PipelineState, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    queues = []
    for queue in state.queues.values():
        items = [item_status(state.items[u], now) for u in queue.items if u in state.items]
        queues.append({"name": queue.name, "items": items})
    found: dict[str, Any] = {"name": state.pipeline, "queues": queues}
    if state.disabled or state.consecutive_failures:
        # disable-after-consecutive-failures (scheduler.manager.actions)
        found["disabled"] = state.disabled
        found["consecutive_failures"] = state.consecutive_failures
    return found


def tenant_status(name: str, pipelines: Iterable[PipelineState]) -> dict[str, Any]:
    return {"name": name, "pipelines": [pipeline_status(p) for p in pipelines]}


def render_text(status: dict[str, Any]) -> str:
    """The human form of :func:`tenant_status` documents."""
    lines: list[str] = []
    for tenant in status["tenants"]:
        lines.append(f"tenant {tenant['name']}")
        for pipeline in tenant["pipelines"]:
            items = [i for q in pipeline["queues"] for i in q["items"]]
            disabled = ""
            if pipeline.get("disabled"):
                disabled = f" (disabled: {pipeline['consecutive_failures']} failures in a row)"
            lines.append(f"  pipeline {pipeline['name']}: {len(items)} item(s){disabled}")
            for item in items:
                state = item["result"] or f"merge {item['merge'].lower()}"
                lines.append(
                    f"    {item['project']} {item['ref']} -> {item['branch']}"
                    f" [{state}] {item['id']}"
                )
                lines.extend(_reason_lines(item))
                if item.get("report_failures"):
                    lines.append(
                        f"      waiting to report ({item['report_failures']} failed attempts):"
                        f" {item['report_error']}"
                    )
                for job in item["jobs"]:
                    lines.append("      " + _job_line(job))
    return "\n".join(lines) if lines else "no pipelines"


def _reason_lines(item: dict[str, Any]) -> list[str]:
    lines = []
    reason = item.get("dequeue_reason")
    if reason:
        lines.append(f"      why: {reason['kind']}: {reason['message']}")
    resets = item.get("resets") or {}
    if resets.get("count"):
        cause = resets.get("cause") or {}
        lines.append(
            f"      reset {resets['count']}x ({resets['builds']} builds,"
            f" {resets['ci_seconds']:.0f} CI seconds thrown away); last by"
            f" {cause.get('ref') or 'a reorder'} ({cause.get('kind', '')})"
        )
    cost = item.get("reset_cost") or {}
    if cost.get("resets"):
        lines.append(
            f"      cost others {cost['resets']} resets, {cost['builds']} builds,"
            f" {cost['ci_seconds']:.0f} CI seconds"
        )
    return lines


def _job_line(job: dict[str, Any]) -> str:
    text = f"{job['name']:<24} {job['state']:<22}"
    if job["result"]:
        text += f" {job['result']}"
    if job["elapsed"] is not None:
        text += f" {job['elapsed']:.0f}s"
    if job["attempt"] > 1:
        text += f" (attempt {job['attempt']})"
    if not job["voting"]:
        text += " (non-voting)"
    if job["waiting_for_semaphore"]:
        text += f" (semaphore {job['waiting_for_semaphore']})"
    if job.get("pre_fail") and not job["result"]:
        text += " (pre-fail)"
    return text.rstrip()
