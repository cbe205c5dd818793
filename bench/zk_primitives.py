"""Throughput of the ZooKeeper recipes beside raw kazoo, measured in the same run.

Starts its own ZooKeeper (Debian's package) on a free port, then prints
ops/s for:

* raw kazoo create+delete (the yardstick, two round trips),
* event put+ack (:class:`scheduler.zk.event_queue.EventQueue`),
* lock acquire+release (:func:`scheduler.zk.locks.acquire`, kazoo ``Lock``),
* claim+release (:func:`scheduler.zk.locks.claim`, one create),
* request lifecycle: submit, claim, complete, read result
  (:class:`scheduler.zk.job_requests.JobRequestQueue`),

each with its ratio to raw create+delete. Not run in CI:
``.venv/bin/python bench/zk_primitives.py [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from scheduler.settings import ZooKeeperSettings
from scheduler.stack.process import free_port
from scheduler.stack.zookeeper import ZooKeeperServer
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.job_requests import JobRequest, JobRequestQueue


def measure(seconds: float, operation: Callable[[int], None]) -> float:
    """Operations per second of ``operation(i)`` over about ``seconds``."""
    for i in range(20):  # warm up (paths created, JIT of the server)
        operation(-i - 1)
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        operation(count)
        count += 1
    return count / (time.perf_counter() - started)


def raw_create_delete(client: ZooKeeperClient) -> Callable[[int], None]:
    kazoo = client.kazoo
    kazoo.ensure_path("/bench/raw")

    def op(i: int) -> None:
        path = kazoo.create("/bench/raw/n", b"x" * 100, sequence=True)
        kazoo.delete(path)

    return op


def event_put_ack(client: ZooKeeperClient) -> Callable[[int], None]:
    queue = EventQueue(client, paths.pipeline_trigger_queue("bench", "check"))

    def op(i: int) -> None:
        queue.put({"type": "change-updated", "change": i, "project": "org/repo"})
        (event,) = queue.read(limit=1)
        queue.ack(event)

    return op


def lock_cycle(client: ZooKeeperClient) -> Callable[[int], None]:
    def op(i: int) -> None:
        held = locks.acquire(client, paths.pipeline_lock("bench", "gate"))
        assert held is not None
        held.release()

    return op


def claim_cycle(client: ZooKeeperClient) -> Callable[[int], None]:
    def op(i: int) -> None:
        held = locks.claim(client, paths.request_child(paths.merger_queue(), "locks", "bench"))
        assert held is not None
        held.release()

    return op


def request_lifecycle(client: ZooKeeperClient) -> Callable[[int], None]:
    queue = JobRequestQueue(client, paths.executor_queue())
    result_queue = paths.pipeline_result_queue("bench", "gate")

    def op(i: int) -> None:
        request = JobRequest(uuid.uuid4().hex, job_name="noop", result_queue=result_queue)
        queue.submit(request, {"vars": {"i": i}})
        claimed = queue.claim(request.uuid, "bench-executor")
        assert claimed is not None
        queue.complete(claimed, {"result": "SUCCESS"})
        assert queue.get_result(request.uuid) is not None

    return op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        server = ZooKeeperServer(data_dir=Path(tmp), port=free_port())
        server.start()
        try:
            server.wait_ready(timeout=60)
            client = connect(ZooKeeperSettings(hosts=server.hosts, root="/bench-root"))
            try:
                run(client, args.seconds)
            finally:
                client.stop()
                client.close()
        finally:
            server.stop()


def run(client: ZooKeeperClient, seconds: float) -> None:
    raw = measure(seconds, raw_create_delete(client))
    print(f"{'operation':34} {'ops/s':>9} {'raw ops/s':>10} {'ratio':>7}")
    print(f"{'raw kazoo create+delete':34} {raw:9.0f} {raw:10.0f} {1.0:7.2f}")
    for name, factory in (
        ("event put+read+ack", event_put_ack),
        ("lock acquire+release (kazoo Lock)", lock_cycle),
        ("claim+release (one create)", claim_cycle),
        ("request submit+claim+complete+read", request_lifecycle),
    ):
        rate = measure(seconds, factory(client))
        # Raw measured again right after, so drift (fsync, GC) hits both alike.
        raw_now = measure(seconds / 3, raw_create_delete(client))
        print(f"{name:34} {rate:9.0f} {raw_now:10.0f} {rate / raw_now:7.2f}")


if __name__ == "__main__":
    main()
