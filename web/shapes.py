"""Sluice's data in the shapes of Zuul's REST API.

Same field names as Zuul where Sluice has the concept (so Zuul's tools and
``zuul-client`` read them), and Sluice's own fields beside them. Times in
the status are milliseconds since the epoch, as in Zuul's status JSON;
history times are ISO-8601 UTC.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.config.layout import Layout
from scheduler.config.model import JobVariant
from scheduler.config.serialize import to_plain
from scheduler.config.tenant import TenantProject
from scheduler.layouts import LayoutState
from scheduler.model.item import PipelineState
from scheduler.reporting.queries import BuildsetDict
from scheduler.views import status as views


def _ms(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1000)


def log_url(found: Mapping[str, Any], base_url: str) -> str | None:
    """Where the web serves the build's log folder (``job-output.txt`` in it).

    The history row records the log file on the executor's disk; clients get
    the web's URL of the folder (with a trailing slash, so Zuul's clients join
    ``job-output.txt`` and ``zuul-info/inventory.yaml`` to it). A row that
    records a URL (an outside log server) keeps it.
    """
    stored = str(found.get("log_url") or "")
    if "://" in stored:
        return stored
    if not found.get("tenant") or not found.get("uuid"):
        return None
    return f"{base_url}/api/tenant/{found['tenant']}/build/{found['uuid']}/log/"


def build(found: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """A build as Zuul's ``/api/tenant/<t>/build/<uuid>`` has it (plus Sluice's own fields).

    Flat ``project``/``branch``/``ref`` (a string) as Zuul's older API and
    ``zuul-client``'s table read them; ``refs`` as Zuul's newer one.
    """
    return {
        **found,
        "job_name": found["job"],
        "log_url": log_url(found, base_url),
        "event_id": None,
        "held": False,
        "patchset": None,
        "artifacts": [],
        "provides": [],
        "refs": [
            {
                "project": found["project"],
                "branch": found["branch"],
                "ref": found["ref"],
                "change": None,
                "patchset": None,
                "newrev": found["newrev"],
            }
        ],
        "buildset": {"uuid": found["buildset"]},
    }


def build_time(found: Mapping[str, Any]) -> dict[str, Any]:
    """A finished build as Zuul's ``build-times`` lists it."""
    keys = ("uuid", "result", "start_time", "end_time", "duration", "final")
    return {
        **{k: found[k] for k in keys},
        "job_name": found["job"],
        "project": found["project"],
        "branch": found["branch"],
        "pipeline": found["pipeline"],
        "ref": found["ref"],
        "attempt": found["attempt"],
    }


BADGE_COLOURS = {"passing": "#4c1", "failing": "#e05d44", "unknown": "#9f9f9f"}


def badge(verdict: str) -> str:
    """A flat SVG badge "sluice | <verdict>" (passing, failing or unknown)."""
    colour = BADGE_COLOURS[verdict]
    right = 8 + 7 * len(verdict)
    width = 44 + right
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" '
        f'aria-label="sluice: {verdict}"><title>sluice: {verdict}</title>'
        f'<rect width="44" height="20" fill="#555"/>'
        f'<rect x="44" width="{right}" height="20" fill="{colour}"/>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" '
        'font-size="11">'
        '<text x="22" y="14">sluice</text>'
        f'<text x="{44 + right / 2:g}" y="14">{verdict}</text></g></svg>'
    )


def buildset(
    found: BuildsetDict, base_url: str, builds: Sequence[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    shaped: dict[str, Any] = {
        **found,
        "refs": [
            {
                "project": found["project"],
                "branch": found["branch"],
                "ref": found["ref"],
                "newrev": found["newrev"],
            }
        ],
        "first_build_start_time": found["start_time"],
        "last_build_end_time": found["end_time"],
    }
    if builds is not None:
        shaped["builds"] = [build(b, base_url) for b in builds]
    return shaped


def job_status(
    job: Mapping[str, Any], estimate: float | None, started: float | None, base_url: str
) -> dict[str, Any]:
    elapsed = job["elapsed"]
    remaining = None
    if estimate is not None and elapsed is not None and job["state"] == "running":
        remaining = max(0.0, estimate - elapsed)
    uuid = job["build"]
    return {
        **job,
        "uuid": uuid,
        "elapsed_time": _ms(elapsed),
        "remaining_time": _ms(remaining),
        "estimated_time": None if estimate is None else round(estimate, 1),
        "start_time": started,
        "queued": job["state"] == "queued",
        "paused": job["state"] == "paused",
        "waiting_status": (
            f"semaphore: {job['waiting_for_semaphore']}" if job["waiting_for_semaphore"] else None
        ),
        "url": f"{base_url}/stream/{uuid}" if uuid and job["state"] == "running" else None,
        "report_url": f"{base_url}/build/{uuid}" if uuid and job["result"] else None,
    }


def item_status(
    item: Mapping[str, Any],
    estimates: Mapping[str, float],
    starts: Mapping[str, float],
    base_url: str,
) -> dict[str, Any]:
    jobs = [
        job_status(j, estimates.get(j["name"]), starts.get(j["name"]), base_url)
        for j in item["jobs"]
    ]
    pending = [j["remaining_time"] for j in jobs if j["result"] is None]
    known = [r for r in pending if r is not None]
    return {
        **item,
        "live": True,
        "active": True,
        "ref": item["ref"],
        "enqueue_time": _ms(item["enqueued"]),
        "remaining_time": max(known) if known and len(known) == len(pending) else None,
        # Zuul's strings; ours (dequeue_reason, resets, reset_cost) come with **item
        "failing_reasons": item["failing_reasons"],
        "refs": [
            {
                "project": item["project"],
                "branch": item["branch"],
                "ref": item["ref"],
                "id": item["ref"],
                "newrev": item["commit"],
            }
        ],
        "jobs": jobs,
    }


def pipeline_status(
    state: PipelineState,
    layout: Layout | None,
    estimate: Any,
    base_url: str,
) -> dict[str, Any]:
    """A pipeline as in Zuul's status: ``change_queues`` of ``heads`` of items."""
    ours = views.pipeline_status(state)
    pipeline = layout.pipelines.get(state.pipeline) if layout else None
    manager = pipeline.manager if pipeline else "independent"
    queues = []
    for queue in ours["queues"]:
        items = [_item(state, i, estimate, base_url) for i in queue["items"]]
        heads = [items] if manager == "dependent" else [[i] for i in items]
        queues.append({"name": queue["name"], "window": 0, "heads": heads if items else []})
    return {
        "name": state.pipeline,
        "description": pipeline.description if pipeline else "",
        "manager": manager,
        "change_queues": queues,
    }


def _item(state: PipelineState, item: Mapping[str, Any], estimate: Any, base_url: str) -> Any:
    queued = state.items[item["id"]]
    names = [j["name"] for j in item["jobs"]]
    estimates = estimate(queued.change.project, queued.change.branch, names)
    starts = {
        job.name: job.current.start_time
        for job in queued.buildset.graph
        if job.current is not None and job.current.start_time is not None
    }
    return item_status(item, estimates, starts, base_url)


def tenant_status(
    tenant: str, states: list[PipelineState], layout: Layout | None, estimate: Any, base_url: str
) -> dict[str, Any]:
    return {
        "zuul_version": "sluice",
        "tenant": tenant,
        "now": _ms(time.time()),
        "pipelines": [pipeline_status(s, layout, estimate, base_url) for s in states],
    }


def job_variant(variant: JobVariant) -> dict[str, Any]:
    # secrets are named, never shown (their values are never in a layout anyway)
    attrs = to_plain({k: v for k, v in variant.attrs.items() if k != "secrets"})
    if "secrets" in variant.attrs:
        attrs["secrets"] = sorted(str(getattr(s, "name", s)) for s in variant.attrs["secrets"])
    return {
        "name": variant.name,
        "parent": variant.parent,
        "description": str(attrs.get("description", "")),
        "branches": list(variant.branches or _implied(variant)),
        "source_context": {
            "project": variant.source.project,
            "branch": variant.source.branch,
            "path": variant.source.path,
        },
        "variables": attrs.get("vars", {}),
        "voting": attrs.get("voting", True),
        "attributes": attrs,
    }


def _implied(variant: JobVariant) -> list[str]:
    return [variant.implied_branch] if variant.implied_branch else []


def project(entry: TenantProject, layout: Layout) -> dict[str, Any]:
    configs = []
    for config in layout.projects.get(entry.name, ()):
        configs.append(
            {
                "source_context": {
                    "project": config.source.project,
                    "branch": config.source.branch,
                    "path": config.source.path,
                },
                "default_branch": config.default_branch,
                "merge_mode": config.merge_mode,
                "templates": list(config.templates),
                "pipelines": [
                    {"name": p.pipeline, "jobs": [[{"name": j.name}] for j in p.jobs]}
                    for p in config.pipelines
                ],
            }
        )
    return {
        "name": entry.name,
        "canonical_name": f"{entry.connection}/{entry.name}",
        "connection_name": entry.connection,
        "type": "config" if entry.trusted else "untrusted",
        "configs": configs,
    }


def config_errors(state: LayoutState) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = [
        {"error": text, "short_error": text.splitlines()[0] if text else "", "severity": "error"}
        for text in state.errors
    ]
    for kept in state.kept:
        for text in kept.errors:
            found.append(
                {
                    "error": text,
                    "short_error": text.splitlines()[0] if text else "",
                    "severity": "error",
                    "source_context": {"project": kept.project, "branch": kept.branch},
                }
            )
    return found
