"""Scale: T tenants x 4 pipelines with items, events/s through the hops, and the sweep.

Starts its own ZooKeeper and Redis on free ports (bench/_system.py) and one
phase with real git repositories: T tenants (50 by default) that all hold
the project ``app`` and one config project defining four pipelines
(``check`` and ``experimental``: independent, triggered by ``ref-updated``
on ``refs/heads/feature.*``; ``gate``: dependent, no trigger; ``post``:
independent, ``ref-updated`` on main), one job in each.

1. **setup** on real workers (a scheduler and a merger worker, no executor):
   ``sluice reconfigure``, then I items enqueued into every pipeline by
   management events (as ``sluice enqueue`` puts them). The items are merged
   by the merger, get their build requests and stay, as no executor runs.
   The workers are stopped before anything is measured.
2. **ceilings**, in this process: N sequential ``exists`` round trips/s
   and ``get`` requests/s pipelined 100 at a time (bare kazoo calls).
3. **the hops**, in-process (the functions the scheduler tasks call, with a
   runtime built as a worker builds it, its layouts warmed; every nudge is
   really sent to Redis, but no worker consumes it): K ``ref-updated`` events
   for ``app`` put into the connection queue, then ``forward_connection_events``
   (one call), ``process_tenant`` for each tenant, and ``process_pipeline`` for
   each pipeline they fed (2 per tenant). Each hop timed, its ZooKeeper
   requests counted (``ZooKeeperClient.counting_requests``), and the server's
   ``zk_packets_received`` over the whole burst.
4. **the sweep** (``scheduler.sweep.run_sweep`` with the maintenance task's
   steps, each step timed and counted) and ``scheduler.views.idle.pending_work``,
   before the burst and after it (K more items in 2 of each tenant's pipelines).

Prints a table (each rate beside the same run's round-trip ceiling) and
writes bench/results/scale.json. ``--smoke``: 2 tenants x 4 pipelines, 1 item,
K=3, nothing kept (``make test`` runs it, tests/bench/test_smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _system import Phase, Services

from scheduler import dispatch, tasknames
from scheduler.layouts import TenantLayouts
from scheduler.model.change import Change
from scheduler.processing import forwarding
from scheduler.processing.environment import Environment
from scheduler.processing.pipeline import process_pipeline
from scheduler.settings import Settings, load_settings
from scheduler.sweep import SweepStep, run_sweep, scheduler_steps, standard_steps
from scheduler.views import idle
from scheduler.wire.events import TriggerEvent
from scheduler.zk import paths
from scheduler.zk.client import ZooKeeperClient, connect
from scheduler.zk.event_queue import EventQueue
from scheduler.zk.job_requests import JobRequestQueue
from scheduler.zk.management import wait_for_result
from tasks.runtime import build
from tests.fixtures.waiting import wait_until

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
PACKETS_IN = "zk_packets_received"
CONNECTION = "local"
PIPELINES = ("check", "experimental", "gate", "post")
TRIGGERED = ("check", "experimental")  # what a ref-updated of refs/heads/feature-* feeds

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/feature.*$
        - pipeline:
            name: experimental
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/feature.*$
        - pipeline:
            name: gate
            manager: dependent
        - pipeline:
            name: post
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/main$
        - job:
            name: base
            parent: null
            timeout: 120
        - job:
            name: unit
            run: ci/job.sh
        - project:
            name: app
            check: {jobs: [unit]}
            experimental: {jobs: [unit]}
            gate: {jobs: [unit]}
            post: {jobs: [unit]}
        """,
    "ci/job.sh": "#!/bin/sh\nexec true\n",
}


def tenants_yaml(names: Sequence[str]) -> str:
    return "".join(
        f"""
- tenant:
    name: {name}
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
"""
        for name in names
    )


# ------------------------------------------------------------------ 1. setup


@dataclass
class ScaleSystem:
    phase: Phase
    tenants: list[str]
    items: dict[str, str]  # ref -> commit of the items enqueued by hand
    base: str  # main's commit: the burst's refs point at it


def setup(services: Services, tenants: int, items: int, burst: int) -> tuple[ScaleSystem, float]:
    """The tenants, their items in every pipeline (real workers, stopped after)."""
    started = time.perf_counter()
    phase = services.system(f"scale-{uuid.uuid4().hex[:6]}")
    phase.use_environment()
    system = phase.system
    names = [f"t{n:02d}" for n in range(tenants)]
    system.tenant(tenants_yaml(names))
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", {"src/app.py": "x = 0\n"})
    refs = {}
    for n in range(items):
        ref = f"i{n}"
        refs[ref] = system.repos.commit("app", ref, {f"src/{ref}.py": "x = 1\n"}, base=base)
    system.repos.git("app", "checkout", "-q", "main")
    updates = "".join(f"create refs/heads/feature-{k} {base}\n" for k in range(burst))
    _git_stdin(system.repos.root / "app", ["update-ref", "--stdin"], updates)
    system.start_worker(("scheduler",), concurrency=2)
    system.start_worker(("merger", "maintenance"), concurrency=2)
    system.sluice("reconfigure")
    scale = ScaleSystem(phase, names, refs, base)
    settings = load_settings()
    client = connect(settings.zookeeper)
    try:
        enqueue_items(client, settings, scale)
        wait_settled(client, len(names) * len(PIPELINES) * items)
    finally:
        client.stop()
        client.close()
    phase.stop()  # nothing but this process touches ZooKeeper from here on
    return scale, time.perf_counter() - started


def _git_stdin(repo: Path, args: list[str], text: str) -> None:
    subprocess.run(["git", *args], cwd=repo, input=text, text=True, check=True)


def enqueue_items(client: ZooKeeperClient, settings: Settings, scale: ScaleSystem) -> None:
    """One management event per tenant, pipeline and ref; each tenant nudged once."""
    ids = []
    for tenant in scale.tenants:
        queue = EventQueue(client, paths.tenant_management_queue(tenant))
        for pipeline in PIPELINES:
            for ref, commit in scale.items.items():
                change = Change(CONNECTION, "app", "main", ref, commit)
                result_id = uuid.uuid4().hex
                queue.put(
                    {
                        "type": "enqueue",
                        "change": change.to_dict(),
                        "pipeline": pipeline,
                        "result_id": result_id,
                    }
                )
                ids.append(result_id)
        dispatch.send(tasknames.PROCESS_TENANT, tenant, settings=settings)
    for result_id in ids:
        outcome = wait_for_result(client, result_id, 600)
        assert outcome is not None and "item" in outcome, outcome


def wait_settled(client: ZooKeeperClient, builds: int, timeout: float = 900) -> None:
    """Until every item has its build request and no merge or event is left."""
    executor = JobRequestQueue(client, paths.executor_queue())
    merger = JobRequestQueue(client, paths.merger_queue())

    def settled() -> bool:
        return (
            executor.active_count() >= builds
            and merger.active_count() == 0
            and not idle.tenants_with_events(client)
            and not idle.pipelines_to_process(client)
        )

    wait_until(settled, timeout, f"{builds} build requests and no pending merge", interval=1.0)


# ------------------------------------------------------------------ 2. ceilings


def ceilings(client: ZooKeeperClient, seconds: float) -> dict[str, float]:
    """Bare kazoo: sequential ``exists`` round trips/s, and ``get``s/s pipelined by 100."""
    kazoo = client.kazoo
    path = paths.connection_event_queue(CONNECTION)
    for _ in range(20):
        kazoo.exists(path)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        kazoo.exists(path)
        count += 1
    sequential = count / (time.perf_counter() - started)
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for pending in [kazoo.get_async(path) for _ in range(100)]:
            pending.get()
        count += 100
    pipelined = count / (time.perf_counter() - started)
    return {"zk_exists_per_s": sequential, "zk_pipelined_gets_per_s": pipelined}


# ------------------------------------------------------------------ 3. the hops


@dataclass
class Hop:
    name: str
    events_in: int  # events the hop consumed
    events_out: int  # events it put into the next queues
    seconds: float
    requests: int


def timed(client: ZooKeeperClient, work: Callable[[], object]) -> tuple[float, int]:
    with client.counting_requests() as count:
        started = time.perf_counter()
        work()
        elapsed = time.perf_counter() - started
    return elapsed, count.total


def queued(client: ZooKeeperClient, roots: Sequence[str]) -> int:
    return sum(EventQueue(client, root).length() for root in roots)


def burst_events(scale: ScaleSystem, burst: int) -> list[dict[str, Any]]:
    return [
        TriggerEvent(
            type="ref-updated",
            project="app",
            branch=f"feature-{k}",
            ref=f"refs/heads/feature-{k}",
            oldrev="0" * 40,
            newrev=scale.base,
        ).to_dict()
        for k in range(burst)
    ]


def hops(env: Environment, layouts: TenantLayouts, scale: ScaleSystem, burst: int) -> list[Hop]:
    client = env.client
    tenants = scale.tenants
    events = burst_events(scale, burst)
    connection = EventQueue(client, paths.connection_event_queue(CONNECTION))

    def put() -> None:
        for event in events:
            connection.put(event)

    found: list[Hop] = []
    seconds, requests = timed(client, put)
    found.append(Hop("put into the connection queue", 0, burst, seconds, requests))
    seconds, requests = timed(
        client,
        lambda: forwarding.forward_connection_events(client, layouts, env.nudge, CONNECTION),
    )
    tenant_queues = [paths.tenant_trigger_queue(t) for t in tenants]
    moved = queued(client, tenant_queues)
    assert moved == burst * len(tenants), (moved, burst, len(tenants))
    found.append(Hop("connection -> tenants", burst, moved, seconds, requests))

    def every_tenant() -> None:
        for tenant in tenants:
            forwarding.process_tenant(client, layouts, env.nudge, tenant)

    seconds, requests = timed(client, every_tenant)
    fed = [(t, p) for t in tenants for p in TRIGGERED]
    pipeline_queues = [paths.pipeline_trigger_queue(t, p) for t, p in fed]
    routed = queued(client, pipeline_queues)
    assert routed == burst * len(fed), (routed, burst, len(fed))
    found.append(Hop("tenant -> pipelines", moved, routed, seconds, requests))

    def every_pipeline() -> None:
        for tenant, pipeline in fed:
            process_pipeline(env, tenant, pipeline)

    seconds, requests = timed(client, every_pipeline)
    assert queued(client, pipeline_queues) == 0
    found.append(Hop("pipeline passes (items enqueued)", routed, 0, seconds, requests))
    return found


# ------------------------------------------------------------------ 4. the sweep


def sweep_cost(client: ZooKeeperClient, settings: Settings, runs: int) -> dict[str, Any]:
    """The maintenance task's sweep, in-process: its time and requests, per step too."""
    per_step: dict[str, list[tuple[float, int]]] = {}

    def counted(step: SweepStep) -> SweepStep:
        def run() -> Sequence[str]:
            with client.counting_requests() as count:
                started = time.perf_counter()
                done = step.run()
            per_step.setdefault(step.name, []).append((time.perf_counter() - started, count.total))
            return done

        return replace(step, run=run)

    def steps() -> list[SweepStep]:
        listed = [
            *standard_steps(client, settings, renudge_merges=True),
            *scheduler_steps(client, settings),
        ]
        return [counted(s) for s in listed]

    whole: list[tuple[float, int]] = []
    for _ in range(runs):
        report = None

        def sweep() -> None:
            nonlocal report
            report = run_sweep(client, steps)

        whole.append(timed(client, sweep))
        assert report is not None and report.ran and not report.failed, report
    pending: list[tuple[float, int]] = [
        timed(client, lambda: idle.pending_work(client)) for _ in range(runs)
    ]
    return {
        "sweep_ms": 1000 * statistics.median(s for s, _ in whole),
        "sweep_requests": statistics.median(r for _, r in whole),
        "pending_work_ms": 1000 * statistics.median(s for s, _ in pending),
        "pending_work_requests": statistics.median(r for _, r in pending),
        "steps": {
            name: {
                "ms": 1000 * statistics.median(s for s, _ in values),
                "requests": statistics.median(r for _, r in values),
            }
            for name, values in per_step.items()
        },
    }


def counting_nudge(env: Environment, sent: list[str]) -> Environment:
    def nudge(task: str, args: Sequence[Any], queue: str | None, /, label: str = "") -> None:
        sent.append(task)
        env.nudge(task, args, queue, label=label)

    return replace(env, nudge=nudge)


# ------------------------------------------------------------------ report


def measure(services: Services, scale: ScaleSystem, burst: int, runs: int) -> dict[str, Any]:
    settings = load_settings()
    real_env, layouts = build(settings)
    sent: list[str] = []
    env = counting_nudge(real_env, sent)
    client = env.client
    report: dict[str, Any] = {}
    try:
        for tenant in scale.tenants:  # a worker's steady state: layouts cached, passes warm
            layouts.get(tenant)
            for pipeline in PIPELINES:
                process_pipeline(env, tenant, pipeline)
        report["ceilings"] = ceilings(client, 1.0 if runs > 1 else 0.3)
        report["items_before"] = sum(
            idle.items_in(client, t, p) for t in scale.tenants for p in PIPELINES
        )
        report["sweep_before"] = sweep_cost(client, settings, runs)
        before = services.mntr()
        done = hops(env, layouts, scale, burst)
        after = services.mntr()
        report["hops"] = [vars(h) for h in done]
        report["burst_packets"] = after[PACKETS_IN] - before[PACKETS_IN] - 1  # minus mntr's own
        report["nudges"] = {task: sent.count(task) for task in sorted(set(sent))}
        report["items_after"] = sum(
            idle.items_in(client, t, p) for t in scale.tenants for p in PIPELINES
        )
        report["sweep_after"] = sweep_cost(client, settings, runs)
    finally:
        client.stop()
        client.close()
    return report


def print_table(report: dict[str, Any]) -> None:
    size = report["size"]
    ceil = report["ceilings"]
    rtt = ceil["zk_exists_per_s"]
    print(f"\nload average before: {report['load_before']}, after: {report['load_after']}")
    print(
        f"{size['tenants']} tenants x {len(PIPELINES)} pipelines, {size['items']} item(s) each "
        f"by hand ({report['items_before']} items), setup {report['setup_s']:.0f} s"
    )
    gets = ceil["zk_pipelined_gets_per_s"]
    print(f"ceiling: ZooKeeper exists round trips/s (sequential) {rtt:9.0f}")
    print(f"ceiling: ZooKeeper gets/s (pipelined by 100)         {gets:9.0f}")
    burst = size["burst"]
    print(
        f"\nburst of {burst} ref-updated events for app (held by every tenant; "
        f"{len(TRIGGERED)} pipelines each)"
    )
    print(
        f"  {'hop':34} {'in':>6} {'out':>6} {'ms':>8} {'in/s':>8} {'reqs':>6} "
        f"{'req/in':>7} {'req/s':>7} {'/ceil':>6}"
    )
    total_s = 0.0
    for hop in report["hops"]:
        total_s += hop["seconds"]
        counted = hop["events_in"] or hop["events_out"]
        rate = counted / hop["seconds"]
        reqs_per_s = hop["requests"] / hop["seconds"]
        print(
            f"  {hop['name']:34} {hop['events_in']:6} {hop['events_out']:6} "
            f"{1000 * hop['seconds']:8.1f} {rate:8.0f} {hop['requests']:6} "
            f"{hop['requests'] / counted:7.2f} {reqs_per_s:7.0f} {reqs_per_s / rtt:6.2f}"
        )
    to_queues = sum(h["seconds"] for h in report["hops"][:3])
    print(f"  put -> every pipeline queue: {burst / to_queues:.0f} events/s ({to_queues:.3f} s)")
    print(
        f"  put -> items enqueued:       {burst / total_s:.1f} events/s ({1000 * total_s:.0f} ms)"
    )
    print(
        f"  ZooKeeper packets received over the burst: {report['burst_packets']:.0f} "
        f"({report['burst_packets'] / burst:.0f} per source event); nudges: {report['nudges']}"
    )
    pipelines = size["tenants"] * len(PIPELINES)
    for key, items in (("sweep_before", "items_before"), ("sweep_after", "items_after")):
        sweep = report[key]
        print(
            f"\nsweep and pending_work at {pipelines} pipelines, {report[items]} items "
            f"({key.split('_')[1]} the burst), median"
        )
        for label, ms, reqs in (
            ("maintenance sweep", sweep["sweep_ms"], sweep["sweep_requests"]),
            ("pending_work", sweep["pending_work_ms"], sweep["pending_work_requests"]),
        ):
            print(
                f"  {label:22} {ms:8.1f} ms {reqs:6.0f} requests "
                f"({reqs / pipelines:.1f} per pipeline; as round trips {1000 * reqs / rtt:.0f} ms)"
            )
        for name, step in sweep["steps"].items():
            if step["requests"]:
                print(f"    step {name:28} {step['ms']:8.1f} ms {step['requests']:6.0f} requests")


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--items", type=int, default=2, help="items enqueued per pipeline")
    parser.add_argument("--burst", type=int, default=100, help="ref-updated events (K)")
    parser.add_argument("--runs", type=int, default=3, help="sweeps (median)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, nothing kept")
    args = parser.parse_args()
    if args.smoke:
        args.tenants, args.items, args.burst, args.runs = 2, 1, 3, 1
    report: dict[str, Any] = {
        "host": platform.node(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "size": {"tenants": args.tenants, "items": args.items, "burst": args.burst},
        "smoke": args.smoke,
        "load_before": loadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="sluice-scale-") as tmp:
        services = Services(Path(tmp))
        try:
            services.start()
            scale, report["setup_s"] = setup(services, args.tenants, args.items, args.burst)
            print(f"setup: {report['setup_s']:.1f} s", flush=True)
            report.update(measure(services, scale, args.burst, args.runs))
        finally:
            services.stop()
    report["load_after"] = loadavg()
    print_table(report)
    if args.smoke:
        return
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
