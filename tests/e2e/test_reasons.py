"""Why items left and what resets cost, end to end: the CLI, the SQL record, the metrics.

A gate of three on real workers: c1 fails (once the test says go), c2 passed
on top of it already (a finished build thrown away by the reset), c3 is
dequeued by hand while it runs. c2 is retested on the branch tip and, the
second time, waits for a second go-flag so the test sees its reset in
``sluice status --json``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.system import SluiceSystem, dedent
from tests.e2e.test_gate import CONFIG, MAIN_YAML
from tests.e2e.test_metrics import _scrape, _value, exporter  # noqa: F401
from tests.fixtures.waiting import wait_until

# A tree holds the files of the changes it is tested on: c1 fails alone (FAIL
# without c2's file); c2 passes on c1 the first time and waits for go2 the next.
UNIT = """#!/bin/sh
if test -e FAIL && ! test -e src/c2.py; then
  while [ ! -e {go} ]; do sleep 0.1; done
  exit 1
fi
if test -e AGAIN && ! test -e src/c3.py; then
  test -e {ran} && while [ ! -e {go2} ]; do sleep 0.1; done
  touch {ran}
fi
test -e SLOW && while [ ! -e {go} ]; do sleep 0.1; done
exit 0
"""


def gate_items(system: SluiceSystem) -> dict[str, dict[str, Any]]:
    status = json.loads(system.sluice("status", "--json"))
    return {
        item["ref"]: item
        for tenant in status["tenants"]
        for pipeline in tenant["pipelines"]
        if pipeline["name"] == "gate"
        for queue in pipeline["queues"]
        for item in queue["items"]
    }


@pytest.mark.timeout(300)
def test_a_failure_that_resets_the_item_behind_and_an_operator_dequeue(
    system: SluiceSystem,
    exporter: str,  # noqa: F811
) -> None:
    root = system.root
    go, go2, ran = root / "go", root / "go2", root / "c2-ran"
    app = {
        ".zuul.yaml": """
            - job:
                name: unit
                run: ci/unit.sh
            - project:
                gate:
                  jobs: [unit]
            """,
        "ci/unit.sh": UNIT.format(go=go, go2=go2, ran=ran),
    }
    system.tenant(MAIN_YAML)
    system.repos.commit(
        "config", "main", {"zuul.d/pipelines.yaml": dedent(CONFIG["zuul.d/pipelines.yaml"])}
    )
    base = system.repos.commit("app", "main", app)
    changes = {"c1": {"FAIL": "x"}, "c2": {"AGAIN": "x"}, "c3": {"SLOW": "x"}}
    for ref, files in changes.items():
        system.repos.commit("app", ref, {f"src/{ref}.py": "x\n", **files}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_worker(("scheduler", "merger", "maintenance"))
    system.start_worker(("executor",), concurrency=4)
    system.sluice("reconfigure")
    for ref in changes:
        system.enqueue(ref, "gate")

    def c2_passed_on_c1() -> bool:
        jobs = gate_items(system).get("c2", {}).get("jobs", [])
        return bool(jobs) and jobs[0]["result"] == "SUCCESS"

    wait_until(c2_passed_on_c1, 120, "c2's first build to pass (on top of c1)", interval=0.3)
    system.sluice(
        "dequeue", "--tenant", "demo", "--pipeline", "gate", "--project", "app", "--ref", "c3"
    )
    go.touch()  # c1 fails: c2 is reset, its passed build thrown away

    def c2_reset() -> dict[str, Any] | None:
        c2 = gate_items(system).get("c2")
        return c2 if c2 and c2["resets"]["count"] == 1 and "c1" not in gate_items(system) else None

    wait_until(lambda: c2_reset() is not None, 120, "c2 reset by c1's failure", interval=0.3)
    c2 = c2_reset()
    assert c2 is not None
    assert c2["resets"]["builds"] == 1 and c2["resets"]["ci_seconds"] > 0
    cause = c2["resets"]["cause"]
    assert (cause["ref"], cause["kind"]) == ("c1", "failed")
    assert c2["dequeue_reason"] is None and c2["failing_reasons"] == []
    go2.touch()
    system.sluice("wait", "--idle", "--timeout", "150")

    # the SQL record (sluice buildsets --json)
    records = {b["ref"]: b for b in system.buildsets()}
    assert {ref: b["result"] for ref, b in records.items()} == {
        "c1": "FAILURE",
        "c2": "SUCCESS",
        "c3": "DEQUEUED",
    }
    assert records["c1"]["reason"]["kind"] == "failed"
    assert records["c1"]["reason"]["jobs"] == ["unit"]
    assert records["c1"]["reset_cost"]["resets"] == 1
    assert records["c1"]["reset_cost"]["builds"] == 1
    assert records["c3"]["reason"]["kind"] == "operator"
    assert records["c2"]["reason"] is None and records["c2"]["resets"]["count"] == 1

    # the metrics
    labels = {"tenant": "demo", "pipeline": "gate"}
    samples = _scrape(exporter)
    assert _value(samples, "sluice_dequeues_total", reason="failed", **labels) == 1
    assert _value(samples, "sluice_dequeues_total", reason="operator", **labels) == 1
    queue = {**labels, "queue": "app"}
    assert _value(samples, "sluice_queue_resets_total", **queue) == 1
    wasted = _value(samples, "sluice_ci_seconds_wasted_total", **queue)
    assert wasted is not None and wasted > 0
    assert _value(samples, "sluice_time_in_queue_seconds_count", **queue) == 3
