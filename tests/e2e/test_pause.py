"""Zuul's job pause on real workers: dependents start, read the data, the parent resumes.

A job pauses by returning ``{"zuul": {"pause": true}}`` in its result data
(``SLUICE_RESULT_FILE``); its dependents start while it waits, receive its
data as parent data, and it resumes (its post-run runs) once they finished.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

CONFIG = CHECK_CONFIG

APP = {
    ".zuul.yaml": """
        - job:
            name: registry
            run: ci/registry.sh
            post-run: ci/registry-post.sh
        - job:
            name: test
            run: ci/test.sh
            dependencies: [registry]
        - project:
            check:
              jobs: [registry, test]
        """,
    # pauses with data for its dependents
    "ci/registry.sh": (
        "#!/bin/sh\n"
        'echo \'{"zuul": {"pause": true}, "registry": "127.0.0.1:5000"}\' > "$SLUICE_RESULT_FILE"\n'
    ),
    # runs after the dependents finished: stamps the time
    "ci/registry-post.sh": "#!/bin/sh\necho post-run of the paused job\ndate +%s.%N\n",
    # reads the parent's data from its vars file
    "ci/test.sh": (
        "#!/bin/sh\n"
        'cat "$SLUICE_VARS_FILE"\n'
        'grep -q 127.0.0.1:5000 "$SLUICE_VARS_FILE" || exit 1\n'
        "test -e WAIT && sleep 60\n"
        "exit 0\n"
    ),
}


@pytest.fixture
def demo(system: SluiceSystem) -> SluiceSystem:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.app_base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    return system


def builds_by_job(system: SluiceSystem) -> dict[str, dict[str, str]]:
    return {b["job"]: b for b in system.builds()}


def test_dependents_run_while_the_parent_is_paused_then_it_resumes(demo: SluiceSystem) -> None:
    demo.repos.commit("app", "feature", {"src/x": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_workers()
    demo.sluice("reconfigure")
    demo.enqueue("feature")
    demo.sluice("wait", "--idle", "--timeout", "120")
    builds = builds_by_job(demo)
    assert {job: b["result"] for job, b in builds.items()} == {
        "registry": "SUCCESS",
        "test": "SUCCESS",
    }
    (buildset,) = demo.buildsets()
    assert buildset["result"] == "SUCCESS"
    # the dependent got the paused job's data
    assert "127.0.0.1:5000" in Path(builds["test"]["log_url"]).read_text()
    # the paused job resumed after its dependent ended: its post-run ran last
    log = Path(builds["registry"]["log_url"]).read_text()
    assert "post-run of the paused job" in log
    test_end = builds["test"]["end_time"]
    assert test_end is not None
    assert builds["registry"]["end_time"] >= test_end


def test_a_paused_job_is_cancelled_with_its_item(demo: SluiceSystem) -> None:
    demo.repos.commit("app", "feature", {"WAIT": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_worker(concurrency=4)  # a paused and a sleeping build hold two processes
    demo.sluice("reconfigure")
    demo.enqueue("feature")
    wait_until(
        lambda: "paused" in demo.sluice("status") and "running" in demo.sluice("status"),
        timeout=60,
        what="the registry job paused and test running",
    )
    demo.sluice(
        "dequeue", "--tenant", "demo", "--pipeline", "check", "--project", "app", "--ref", "feature"
    )
    demo.sluice("wait", "--idle", "--timeout", "60")
    results = {job: b["result"] for job, b in builds_by_job(demo).items()}
    assert results == {"registry": "ABORTED", "test": "ABORTED"}, results
    assert json.dumps(demo.buildsets()[0]["result"]) == '"DEQUEUED"'
