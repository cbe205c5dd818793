"""Component registry and ltime."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from scheduler.stores import components
from scheduler.zk.client import ZooKeeperClient
from scheduler.zk.ltime import ltime
from tests.fixtures.waiting import wait_until
from tests.zk.conftest import Script


def test_register_update_list_and_vanish(make_client: Callable[..., ZooKeeperClient]) -> None:
    observer = make_client()
    worker_client = make_client(session_timeout=1.0)
    one = components.register(
        worker_client, "executor", version="0.1.0", handles=("executor", "executor.east")
    )
    two = components.register(observer, "executor", version="0.1.0")
    components.register(observer, "merger")
    listed = components.list_components(observer, "executor")
    assert [c.path for c in listed] == sorted([one.path, two.path])
    mine = next(c for c in listed if c.path == one.path)
    assert mine.pid == os.getpid() and mine.handles == ("executor", "executor.east")
    assert mine.state == "running"
    one.update(state="paused", builds=3)
    mine = next(c for c in components.list_components(observer, "executor") if c.path == one.path)
    assert mine.state == "paused" and mine.extra["builds"] == 3
    assert len(components.list_components(observer, "merger")) == 1
    assert components.list_components(observer, "web") == []
    worker_client.stop()  # the process "dies": its node goes with its session
    wait_until(
        lambda: [c.path for c in components.list_components(observer, "executor")] == [two.path],
        timeout=5,
        what="dead component gone",
    )
    two.unregister()
    assert components.list_components(observer, "executor") == []


def test_ltime_increases_with_every_write(zk: ZooKeeperClient) -> None:
    first = ltime(zk)
    zk.create("/something", b"x")
    stat = zk.exists("/something")
    second = ltime(zk)
    assert first < stat.mzxid < second


def test_killed_process_leaves_the_registry_within_the_session_timeout(
    zk: ZooKeeperClient, script: Callable[..., Script]
) -> None:
    worker = script("component", session_timeout=1.0)
    path = worker.expect("registered").split()[1]
    (listed,) = components.list_components(zk, "executor")
    assert listed.path == path and listed.pid == worker.pid
    worker.kill9()
    started = time.monotonic()
    wait_until(lambda: components.list_components(zk, "executor") == [], timeout=5, what="gone")
    assert time.monotonic() - started <= 1.0 + 1.0
