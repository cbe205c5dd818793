"""The demo's live view: every item and job of the tenant, with progress bars."""

from __future__ import annotations

from typing import Any

BAR = 20
GLYPHS = {
    "SUCCESS": "\u2713",
    "FAILURE": "\u2717",
    "SKIPPED": "-",
    "ABORTED": "\u2717",
    "RETRY_LIMIT": "\u2717",
}


def bar(fraction: float, width: int = BAR) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def job_line(job: dict[str, Any], estimates: dict[str, float]) -> str:
    name, state = job["name"], job["state"]
    estimate = estimates.get(name, 3.0)
    elapsed = job["elapsed"] or 0.0
    if state == "completed" or job["result"]:
        result = job["result"] or "done"
        return f"  {bar(1.0)} {name:<14} {GLYPHS.get(result, ' ')} {result} {elapsed:.1f}s"
    if state == "running":
        fraction = min(elapsed / estimate, 0.95) if estimate else 0.5
        return f"  {bar(fraction)} {name:<14}   running {elapsed:.1f}s of ~{estimate:.0f}s"
    if state == "waiting_for_semaphore":
        return f"  {bar(0)} {name:<14}   waiting for semaphore {job['waiting_for_semaphore']}"
    return f"  {bar(0)} {name:<14}   {state}"


def render(status: dict[str, Any], estimates: dict[str, float], refs: set[str]) -> str:
    """The items of this demo run (by ref), pipeline by pipeline."""
    lines: list[str] = []
    for tenant in status["tenants"]:
        for pipeline in tenant["pipelines"]:
            items = [
                (position, item)
                for queue in pipeline["queues"]
                for position, item in enumerate(queue["items"], 1)
                if item["ref"] in refs
            ]
            if not items:
                continue
            lines.append(f"{pipeline['name']}:")
            for position, item in items:
                where = f"#{position} " if pipeline["name"] == "gate" else ""
                state = item["result"] or f"merge {item['merge'].lower()}"
                lines.append(f" {where}{item['project']} {item['ref']} [{state}]")
                lines += [job_line(job, estimates) for job in item["jobs"]]
    return "\n".join(lines)
