"""Workers in the component registry: ``sluice components`` as an operator sees it."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.e2e.system import SluiceSystem
from tests.fixtures.waiting import wait_until


def _components(system: SluiceSystem) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(system.sluice("components", "--json"))
    return found


def test_workers_register_and_leave(system: SluiceSystem) -> None:
    scheduler = system.start_worker(("scheduler",))
    executor = system.start_worker(("executor",))
    mixed = system.start_worker(("merger", "maintenance"))

    def registered() -> bool:
        return len(_components(system)) == 3

    wait_until(registered, 30, "three workers registered", interval=0.2)
    by_pid = {c["pid"]: c for c in _components(system)}
    assert by_pid[scheduler.pid]["kind"] == "scheduler"
    assert by_pid[executor.pid]["kind"] == "executor"
    assert by_pid[mixed.pid]["kind"] == "worker"
    assert by_pid[mixed.pid]["queues"] == ["maintenance", "merger"]
    for entry in by_pid.values():
        assert entry["state"] == "running" and entry["version"] == "0.1.0"
        assert entry["node"].startswith("test-") and entry["since"] <= time.time()
    table = system.sluice("components")
    assert table.splitlines()[0].split() == [
        "KIND",
        "HOST",
        "PID",
        "QUEUES",
        "STATE",
        "VERSION",
        "SINCE",
    ]
    assert str(executor.pid) in table

    # a worker stopped cleanly leaves at once; one killed, within its session timeout
    scheduler.stop()
    assert scheduler.pid not in {c["pid"] for c in _components(system)}
    executor.kill()
    killed = time.monotonic()

    def gone() -> bool:
        return executor.pid not in {c["pid"] for c in _components(system)}

    wait_until(gone, system.environment.session_timeout + 10, "the killed worker gone")
    assert time.monotonic() - killed <= system.environment.session_timeout + 10
    assert [c["kind"] for c in _components(system)] == ["worker"]
    assert system.sluice("components", "--kind", "executor", "--json").strip() == "[]"


def test_an_unreachable_zookeeper_never_holds_up_a_worker(system: SluiceSystem) -> None:
    # start_worker waits for the worker to answer a Celery ping
    worker = system.start_worker(("merger",), env={"SLUICE_ZK_HOSTS": "127.0.0.1:9"})
    wait_until(
        lambda: "component registration failed" in worker.log_text(),
        60,
        "the failed registration logged",
    )
