"""Every maintenance worker runs the sweep timer: losing one never stops recovery.

Two maintenance workers, each with its own timer (``--beat``), take turns:
the sweep's ZooKeeper lock lets one sweep at a time. One is killed with
SIGKILL; an event whose nudge was lost (put straight into ZooKeeper, no
message sent) is still found and processed by the survivor's sweep.
"""

from __future__ import annotations

import signal

import pytest

from scheduler.zk import paths
from scheduler.zk.client import connect
from scheduler.zk.event_queue import EventQueue
from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem

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
