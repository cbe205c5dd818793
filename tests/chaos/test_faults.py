"""Whole-system faults during a gate of five (RELIABILITY.md; the five CI rows).

Each test runs the gate with real workers while the fault happens and then
checks, through :meth:`GateRun.verify`, that every item completed, every
change merged exactly once, every build attempt is in SQL once, and no
ZooKeeper request or lock is left behind. The seconds printed are recorded in
docs/reliability.md.
"""

from __future__ import annotations

import signal
import time

import pytest
import redis

from cli.stack.process import is_alive
from cli.stack.redis import RedisServer
from cli.stack.zookeeper import ZooKeeperServer
from tests.chaos.gate import SESSION_TIMEOUT, GateRun
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.timeout(400)


def _dead(*pids: int) -> bool:
    return not any(is_alive(pid) for pid in pids)


def test_kill_9_of_an_executor_worker_mid_build(gate_run: GateRun) -> None:
    gate_run.start()
    gate_run.enqueue_all()
    job = gate_run.running_build_pid()
    victim = gate_run.worker_of(job)
    killed = time.monotonic()
    victim.kill(signal.SIGKILL)
    wait_until(lambda: _dead(victim.pid, job), 10, "the executor worker and its job to die")
    gate_run.finish()
    gate_run.verify()
    retried = [b for b in gate_run.system.builds() if b["attempt"] > 1]
    assert retried, "the killed build was run again"
    print(f"\nexecutor kill: {time.monotonic() - killed:.1f}s from kill to idle")


def test_kill_9_of_a_scheduler_worker_mid_processing(gate_run: GateRun) -> None:
    gate_run.start(hold_first_scheduler=True, schedulers=1)
    gate_run.hold_flag.touch()
    gate_run.enqueue_all()
    held = wait_until(
        lambda: list(gate_run.system.root.glob("hold.held-*")),
        60,
        "the first scheduler worker to hold mid-pass",
    )
    assert held
    gate_run.add_scheduler()
    (doomed,) = gate_run.schedulers[:1]
    killed = time.monotonic()
    doomed.kill(signal.SIGKILL)
    wait_until(lambda: _dead(doomed.pid), 10, "the scheduler worker to die")
    gate_run.finish()
    gate_run.verify()
    print(f"\nscheduler kill: {time.monotonic() - killed:.1f}s from kill to idle")


def test_a_paused_scheduler_worker_cannot_write_after_its_session_expired(
    gate_run: GateRun,
) -> None:
    gate_run.start(hold_first_scheduler=True, schedulers=1)
    gate_run.hold_flag.touch()
    gate_run.enqueue_all()
    wait_until(
        lambda: list(gate_run.system.root.glob("hold.held-*")),
        60,
        "the first scheduler worker to hold mid-pass",
    )
    (stale,) = gate_run.schedulers[:1]
    stale.kill(signal.SIGSTOP)
    gate_run.add_scheduler()
    # Past its session timeout, the stopped worker's lock is gone; the other
    # worker takes over. Then the stale one wakes up where it stopped: right
    # before its commit.
    time.sleep(SESSION_TIMEOUT + 2)  # the fault itself: a pause longer than the session
    gate_run.hold_flag.unlink()
    stale.kill(signal.SIGCONT)
    gate_run.finish()
    gate_run.verify()
    log = stale.log_text()
    assert "refusing to write" in log or "fenced write refused" in log, log[-3000:]


def test_the_broker_emptied_and_restarted(gate_run: GateRun, redis_server: RedisServer) -> None:
    gate_run.start()
    gate_run.enqueue_all()
    gate_run.wait_enqueued()  # the fault hits running builds, not the enqueue commands
    gate_run.running_build_pid()
    redis.Redis.from_url(redis_server.url).flushall()
    redis_server.stop()
    redis_server.start()
    redis_server.wait_ready()
    restarted = time.monotonic()
    gate_run.finish()
    gate_run.verify()
    print(f"\nbroker flush+restart: {time.monotonic() - restarted:.1f}s from restart to idle")


def test_zookeeper_restarted_mid_run(gate_run: GateRun, zookeeper_server: ZooKeeperServer) -> None:
    gate_run.start()
    gate_run.enqueue_all()
    gate_run.wait_enqueued()  # the fault hits running builds, not the enqueue commands
    gate_run.running_build_pid()
    zookeeper_server.stop()
    zookeeper_server.start()
    zookeeper_server.wait_ready()
    restarted = time.monotonic()
    gate_run.finish()
    gate_run.verify()
    print(f"\nZooKeeper restart: {time.monotonic() - restarted:.1f}s from restart to idle")
