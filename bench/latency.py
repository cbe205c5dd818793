"""Enqueue to first build start, unloaded: one change at a time (issue 17, item 4).

A check pipeline with one no-op job, real workers (one scheduler, one
merger, one executor, as ``bench/throughput.py`` starts them). After a
warm-up change, N changes are enqueued one at a time, each after the
previous one was reported and a pause, so nothing queues behind anything:
the figure is the system's own latency, not its queueing. Printed beside
the Celery no-op round trip measured in the same run (the floor of one
hand-off; the path has three: tenant hop -> pass -> merger -> pass ->
executor). ``--smoke``: three changes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _checksystem import check_system, percentile, start_workers
from _system import Services, epoch


def one_round_trip_ms(services: Services, count: int) -> float:
    """Median ms of Celery's no-op ``celery.accumulate`` sent and awaited, one at a time."""
    phase = services.system(f"ping-{time.monotonic_ns()}")
    app = phase.system.environment.client_app()
    phase.system.start_worker(("executor",), concurrency=1)
    try:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            app.send_task("celery.accumulate", args=[1], queue="executor").get(timeout=30)
            times.append(1000 * (time.perf_counter() - started))
        return statistics.median(times)
    finally:
        phase.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--pause", type=float, default=1.5, help="seconds between changes")
    parser.add_argument("--smoke", action="store_true", help="three changes (make test)")
    args = parser.parse_args()
    count = 3 if args.smoke else args.changes
    with tempfile.TemporaryDirectory(prefix="sluice-latency-") as tmp:
        services = Services(Path(tmp))
        try:
            services.start()
            check = check_system(services, "latency", count + 1, 1)
            start_workers(check)
            try:
                check.enqueue(check.refs[:1])  # warm-up
                check.wait_reported(check.refs[:1])
                latencies = []
                for ref in check.refs[1:]:
                    time.sleep(args.pause)
                    sent = check.enqueue([ref])
                    check.wait_reported([ref])
                    builds, _ = check.phase.rows()
                    start = min(epoch(b["start_time"]) or 0.0 for b in builds if b["ref"] == ref)
                    latencies.append(1000 * (start - sent[ref]))
            finally:
                check.phase.stop()
            floor = one_round_trip_ms(services, 20)
        finally:
            services.stop()
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    print(f"enqueue -> first build start, unloaded ({len(latencies)} changes, one at a time):")
    print(f"  min {min(latencies):.0f} ms   p50 {p50:.0f} ms   p99 {p99:.0f} ms")
    print(f"  Celery no-op round trip (one hand-off), same run: {floor:.1f} ms")
    print(f"  p50 / round trip: {p50 / floor:.1f}")


if __name__ == "__main__":
    main()
