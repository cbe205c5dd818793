"""Every maintenance worker runs the sweep timer: losing one never stops recovery.

Two maintenance workers, each with its own timer (``--beat``), take turns:
the sweep's ZooKeeper lock lets one sweep at a time. One is killed with
SIGKILL; an event whose nudge was lost (put straight into ZooKeeper, no
message sent) is still found and processed by the survivor's sweep.
"""

from __future__ import annotations

import ast
import signal
from typing import Any

import pytest

from scheduler.zk import paths
from scheduler.zk.client import connect
from scheduler.zk.event_queue import EventQueue
from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.fixtures.published import META_PREFIX, Published
from tests.fixtures.waiting import wait_until

CONFIG = CHECK_CONFIG

APP = {
    ".zuul.yaml": "- job: {name: unit, run: ci/pass.sh}\n- project: {check: {jobs: [unit]}}\n",
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}


@pytest.mark.timeout(180)
def test_a_killed_maintenance_worker_leaves_the_sweep_running(system: SluiceSystem) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    feature = system.repos.commit("app", "feature", {"x": "x\n"}, base=base)
    system.start_worker(("scheduler", "merger", "executor"))
    fast = {"SLUICE_SWEEP_INTERVAL": "1"}
    first = system.start_worker(("maintenance",), env=fast, beat=True)
    system.start_worker(("maintenance",), env=fast, beat=True)
    system.sluice("reconfigure")
    first.kill(signal.SIGKILL)

    # an enqueue whose nudge was lost: the event is in ZooKeeper, no message sent
    client = connect(system.environment.zookeeper.settings())
    try:
        change = {
            "connection": "local",
            "project": "app",
            "branch": "main",
            "ref": "refs/heads/feature",
            "commit": feature,
        }
        queue = EventQueue(client, paths.tenant_management_queue("demo"))
        queue.put({"type": "enqueue", "change": change, "pipeline": "check"})
    finally:
        client.stop()
        client.close()
    system.sluice("wait", "--idle", "--timeout", "60")
    assert [(b["ref"], b["result"]) for b in system.buildsets()] == [
        ("refs/heads/feature", "SUCCESS")
    ]


@pytest.mark.timeout(120)
def test_a_sweep_keeps_no_result_in_redis(system: SluiceSystem, published: Published) -> None:
    """A sweep every second for a day would be 86,400 reports in the backend: none is kept.

    Its report goes out with its ``task-succeeded`` event (Flower shows it);
    the backend holds neither its STARTED state nor its result.
    """
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.start_worker(("maintenance",), env={"SLUICE_SWEEP_INTERVAL": "0.5"}, beat=True)

    def reports() -> list[dict[str, Any]]:
        published.read()
        done = [
            ast.literal_eval(event["result"])
            for events in published.events.values()
            for event in events
            if event["type"] == "task-succeeded" and event.get("result", "").startswith("{'ran'")
        ]
        return done if len(done) >= 3 else []

    sweeps = wait_until(reports, 60, "three sweeps")
    assert all("done" in report for report in sweeps)
    assert not published.states, published.states  # no state stored, so none published
    kept = list(published.redis.scan_iter(f"{META_PREFIX}*"))
    assert kept == [], kept
