"""Periodic pipelines on real workers: the timer fires every project-branch, once.

Two maintenance workers run the timer generator's election; a spec that
fires every five seconds enqueues each branch of ``app`` that runs jobs in
``periodic``. Killing the generator hands the election to the other worker
and firing goes on; no firing happens twice (each is recorded with its
events in one transaction).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

from scheduler.zk import paths
from scheduler.zk.client import connect
from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until

TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects: [app]
"""
CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: periodic
            manager: independent
            trigger:
              timer:
                - time: '* * * * * */5'
        - job:
            name: base
            parent: null
            timeout: 60
        """,
}
APP = {
    ".zuul.yaml": """
        - job:
            name: nightly
            run: ci/nightly.sh
        - project:
            periodic: {jobs: [nightly]}
        """,
    "ci/nightly.sh": "#!/bin/sh\necho nightly\n",
}


def test_periodic_pipelines_fire_on_every_branch(system: SluiceSystem) -> None:
    text = system.config.read_text()
    system.config.write_text(text + "  timer:\n    driver: timer\n")
    system.tenant(TENANT)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "stable", {"stable.txt": "1\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_worker(("scheduler", "merger", "executor"), concurrency=2)
    first = system.start_worker(("maintenance",), concurrency=1)
    system.sluice("reconfigure")

    def branches_run(count: int) -> bool:
        runs = Counter(b["branch"] for b in system.buildsets())
        return runs["main"] >= count and runs["stable"] >= count

    wait_until(lambda: branches_run(1), 60, "a periodic run of main and stable", interval=0.5)
    client = connect(system.environment.zookeeper.settings())
    try:
        holder = client.get_children(paths.timer_lock())
        assert len(holder) == 1
        second = system.start_worker(("maintenance",), concurrency=1)
        os.kill(first.pid, signal.SIGKILL)  # the generator dies; the other takes over
        done = len(system.buildsets())
        wait_until(
            lambda: len(system.buildsets()) >= done + 2, 60, "periodic runs after failover", 0.5
        )
        assert second.pid  # the survivor generates now
    finally:
        client.stop()
        client.close()
    system.sluice("wait", "--idle", "--timeout", "60")
    events = Counter((b["branch"], b["event_id"]) for b in system.buildsets())
    assert all(n == 1 for n in events.values()), events  # every firing once per branch
    assert all(b["result"] == "SUCCESS" for b in system.buildsets())
