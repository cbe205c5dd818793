"""A paused job whose worker dies is retried with every job that depends on it (Zuul's
TestJobPause.test_job_pause_retry), end to end: real workers, a SIGKILL, the sweep."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.e2e.system import TENANT_YAML, SluiceSystem
from tests.fixtures.waiting import wait_until

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

ZUUL_YAML = """
    - job:
        name: compile
        run: ci/compile.sh
        post-run: ci/compile-post.sh
    - job:
        name: test
        run: ci/test.sh
        dependencies: [compile]
    - project:
        check:
          jobs: [compile, test]
    """

# {markers}, {go}: absolute paths (the test's folder is open to sandboxed jobs).
# compile pauses with its own build uuid as the artifact.
COMPILE = """#!/bin/sh
echo "compile-run $SLUICE_BUILD" >> {markers}
printf '{{"zuul": {{"pause": true}}, "artifact": "%s"}}' "$SLUICE_BUILD" > "$SLUICE_RESULT_FILE"
"""
COMPILE_POST = """#!/bin/sh
echo "compile-post $SLUICE_BUILD" >> {markers}
"""
# test waits for the go file, then passes only with the data of the latest
# compile build (a run on the lost build's data, or none, fails)
TEST = """#!/bin/sh
artifact=$(python3 -c 'import json, os
print(json.load(open(os.environ["SLUICE_VARS_FILE"])).get("artifact", ""))')
for _ in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done
latest=$(grep compile-run {markers} | tail -n 1 | cut -d' ' -f2)
[ -n "$artifact" ] && [ "$artifact" = "$latest" ] || exit 3
echo "test-done $artifact" >> {markers}
"""


def job_states(system: SluiceSystem) -> dict[str, str]:
    status = json.loads(system.sluice("status", "--json"))
    return {
        job["name"]: job["state"]
        for tenant in status["tenants"]
        for pipeline in tenant["pipelines"]
        for queue in pipeline["queues"]
        for item in queue["items"]
        for job in item["jobs"]
    }


@pytest.mark.timeout(300)
def test_a_lost_paused_job_is_retried_with_its_dependents(system: SluiceSystem) -> None:
    system.environment.session_timeout = 4.0
    markers, go = system.root / "markers.txt", system.root / "go"
    markers.touch()
    markers.chmod(0o666)  # every build appends: each is a user of its own
    scripts = {"ci/compile.sh": COMPILE, "ci/compile-post.sh": COMPILE_POST, "ci/test.sh": TEST}
    files = {k: v.format(markers=markers, go=go) for k, v in scripts.items()}
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", {".zuul.yaml": ZUUL_YAML, **files})
    system.repos.commit("app", "feature-1", {"src/a.py": "a = 1\n"}, base=base)
    system.start_worker(
        ("scheduler", "merger", "maintenance"), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True
    )
    doomed = system.start_worker(("executor",), concurrency=3)
    system.sluice("reconfigure")
    system.enqueue("feature-1")
    wanted = {"compile": "paused", "test": "running"}
    wait_until(lambda: job_states(system) == wanted, 90, "test to run while compile is paused")

    doomed.kill(signal.SIGKILL)  # both builds are lost; the sweep records them
    go.touch()
    system.start_worker(("executor",), concurrency=3)
    system.sluice("wait", "--idle", "--timeout", "180")

    lines = Path(markers).read_text().splitlines()
    runs = [line.split()[1] for line in lines if line.startswith("compile-run")]
    assert len(runs) == 2, lines
    # the test ran again on the new compile's data, then the new compile resumed
    assert lines[-2:] == [f"test-done {runs[1]}", f"compile-post {runs[1]}"], lines
    results: dict[str, list[str]] = {}
    for build in sorted(system.builds(), key=lambda b: b["attempt"]):
        results.setdefault(build["job"], []).append(build["result"])
    # SQL shows a retried attempt as RETRY (docs/reporting.md)
    assert results["compile"] == ["RETRY", "SUCCESS"], results
    assert results["test"][-1] == "SUCCESS" and len(results["test"]) >= 2, results
    (buildset,) = system.buildsets()
    assert buildset["result"] == "SUCCESS"
