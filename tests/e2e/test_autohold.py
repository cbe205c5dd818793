"""``sluice autohold``: the workspace of the next failing build of a job is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check

ADD = ("autohold", "add", "--tenant", "demo", "--project", "app", "--job")


def _add(system: SluiceSystem, job: str, *more: str) -> str:
    return system.sluice(*ADD, job, *more).strip()


def _requests(system: SluiceSystem) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(system.sluice("autohold", "list", "--json"))
    return found


def test_the_next_failing_build_keeps_its_workspace(system: SluiceSystem) -> None:
    prepare_check(system, ("feature", "feature2"))
    system.start_workers()
    system.sluice("reconfigure")

    hold_id = system.sluice(
        "autohold",
        "add",
        "--tenant",
        "demo",
        "--project",
        "app",
        "--job",
        "experimental",
        "--reason",
        "why does it fail?",
    ).strip()
    other = system.sluice(
        "autohold",
        "add",
        "--tenant",
        "demo",
        "--project",
        "app",
        "--job",
        "lint",
        "--ref",
        "^nomatch$",
    ).strip()
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")

    (held_request,) = [r for r in _requests(system) if r["id"] == hold_id]
    (held,) = held_request["held"]
    builds = {b["job"]: b for b in system.builds()}
    assert held["build"] == builds["experimental"]["uuid"]
    workspace = Path(held["workspace"])
    assert workspace.is_dir() and any(workspace.iterdir())
    # a succeeding build is never held, and an unmatched ref holds nothing
    assert not (workspace.parent / builds["lint"]["uuid"]).exists()
    assert next(r for r in _requests(system) if r["id"] == other)["held"] == []
    text = system.sluice("autohold")
    assert hold_id in text and "held 1/1" in text and "why does it fail?" in text

    # the count is used up: the next failure is cleaned up as usual
    system.enqueue("feature2")
    system.sluice("wait", "--idle", "--timeout", "90")
    second = next(
        b for b in system.builds() if b["job"] == "experimental" and b["ref"] == "feature2"
    )
    assert not (workspace.parent / second["uuid"]).exists()
    assert len(next(r for r in _requests(system) if r["id"] == hold_id)["held"]) == 1

    assert system.sluice("autohold", "delete", hold_id).strip() == f"deleted {hold_id}"
    code, out = system.sluice_result("autohold", "delete", hold_id)
    assert code == 1 and f"no autohold request {hold_id}" in out
    assert workspace.is_dir()  # deleting the request leaves the held workspace
    code, out = system.sluice_result(
        "autohold",
        "add",
        "--tenant",
        "demo",
        "--project",
        "app",
        "--job",
        "x",
        "--ref",
        "(",
    )
    assert code == 1 and "not a valid regex" in out
