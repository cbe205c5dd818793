"""Histograms of durations in ZooKeeper: concurrent observers lose no sample."""

from __future__ import annotations

import threading

from scheduler.stores import timings
from scheduler.zk.client import ZooKeeperClient
from tests.fixtures.waiting import wait_until


def test_samples_add_up_across_concurrent_writers(zk: ZooKeeperClient) -> None:
    def observe() -> None:
        for _ in range(10):
            timings.observe(zk, "test", [0.02, 3.0])

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    found = timings.read(zk, "test")
    assert found.count == 80
    assert round(found.total, 6) == round(40 * 0.02 + 40 * 3.0, 6)
    bounds = dict(zip(timings.BUCKETS, found.buckets, strict=True))
    assert bounds[0.01] == 0 and bounds[0.05] == 40 and bounds[2.5] == 40 and bounds[5] == 80
    assert timings.names(zk) == ["test"]


def test_nothing_observed_reads_empty(zk: ZooKeeperClient) -> None:
    assert timings.read(zk, "none").count == 0
    timings.observe(zk, "none", [])
    assert timings.names(zk) == []


def test_a_buffer_writes_once_for_many_samples(zk: ZooKeeperClient) -> None:
    buffer = timings.TimingsBuffer(zk, interval=0.2)
    for _ in range(50):
        buffer.add("buffered", [0.02])
    assert timings.read(zk, "buffered").count == 0, "nothing written before the interval"
    wait_until(lambda: timings.read(zk, "buffered").count == 50, 5, "the timer's flush")
    buffer.add("buffered", [3.0])
    buffer.flush()
    assert timings.read(zk, "buffered").count == 51
    assert timings.buffered(zk) is timings.buffered(zk)


def test_a_worker_process_shutdown_writes_what_its_buffers_hold(zk: ZooKeeperClient) -> None:
    """Samples younger than the flush interval are written before the clients close."""
    from tasks.app import _close_process_resources

    buffer = timings.buffered(zk)
    buffer.interval = 60.0  # the timer would not write them in this test's time
    buffer.add("at-shutdown", [0.02, 0.3])
    assert timings.read(zk, "at-shutdown").count == 0

    _close_process_resources()

    assert timings.read(zk, "at-shutdown").count == 2
