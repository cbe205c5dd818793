"""Check-pipeline behaviours end to end (issue 7's proofs), on real parts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

MAIN_YAML = TENANT_YAML

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/feature.*$
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: lint
            run: ci/lint.sh
        - job:
            name: unit
            run: ci/pass.sh
            dependencies: [lint]
        - job:
            name: docs
            run: ci/pass.sh
            files: ['^docs/.*$']
        - job:
            name: slow
            run: ci/slow.sh
        - project:
            check:
              jobs: [lint, unit, docs]
        """,
    "ci/lint.sh": "#!/bin/sh\necho lint ok\n",
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
    "ci/slow.sh": "#!/bin/sh\nsleep 60\n",
    "src/app.py": "value = 1\n",
}


@pytest.fixture
def demo(system: SluiceSystem) -> SluiceSystem:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    return system


def branch(system: SluiceSystem, name: str, files: dict[str, str]) -> str:
    return system.repos.commit("app", name, files, base=system.base)  # type: ignore[attr-defined]


def enqueue(system: SluiceSystem, ref: str, expect: int = 0) -> str:
    return system.enqueue(ref, "check", expect=expect)


def results(system: SluiceSystem) -> dict[str, dict[str, str]]:
    """{ref: {job: result}} from SQL, with the buildset's result under '*'."""
    found: dict[str, dict[str, str]] = {}
    sets = {b["uuid"]: b for b in system.buildsets()}
    for buildset in sets.values():
        found.setdefault(buildset["ref"], {})["*"] = buildset["result"]
    for build in system.builds():
        found[sets[build["buildset"]]["ref"]][build["job"]] = build["result"]
    return found


def test_parallel_changes_matchers_dependencies_conflicts_and_config(
    demo: SluiceSystem,
) -> None:
    branch(demo, "feature-code", {"src/new.py": "x = 1\n"})
    branch(demo, "feature-docs", {"docs/index.md": "# docs\n"})
    branch(demo, "feature-lint", {"ci/lint.sh": "#!/bin/sh\nexit 3\n"})
    branch(demo, "feature-conflict", {"src/app.py": "value = 2\n"})
    branch(
        demo,
        "feature-config",
        {
            ".zuul.yaml": APP[".zuul.yaml"].replace(
                "jobs: [lint, unit, docs]", "jobs: [lint, unit, docs, missing]"
            )
        },
    )
    # main moves on: feature-conflict no longer merges
    demo.repos.commit("app", "main", {"src/app.py": "value = 3\n"})
    demo.start_workers()
    demo.sluice("reconfigure")
    refs = ["feature-code", "feature-docs", "feature-lint", "feature-conflict", "feature-config"]
    items = [enqueue(demo, ref) for ref in refs]
    assert len(set(items)) == len(refs)
    demo.sluice("wait", "--idle", "--timeout", "120")

    found = results(demo)
    # file matchers: docs runs only for the change that touches docs/
    assert found["feature-code"] == {"*": "SUCCESS", "lint": "SUCCESS", "unit": "SUCCESS"}
    assert found["feature-docs"] == {
        "*": "SUCCESS",
        "lint": "SUCCESS",
        "unit": "SUCCESS",
        "docs": "SUCCESS",
    }
    # a failed hard dependency: unit never runs
    assert found["feature-lint"] == {"*": "FAILURE", "lint": "FAILURE"}
    assert found["feature-conflict"] == {"*": "MERGE_CONFLICT"}
    assert found["feature-config"] == {"*": "CONFIG_ERROR"}
    (bad,) = [b for b in demo.buildsets() if b["ref"] == "feature-config"]
    assert "missing" in bad["message"] and ".zuul.yaml" in bad["message"]
    (conflict,) = [b for b in demo.buildsets() if b["ref"] == "feature-conflict"]
    assert "src/app.py" in conflict["message"]


def _running(system: SluiceSystem, job: str) -> dict[str, Any] | None:
    status = json.loads(system.sluice("status", "--json"))
    for tenant in status["tenants"]:
        for pipeline in tenant["pipelines"]:
            for queue in pipeline["queues"]:
                for item in queue["items"]:
                    for entry in item["jobs"]:
                        if entry["name"] == job and entry["state"] == "running":
                            return item
    return None


SLOW_PROJECT = APP[".zuul.yaml"].replace("jobs: [lint, unit, docs]", "jobs: [slow]")


def test_dequeue_and_a_new_commit_abort_running_builds(demo: SluiceSystem) -> None:
    demo.repos.commit("app", "main", {".zuul.yaml": SLOW_PROJECT})
    demo.base = demo.repos.git("app", "rev-parse", "main")  # type: ignore[attr-defined]
    branch(demo, "feature-a", {"src/a.py": "a = 1\n"})
    branch(demo, "feature-b", {"src/b.py": "b = 1\n"})
    demo.start_workers()
    demo.sluice("reconfigure")

    first = enqueue(demo, "feature-a")
    wait_until(lambda: _running(demo, "slow"), 60, "the slow build of feature-a to run")
    out = demo.sluice(
        "dequeue",
        "--tenant",
        "demo",
        "--pipeline",
        "check",
        "--project",
        "app",
        "--ref",
        "feature-a",
    )
    assert out.split() == [first]

    old = enqueue(demo, "feature-b")
    wait_until(lambda: _running(demo, "slow"), 60, "the slow build of feature-b to run")
    demo.repos.commit("app", "feature-b", {"src/b.py": "b = 2\n"})
    new = enqueue(demo, "feature-b")
    assert new != old
    wait_until(
        lambda: (_running(demo, "slow") or {}).get("id") == new, 60, "the new commit's build to run"
    )
    demo.sluice(
        "dequeue",
        "--tenant",
        "demo",
        "--pipeline",
        "check",
        "--project",
        "app",
        "--ref",
        "feature-b",
    )
    demo.sluice("wait", "--idle", "--timeout", "60")

    sets = demo.buildsets()
    assert sorted(b["result"] for b in sets) == ["DEQUEUED", "DEQUEUED", "DEQUEUED"]
    assert sorted(b["result"] for b in demo.builds()) == ["ABORTED", "ABORTED", "ABORTED"]
    (superseded,) = [b for b in sets if b["message"] == "superseded by a newer commit"]
    assert superseded["ref"] == "feature-b"


def test_rerun_takes_the_item_out_and_runs_its_jobs_again(system: SluiceSystem) -> None:
    from tests.e2e.test_check_pipeline import prepare_check

    prepare_check(system)
    system.start_workers()
    system.sluice("reconfigure")
    first = system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    args = ["--tenant", "demo", "--pipeline", "check", "--project", "app", "--branch", "main"]
    second = system.sluice("rerun", *args, "--ref", "feature").strip().splitlines()[-1]
    assert len(second) == 32 and second != first
    system.sluice("wait", "--idle", "--timeout", "90")
    assert len(system.buildsets()) == 2
    assert sorted(b["job"] for b in system.builds()) == sorted(["lint", "unit", "experimental"] * 2)
