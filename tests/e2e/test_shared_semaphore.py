"""A semaphore shared by two pipelines, and by two tenants, on real workers.

The waiter in the other pipeline (or tenant) must be woken when the holder
releases its slot; the builds never overlap.
"""

from __future__ import annotations

import itertools
from datetime import datetime

import pytest

from tests.e2e.system import SluiceSystem

TENANTS = """
- global-semaphore:
    name: deploy-prod
    max: 1
- tenant:
    name: demo
    semaphores: [deploy-prod]
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
- tenant:
    name: other
    semaphores: [deploy-prod]
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
"""

CONFIG = {
    "zuul.d/base.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
        - pipeline:
            name: gate
            manager: dependent
        - job:
            name: base
            parent: null
            timeout: 120
        - semaphore:
            name: deploy
            max: 1
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: deploy
            run: ci/deploy.sh
            semaphores: [deploy]
        - job:
            name: deploy-prod
            run: ci/deploy.sh
            semaphores: [deploy-prod]
        - project:
            check:
              jobs: [deploy]
            gate:
              jobs: [deploy]
        """,
    "ci/deploy.sh": "#!/bin/sh\nsleep 2\n",
}


@pytest.fixture
def demo(system: SluiceSystem) -> SluiceSystem:
    system.tenant(TENANTS)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    for ref in ("one", "two"):
        system.repos.commit("app", ref, {f"{ref}.txt": "x\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "main")
    return system


def intervals(system: SluiceSystem, job: str) -> list[tuple[datetime, datetime]]:
    spans = []
    for build in system.builds():
        if build["job"] == job:
            assert build["result"] == "SUCCESS", build
            start, end = (datetime.fromisoformat(build[k]) for k in ("start_time", "end_time"))
            spans.append((start, end))
    return sorted(spans)


def assert_serial(spans: list[tuple[datetime, datetime]], count: int) -> None:
    assert len(spans) == count, spans
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, spans


def test_check_and_gate_share_a_semaphore(demo: SluiceSystem) -> None:
    demo.start_worker(concurrency=4)
    demo.sluice("reconfigure")
    demo.enqueue("one", "check")
    demo.enqueue("two", "gate")
    demo.sluice("wait", "--idle", "--timeout", "90")
    assert {b["pipeline"]: b["result"] for b in demo.buildsets()} == {
        "check": "SUCCESS",
        "gate": "SUCCESS",
    }
    assert_serial(intervals(demo, "deploy"), 2)


def test_two_tenants_share_a_global_semaphore(demo: SluiceSystem) -> None:
    app = APP[".zuul.yaml"].replace("jobs: [deploy]", "jobs: [deploy-prod]")
    base = demo.repos.commit("app", "main", {".zuul.yaml": app})
    for ref in ("one", "two"):
        demo.repos.commit("app", ref, {f"{ref}.txt": "x\n"}, base=base)
    demo.repos.git("app", "checkout", "-q", "main")
    demo.start_worker(concurrency=4)
    demo.sluice("reconfigure")
    demo.enqueue("one", "check", tenant="demo")
    demo.enqueue("two", "check", tenant="other")
    demo.sluice("wait", "--idle", "--timeout", "90")
    assert sorted(b["result"] for b in demo.buildsets()) == ["SUCCESS", "SUCCESS"]
    assert_serial(intervals(demo, "deploy-prod"), 2)
