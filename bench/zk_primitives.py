"""Throughput of the ZooKeeper recipes beside raw kazoo, measured in the same run.

Starts its own ZooKeeper (Debian's package) on a free port, then prints
ops/s for:

* event put+ack (:class:`scheduler.zk.event_queue.EventQueue`),
* lock acquire+release (:func:`scheduler.zk.locks.acquire`, the kazoo ``Lock`` algorithm),
* claim+release (:func:`scheduler.zk.locks.claim`, one create),
* request lifecycle: submit, claim, complete, read result
  (:class:`scheduler.stores.job_requests.JobRequestQueue`),

each beside raw kazoo create+delete (two round trips) measured in
alternating slices of the same run, and their ratio. Not run in CI:
``.venv/bin/python bench/zk_primitives.py [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from cli.stack import process
from cli.stack.process import start_on_free_port
from cli.stack.zookeeper import ZooKeeperServer
from scheduler.settings.sections import ZooKeeperSettings
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.zk import locks, paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue

# A benchmark killed from outside leaves no ZooKeeper behind.
process.children_die_with_parent()


def compare(
    seconds: float, operation: Callable[[int], None], raw: Callable[[int], None]
) -> tuple[float, float]:
    """Ops/s of ``operation`` and of ``raw``, measured in alternating 0.2 s slices.

    Interleaving makes drift (fsync stalls, other load on the machine) hit
    both alike, so their ratio is meaningful even when the absolute figures
    move from run to run.
    """
    for i in range(20):  # warm up (paths created, JIT of the server)
        operation(-i - 1)
        raw(-i - 1)
    counts = [0, 0]
    spent = [0.0, 0.0]
    total = 0
    while sum(spent) < 2 * seconds:
        for side, op in enumerate((operation, raw)):
            started = time.perf_counter()
            while time.perf_counter() - started < 0.2:
                op(total)
                total += 1
                counts[side] += 1
            spent[side] += time.perf_counter() - started
    return counts[0] / spent[0], counts[1] / spent[1]


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
        server = start_on_free_port(
            lambda port: ZooKeeperServer(data_dir=Path(tmp), port=port), timeout=60
        )
        try:
            client = connect(ZooKeeperSettings(hosts=server.hosts, root="/bench-root"))
            try:
                run(client, args.seconds)
            finally:
                client.stop()
                client.close()
        finally:
            server.stop()


def run(client: ZooKeeperClient, seconds: float) -> None:
    raw = raw_create_delete(client)
    print(f"{'operation':36} {'ops/s':>7} {'raw ops/s':>10} {'ratio':>6}")
    for name, factory in (
        ("event put+read+ack", event_put_ack),
        ("lock acquire+release", lock_cycle),
        ("claim+release (one create)", claim_cycle),
        ("request submit+claim+complete+read", request_lifecycle),
    ):
        rate, raw_rate = compare(seconds, factory(client), raw)
        print(f"{name:36} {rate:7.0f} {raw_rate:10.0f} {rate / raw_rate:6.2f}")


if __name__ == "__main__":
    main()
