"""Whole-system throughput on one host, beside ceilings measured in the same run.

Starts its own ZooKeeper (Debian's package) and Redis on free ports, then,
each phase in a fresh ZooKeeper chroot and state dir with its own real
``celery worker`` processes (the end-to-end tests' SluiceSystem):

1. **throughput**: a check pipeline, then a gate (dependent, every item
   tested on those ahead of it, reported in order), N changes x M no-op
   jobs (``true``), enqueued at once (management events put directly, as
   ``sluice enqueue`` puts them, then one nudge); builds/s and changes/s from
   the enqueue to the last reported build (SQL end_time), enqueue -> first
   build start latency per change (SQL start_time), ZooKeeper requests per
   build (``mntr`` zk_packets_received) and CPU ms per build of the worker
   process trees (/proc utime+stime, reaped children included);
2. **ceilings** with the same workers and Redis: a Celery round trip
   (``sluice.system.roundtrip``: one small ZooKeeper read and write in the
   worker) sent in a batch to the executor worker, and the bare ZooKeeper
   request lifecycle (submit, claim, complete, get_result, as
   bench/executor.py measures it), each beside builds/s as a ratio;
3. **gate depth**: a dependent pipeline of 10, 100, 500 items driven
   directly with ``process_pipeline`` (no workers; fixed one-job layout, an
   unlimited window so every item has a build), then one build result
   applied per run: the time of the pass that applies it and the bytes it
   writes (sum of the encoded operations of every transaction it commits:
   paths + data + 64 bytes a header; and the server's bytes_received
   counter from ``mntr``, which also counts the reads);
4. **recovery**: a check pipeline whose build sleeps 2 s, two executor
   workers, a 4 s session timeout and a 1 s sweep; kill -9 of the executor
   worker running a build, then the time from the kill to the retried
   build's start and end (SQL).

Prints a table and writes bench/results/throughput.json. Not run in CI:
``.venv/bin/python bench/throughput.py [--quick]``. ``--smoke`` runs every
phase once at tiny sizes and keeps nothing: ``make test`` runs it
(``tests/bench/test_smoke.py``) so a benchmark that breaks fails CI, and its
figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _checksystem import (
    CheckSystem,
    WorkerSetup,
    check_system,
    percentile,
    start_workers,
)
from _system import Services, cpu_seconds, epoch, worker_pids
from gate_depth import gate_depth, print_rows

from cli.stack.workers import EXECUTOR_CONCURRENCY
from scheduler.nudge import task_names
from scheduler.settings.load import load_settings
from scheduler.stores.job_requests import JobRequest, JobRequestQueue
from scheduler.zk import paths, trace
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.trace import TRACE_ENV
from tests.fixtures.waiting import wait_until

# mntr counters: bytes and packets the server received (four-letter words
# included: one packet of 4 bytes per ``mntr``), write requests it applied
# (a multi counts once), and fsyncs of its transaction log; the bytes of
# znode data written are the per-namespace counters (Services.written).
BYTES_IN = "zk_bytes_received_count"
PACKETS_IN = "zk_packets_received"
WRITES = "zk_cnt_updatelatency"
FSYNCS = "zk_cnt_fsynctime"
# Celery's own trivial task (returns its argument): a no-op round trip.
NOOP_TASK = "celery.accumulate"
RESULTS = Path(__file__).resolve().parent / "results" / "throughput.json"

# ------------------------------------------------------------------- 1. throughput


def traced_requests() -> Counter[str]:
    """Every process's traced requests so far (empty unless ``SLUICE_ZK_TRACE`` is set)."""
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return Counter()
    time.sleep(2.5 * trace.FLUSH_SECONDS)  # every process has written its latest counts
    return trace.summed(Path(folder))


def throughput_run(
    services: Services,
    changes: int,
    jobs: int,
    pipeline: str,
    setup: WorkerSetup,
    *,
    as_branches: bool = False,
    gate_merges: bool = False,
) -> dict[str, Any]:
    tag = f"{pipeline}-{changes}x{jobs}-{uuid.uuid4().hex[:6]}"
    check = check_system(
        services, tag, changes, jobs, as_branches=as_branches, gate_merges=gate_merges
    )
    try:
        start_workers(check, setup)
        warm = check.refs[:1]  # a first change warms imports, connections, caches
        check.enqueue(warm)
        check.wait_reported(warm)
        check.phase.system.sluice("wait", "--idle", "--timeout", "60")
        refs = check.refs[1:]
        pids = worker_pids(check.phase.system.started)
        roles = {
            role: [w.pid for w in check.phase.system.started if w.queues[0] == role]
            for role in ("scheduler", "merger", "executor")
        }
        role_before = {role: cpu_seconds(p) for role, p in roles.items()}
        traced_before = traced_requests()
        before = services.mntr()
        cpu_before = cpu_seconds(pids)
        service_cpu_before = cpu_seconds(services.pids())
        started = time.time()
        # markers for a profiler started from outside (perf record -p, py-spy)
        print(f"measuring {pipeline}: started", flush=True)
        sent = check.enqueue(refs, pipeline=pipeline)
        check.wait_reported(refs)
        print(f"measuring {pipeline}: done", flush=True)
        after = services.mntr()
        traced = traced_requests() - traced_before
        cpu_after = cpu_seconds(pids)
        role_after = {role: cpu_seconds(p) for role, p in roles.items()}
        service_cpu_after = cpu_seconds(services.pids())
        builds, sets = check.phase.rows()
        ceilings = measure_ceilings(services, check)
    finally:
        check.phase.stop()
    measured = [b for b in builds if b["ref"] in sent]
    assert len(measured) == len(refs) * jobs, (len(measured), len(refs), jobs)
    assert all(b["result"] == "SUCCESS" for b in measured), [b["result"] for b in measured]
    ends = [epoch(b["end_time"]) or 0.0 for b in measured]
    set_ends = [epoch(s["end_time"]) or 0.0 for s in sets if s["ref"] in sent]
    first_start = {
        ref: min(epoch(b["start_time"]) or 0.0 for b in measured if b["ref"] == ref) for ref in refs
    }
    latencies = [first_start[ref] - sent[ref] for ref in refs]
    span = max(ends) - started
    count = len(measured)
    packets = after[PACKETS_IN] - before[PACKETS_IN] - 1
    if traced:
        print(f"ZooKeeper requests per build by kind and path ({TRACE_ENV}):")
        for key, n in traced.most_common(40):
            print(f"  {n / count:6.2f}  {key}")
    return {
        "changes": len(refs),
        "jobs": jobs,
        "builds": count,
        "seconds": span,
        "builds_per_s": count / span,
        "changes_per_s": len(refs) / (max(set_ends) - started),
        "first_start_min_s": min(latencies),
        "first_start_p50_s": percentile(latencies, 0.5),
        "first_start_p99_s": percentile(latencies, 0.99),
        "zk_requests_per_build": packets / count,
        "zk_writes_per_build": (after[WRITES] - before[WRITES]) / count,
        "cpu_ms_per_build": 1000 * (cpu_after - cpu_before) / count,
        **{
            f"cpu_ms_per_build_{role}": 1000 * (role_after[role] - role_before[role]) / count
            for role in roles
        },
        "zk_fsyncs_per_build": (after[FSYNCS] - before[FSYNCS]) / count,
        "zk_bytes_written_per_build": (services.written(after) - services.written(before)) / count,
        "zk_redis_cpu_ms_per_build": 1000 * (service_cpu_after - service_cpu_before) / count,
        **ceilings,
    }


# ------------------------------------------------------------------- 2. ceilings


def measure_ceilings(services: Services, check: CheckSystem) -> dict[str, float]:
    """Celery round trips/s (batch) and bare ZooKeeper request lifecycles/s.

    Both Celery tasks go to the executor worker (``--executor-concurrency``) over the
    run's Redis: Celery's own no-op ``celery.accumulate`` and Sluice's
    ``roundtrip`` (one small ZooKeeper read and write in the worker).
    """
    app = check.phase.factory.app

    def batch_rate(task: str, batch: int = 200) -> float:
        for _ in range(3):
            app.send_task(task, args=["warm"], queue="executor").get(timeout=30)
        started = time.perf_counter()
        results = [app.send_task(task, args=[f"b{i}"], queue="executor") for i in range(batch)]
        for result in results:
            result.get(timeout=60)
        return batch / (time.perf_counter() - started)

    celery_rate = batch_rate(NOOP_TASK)
    roundtrip_rate = batch_rate(task_names.ROUNDTRIP)
    single = []
    for i in range(20):
        one = time.perf_counter()
        app.send_task(NOOP_TASK, args=[f"s{i}"], queue="executor").get(timeout=30)
        single.append(time.perf_counter() - one)
    client = connect(load_settings().zookeeper)
    try:
        lifecycle_rate = rate(request_lifecycle(client), seconds=2.0)
    finally:
        client.stop()
        client.close()
    return {
        "celery_roundtrips_per_s": celery_rate,
        "celery_zk_roundtrips_per_s": roundtrip_rate,
        "celery_roundtrip_ms": 1000 * statistics.median(single),
        "zk_lifecycles_per_s": lifecycle_rate,
    }


def request_lifecycle(client: ZooKeeperClient) -> Callable[[], None]:
    """bench/executor.py's bare lifecycle: submit, claim, complete, get_result."""
    queue = JobRequestQueue(client, paths.executor_queue("raw"))
    results = paths.pipeline_result_queue("bench", "raw")

    def op() -> None:
        request = JobRequest(uuid.uuid4().hex, job_name="noop", result_queue=results)
        queue.submit(request, {"vars": {}})
        claimed = queue.claim(request.uuid, "bench-executor")
        assert claimed is not None
        queue.complete(claimed, {"result": "SUCCESS"})
        assert queue.get_result(request.uuid) is not None

    return op


def rate(op: Callable[[], None], seconds: float) -> float:
    for _ in range(5):
        op()
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        op()
        count += 1
    return count / (time.perf_counter() - started)


# ------------------------------------------------------------------- 4. recovery

SLOW = """
    #!/bin/sh
    mkdir -p RUNNING
    echo $$ > "RUNNING/$$"
    sleep 2
    rm -f "RUNNING/$$"
    """


def recovery_run(services: Services, setup: WorkerSetup) -> dict[str, float]:
    tag = f"recovery-{uuid.uuid4().hex[:6]}"
    running = services.base / tag / "running"
    check = check_system(
        services, tag, 3, 1, script=SLOW.replace("RUNNING", str(running)), session_timeout=4.0
    )
    try:
        start_workers(check, setup, executors=2, sweep="1")
        system = check.phase.system
        executors = [w for w in system.started if w.queues == ("executor",)]
        check.enqueue(check.refs)

        def running_pid() -> int | None:
            for entry in running.glob("*"):
                try:
                    return int(entry.read_text())
                except (OSError, ValueError):
                    continue
            return None

        wait_until(running_pid, 60, "a build to be running")
        # the job's own $$ is its sandbox's pid: find its sleep among the hosts' processes
        victim = wait_until(
            lambda: next((w for w in executors if _runs_sleep(w.pid)), None), 10, "its executor"
        )
        assert victim is not None
        killed = time.time()
        victim.kill(signal.SIGKILL)
        check.wait_reported(check.refs, timeout=120)
        builds, _sets = check.phase.rows()
    finally:
        check.phase.stop()
    retried = [b for b in builds if b["attempt"] > 1]
    assert retried, "the killed build was not retried"
    retry = min(retried, key=lambda b: epoch(b["start_time"]) or 0.0)
    return {
        "kill_to_retry_start_s": (epoch(retry["start_time"]) or 0.0) - killed,
        "kill_to_retry_end_s": (epoch(retry["end_time"]) or 0.0) - killed,
        "session_timeout_s": 4.0,
        "sweep_interval_s": 1.0,
        "job_seconds": 2.0,
    }


def _runs_sleep(ancestor: int) -> bool:
    """Whether a ``sleep`` process (the slow job's) runs under ``ancestor``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm == "sleep" and _descends_from(int(entry.name), ancestor):
            return True
    return False


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


# ------------------------------------------------------------------- report


def best_and_median(
    runs: list[dict[str, Any]], key: str, higher: bool = True
) -> tuple[float, float]:
    values = [r[key] for r in runs]
    return (max(values) if higher else min(values)), statistics.median(values)


def print_table(report: dict[str, Any]) -> None:
    print(f"\nload average before: {report['load_before']}, after: {report['load_after']}")
    where = "on /dev/shm" if report.get("build_dir") == "tmpfs" else "under the state dir"
    print(f"workspaces (executor.build_dir): {where}", end="; ")
    print(f"executor worker processes: {report.get('executor_concurrency', 2)}", end="; ")
    print(f"sandbox: {report.get('sandbox', 'bwrap')}", end="; ")
    print(f"the gate merges: {'yes' if report.get('gate_merges') else 'no'}", end="; ")
    print(f"changes as {report.get('changes_as', 'branches')}")
    for key, runs in report["throughput"].items():
        n = len(runs)
        print(f"\n{key} (N changes x M no-op jobs), {n} run(s): best / median")
        rows = [
            ("builds/s", "builds_per_s", True, "{:.2f}"),
            ("changes/s", "changes_per_s", True, "{:.2f}"),
            ("enqueue -> first build start min (s)", "first_start_min_s", False, "{:.2f}"),
            ("enqueue -> first build start p50 (s)", "first_start_p50_s", False, "{:.2f}"),
            ("enqueue -> first build start p99 (s)", "first_start_p99_s", False, "{:.2f}"),
            ("ZooKeeper requests per build", "zk_requests_per_build", False, "{:.0f}"),
            ("ZooKeeper write requests per build", "zk_writes_per_build", False, "{:.0f}"),
            ("ZooKeeper bytes written per build", "zk_bytes_written_per_build", False, "{:.0f}"),
            ("ZooKeeper fsyncs per build", "zk_fsyncs_per_build", False, "{:.0f}"),
            ("CPU ms per build (workers)", "cpu_ms_per_build", False, "{:.0f}"),
            ("  of which scheduler worker", "cpu_ms_per_build_scheduler", False, "{:.0f}"),
            ("  of which merger worker", "cpu_ms_per_build_merger", False, "{:.0f}"),
            ("  of which executor worker", "cpu_ms_per_build_executor", False, "{:.0f}"),
            ("CPU ms per build (ZooKeeper+Redis)", "zk_redis_cpu_ms_per_build", False, "{:.0f}"),
            ("ceiling: Celery no-op round trips/s", "celery_roundtrips_per_s", True, "{:.0f}"),
            ("Celery roundtrip task (ZK r+w)/s", "celery_zk_roundtrips_per_s", True, "{:.0f}"),
            ("Celery no-op round trip, one at a time ms", "celery_roundtrip_ms", False, "{:.1f}"),
            ("ceiling: ZK request lifecycles/s", "zk_lifecycles_per_s", True, "{:.0f}"),
            ("builds/s / Celery no-op round trips/s", "ratio_celery", True, "{:.3f}"),
            ("builds/s / ZK lifecycles/s", "ratio_lifecycle", True, "{:.3f}"),
        ]
        for label, field, higher, fmt in rows:
            best, median = best_and_median(runs, field, higher)
            print(f"  {label:42} {fmt.format(best):>9} {fmt.format(median):>9}")
    print_rows(report["gate_depth"])
    rec = report["recovery"]
    if rec:
        starts = [r["kill_to_retry_start_s"] for r in rec]
        ends = [r["kill_to_retry_end_s"] for r in rec]
        print(
            f"\nrecovery after kill -9 of an executor ({len(rec)} run(s), session 4 s, "
            "sweep 1 s, job 2 s): best / median"
        )
        for label, values in (
            ("kill -> retried build started (s)", starts),
            ("kill -> retried build completed (s)", ends),
        ):
            print(f"  {label:42} {min(values):9.1f} {statistics.median(values):9.1f}")


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each, fewer samples")
    parser.add_argument("--runs", type=int, default=0, help="throughput and recovery runs")
    parser.add_argument("--jobs", type=int, default=3, help="no-op jobs per change (M)")
    parser.add_argument(
        "--changes", type=int, nargs="+", default=None, help="changes per run (N), e.g. 10 20"
    )
    parser.add_argument("--depths", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--pipelines", nargs="+", default=["check", "gate"], help="check, gate")
    parser.add_argument(
        "--scheduler-pool", default="prefork", help="the scheduler worker's pool (prefork, solo)"
    )
    parser.add_argument(
        "--executor-pool", default="prefork", help="the executor workers' pool (prefork, threads)"
    )
    parser.add_argument(
        "--executor-concurrency",
        type=int,
        default=EXECUTOR_CONCURRENCY,
        help="processes of each executor worker (default: the local stack's)",
    )
    parser.add_argument(
        "--build-dir",
        choices=["state", "tmpfs"],
        default="state",
        help="workspaces under the state dir (the default) or on /dev/shm (executor.build_dir)",
    )
    parser.add_argument(
        "--sandbox",
        choices=["bwrap", "none"],
        default="bwrap",
        help="executor.sandbox: bwrap (the default) or none, what a build costs without one",
    )
    parser.add_argument(
        "--gate-merges",
        action="store_true",
        help="the gate pushes each item it passes (merge: true), so a gate deeper than its "
        "window merges the items that enter it on the branch the items ahead made",
    )
    parser.add_argument(
        "--changes-as",
        choices=["refs", "branches"],
        default="refs",
        help="each change under refs/changes/<n>, as a forge keeps them (the default), or as "
        "a branch of the project (the benchmark until session 14)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, one run of every phase (make test runs it; figures not kept)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.quick, args.runs, args.jobs, args.changes, args.depths = True, 1, 1, [2], [3]
    runs = args.runs or (1 if args.quick else 3)
    changes = args.changes or ([10] if args.quick else [10, 20])
    samples = 2 if args.smoke else 5 if args.quick else 15
    report: dict[str, Any] = {
        "host": platform.node(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "smoke": args.smoke,
        "load_before": loadavg(),
        "build_dir": args.build_dir,
        "sandbox": args.sandbox,
        "gate_merges": args.gate_merges,
        "changes_as": args.changes_as,
        "executor_concurrency": args.executor_concurrency,
        "throughput": {},
        "gate_depth": [],
        "recovery": [],
    }
    with (
        tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp,
        tempfile.TemporaryDirectory(prefix="sluice-bench-builds-", dir="/dev/shm") as shm,
    ):
        build_dir = {"SLUICE_BUILD_DIR": str(Path(shm) / "builds")}
        setup = WorkerSetup(
            scheduler_pool=args.scheduler_pool,
            executor_pool=args.executor_pool,
            executor_concurrency=args.executor_concurrency,
            env=build_dir if args.build_dir == "tmpfs" else {},
            sandbox=args.sandbox,
        )
        services = Services(Path(tmp))
        try:
            services.start()
            for depth in args.depths:
                report["gate_depth"].append(gate_depth(services, depth, samples))
                print(f"gate depth {depth}: done", flush=True)
            for pipeline, n in [(p, n) for p in args.pipelines for n in changes]:
                key = f"{pipeline} {n}x{args.jobs}"
                results = []
                for _ in range(runs):
                    # one warm-up change more than N (through check): it is not measured
                    result = throughput_run(
                        services,
                        n + 1,
                        args.jobs,
                        pipeline,
                        setup,
                        as_branches=args.changes_as == "branches",
                        gate_merges=args.gate_merges,
                    )
                    result["ratio_celery"] = (
                        result["builds_per_s"] / result["celery_roundtrips_per_s"]
                    )
                    result["ratio_lifecycle"] = (
                        result["builds_per_s"] / result["zk_lifecycles_per_s"]
                    )
                    results.append(result)
                    print(f"throughput {key}: {result['builds_per_s']:.2f} builds/s", flush=True)
                report["throughput"][key] = results
            for _ in range(runs):
                report["recovery"].append(recovery_run(services, setup))
                print("recovery: done", flush=True)
        finally:
            services.stop()
    report["load_after"] = loadavg()
    print_table(report)
    if args.smoke:
        return  # the figures of tiny sizes mean nothing: not kept
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
