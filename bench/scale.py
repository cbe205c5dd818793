"""Scale: T tenants x 4 pipelines with items; events/s through the hops; the sweep.

Its own ZooKeeper and Redis (bench/_system.py), real git repositories: T
tenants (50) hold ``app`` and share a config project with four pipelines
(``check``, ``experimental``: ``ref-updated`` of ``refs/heads/feature.*``;
``gate``: dependent; ``post``: ``ref-updated`` of main), one job in each.

1. **setup**, real workers (scheduler, merger; no executor): ``sluice
   reconfigure``, I items enqueued into every pipeline by management events;
   merged, they wait for their builds. The workers are stopped after.
2. **ceilings**: sequential ``exists`` round trips/s, ``get``s/s pipelined
   by 100 (bare kazoo, this process).
3. **the hops**, in-process, with a runtime built as a worker builds it
   (layouts warm; nudges really sent to Redis, consumed by nobody): K
   ``ref-updated`` events put into the connection queue, then
   ``forward_connection_events``, ``process_tenant`` per tenant,
   ``process_pipeline`` per fed pipeline; each timed, its requests counted
   (after one event through every hop: it creates the queues, fills caches).
   Then a full batch of the connection hop (100 events) is tried.
4. **the sweep** (``run_sweep`` with the maintenance task's steps, each step
   counted) and ``idle.pending_work``, before and after the burst.

Writes bench/results/scale.json. ``--smoke`` (``make test``): 2 tenants, 1
item, K=3, figures printed, nothing kept.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _system import Services

from scheduler.layouts import TenantLayouts
from scheduler.model.change import Change
from scheduler.nudge import dispatch, task_names
from scheduler.processing import forwarding
from scheduler.processing.environment import Environment, Nudge
from scheduler.processing.pipeline import process_pipeline
from scheduler.settings.load import load_settings
from scheduler.settings.sections import Settings
from scheduler.stores.job_requests import JobRequestQueue
from scheduler.stores.management import wait_for_result
from scheduler.sweep import SweepReport, SweepStep, run_sweep, scheduler_steps, standard_steps
from scheduler.views import idle
from scheduler.wire.events import TriggerEvent
from scheduler.zk import paths, trace
from scheduler.zk.client import RequestCount, ZooKeeperClient, connect
from scheduler.zk.context import MAX_TRANSACTION_BYTES, Transaction
from scheduler.zk.errors import DataTooLargeError
from scheduler.zk.event_queue import EventQueue
from tasks.runtime import build
from tests.fixtures.waiting import wait_until

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
PACKETS_IN = "zk_packets_received"
CONNECTION = "local"
PIPELINES = ("check", "experimental", "gate", "post")
TRIGGERED = ("check", "experimental")  # what a ref-updated of refs/heads/feature-* feeds
# folded in the request shapes: the phase's chroot, tenant and pipeline names
FOLDS = (
    (re.compile(r"^/bench-[0-9a-f]+"), ""),
    (re.compile(r"(?<=/)t\d\d(?=/|$)"), "{t}"),
    (re.compile(r"(?<=/pipelines/)[^/]+"), "{p}"),
)

FEATURE = "{local: [{event: ref-updated, ref: '^refs/heads/feature.*$'}]}"
CONFIG = {
    "zuul.d/pipelines.yaml": f"""
        - pipeline: {{name: check, manager: independent, trigger: {FEATURE}}}
        - pipeline: {{name: experimental, manager: independent, trigger: {FEATURE}}}
        - pipeline: {{name: gate, manager: dependent}}
        - pipeline:
            name: post
            manager: independent
            trigger: {{local: [{{event: ref-updated, ref: '^refs/heads/main$'}}]}}
        - job: {{name: base, parent: null, timeout: 120}}
        - job: {{name: unit, run: ci/job.sh}}
        - project:
            name: app
            check: {{jobs: [unit]}}
            experimental: {{jobs: [unit]}}
            gate: {{jobs: [unit]}}
            post: {{jobs: [unit]}}
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
    app = system.repos.root / "app"
    subprocess.run(["git", "update-ref", "--stdin"], cwd=app, input=updates, text=True, check=True)
    system.start_worker(("scheduler",), concurrency=2)
    system.start_worker(("merger", "maintenance"), concurrency=2)
    system.sluice("reconfigure")
    scale = ScaleSystem(names, refs, base)
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


def enqueue_items(client: ZooKeeperClient, settings: Settings, scale: ScaleSystem) -> None:
    """One management event per tenant, pipeline and ref; each tenant nudged once."""
    ids = []
    for tenant in scale.tenants:
        queue = EventQueue(client, paths.tenant_management_queue(tenant))
        for pipeline in PIPELINES:
            for ref, commit in scale.items.items():
                change = Change(CONNECTION, "app", "main", ref, commit)
                result_id = uuid.uuid4().hex
                event = {"type": "enqueue", "change": change.to_dict(), "pipeline": pipeline}
                queue.put({**event, "result_id": result_id})
                ids.append(result_id)
        dispatch.send(task_names.PROCESS_TENANT, tenant, settings=settings)
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
    kazoo, path = client.kazoo, "/"  # the chroot's root
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
    nudge_seconds: float  # of ``seconds``: the Celery sends to Redis
    shapes: list[tuple[str, int]]  # its most frequent requests: kind and path shape


def timed(client: ZooKeeperClient, work: Callable[[], object]) -> tuple[float, RequestCount]:
    with client.counting_requests() as count:
        started = time.perf_counter()
        work()
        elapsed = time.perf_counter() - started
    return elapsed, count


def shapes(count: RequestCount, top: int = 4) -> list[tuple[str, int]]:
    """The most frequent requests, by kind and path with its names and ids folded."""
    found: Counter[str] = Counter()
    for kind, path in count.calls:
        shape = trace.shape(path)
        for pattern, name in FOLDS:
            shape = pattern.sub(name, shape)
        found[f"{kind} {shape}"] += 1
    return found.most_common(top)


def burst_events(scale: ScaleSystem, burst: int, name: str = "feature") -> list[dict[str, Any]]:
    return [
        TriggerEvent(
            type="ref-updated",
            project="app",
            branch=f"{name}-{k}",
            ref=f"refs/heads/{name}-{k}",
            oldrev="0" * 40,
            newrev=scale.base,
        ).to_dict()
        for k in range(burst)
    ]


def hops(
    env: Environment, layouts: TenantLayouts, scale: ScaleSystem, events: list[dict[str, Any]]
) -> list[Hop]:
    client, tenants, nudged, burst = env.client, scale.tenants, env.nudge, len(events)
    connection = EventQueue(client, paths.connection_event_queue(CONNECTION))
    fed = [(t, p) for t in tenants for p in TRIGGERED]
    tenant_queues = [paths.tenant_trigger_queue(t) for t in tenants]
    pipeline_queues = [paths.pipeline_trigger_queue(t, p) for t, p in fed]
    assert isinstance(nudged, TimedNudge)
    found: list[Hop] = []

    def run(name: str, events_in: int, work: Callable[[], object], out: Sequence[str]) -> int:
        sends = nudged.seconds
        seconds, count = timed(client, work)
        moved = sum(EventQueue(client, root).length() for root in out)
        hop = Hop(name, events_in, moved, seconds, count.total, nudged.seconds - sends, [])
        hop.shapes = shapes(count)
        found.append(hop)
        return moved

    run("put into the connection queue", 0, lambda: [connection.put(e) for e in events], [])
    found[-1].events_out = burst
    moved = run(
        "connection -> tenants",
        burst,
        lambda: forwarding.forward_connection_events(client, layouts, nudged, CONNECTION),
        tenant_queues,
    )
    assert moved == burst * len(tenants), (moved, burst, len(tenants))

    def every_tenant() -> None:
        for tenant in tenants:
            forwarding.process_tenant(client, layouts, nudged, tenant)

    routed = run("tenant -> pipelines", moved, every_tenant, pipeline_queues)
    assert routed == burst * len(fed), (routed, burst, len(fed))

    def every_pipeline() -> None:
        for tenant, pipeline in fed:
            process_pipeline(env, tenant, pipeline)

    left = run("pipeline passes (items enqueued)", routed, every_pipeline, pipeline_queues)
    assert left == 0, left
    return found


def fanout_limit(env: Environment, layouts: TenantLayouts, scale: ScaleSystem) -> dict[str, Any]:
    """The connection hop's transaction bytes per event, and one full batch tried."""
    client = env.client
    payload = {**burst_events(scale, 1)[0], "connection": CONNECTION, "event_id": "0" * 10}
    txn = Transaction(client)
    for tenant in scale.tenants:  # the ops _drain adds per event: a put per tenant, an ack
        EventQueue(client, paths.tenant_trigger_queue(tenant)).put_ops(payload, txn)
    txn.delete(paths.join(paths.connection_event_queue(CONNECTION), "event-" + "0" * 10))
    connection = EventQueue(client, paths.connection_event_queue(CONNECTION))
    for event in burst_events(scale, forwarding.BATCH):
        connection.put(event)
    try:
        forwarding.forward_connection_events(client, layouts, env.nudge, CONNECTION)
        outcome = "committed"
    except DataTooLargeError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    return {
        "txn_bytes_per_event": txn.size,
        "largest_batch": MAX_TRANSACTION_BYTES // txn.size,
        "batch": forwarding.BATCH,
        "full_batch": outcome,
    }


# ------------------------------------------------------------------ 4. the sweep


def cost(samples: Sequence[tuple[float, int]]) -> dict[str, float]:
    """The median time (ms) and ZooKeeper requests of (seconds, requests) samples."""
    return {
        "ms": 1000 * statistics.median(s for s, _ in samples),
        "requests": statistics.median(r for _, r in samples),
    }


def sweep_cost(client: ZooKeeperClient, settings: Settings, runs: int) -> dict[str, Any]:
    """The maintenance task's sweep and ``pending_work``, in-process; the sweep's steps too."""
    per_step: dict[str, list[tuple[float, int]]] = {}

    def counted(step: SweepStep) -> SweepStep:
        def run() -> Sequence[str]:
            seconds, count = timed(client, lambda: done.extend(step.run()))
            per_step.setdefault(step.name, []).append((seconds, count.total))
            return done

        done: list[str] = []
        return replace(step, run=run)

    def steps() -> list[SweepStep]:
        listed = standard_steps(client, settings) + scheduler_steps(client, settings)
        return [counted(s) for s in listed]

    sweeps, pending, reports = [], [], list[SweepReport]()
    for _ in range(runs):
        seconds, count = timed(client, lambda: reports.append(run_sweep(client, steps)))
        assert reports[-1].ran and not reports[-1].failed, reports[-1]
        sweeps.append((seconds, count.total))
        seconds, count = timed(client, lambda: idle.pending_work(client))
        pending.append((seconds, count.total))
    return {
        "sweep": cost(sweeps),
        "pending_work": cost(pending),
        "steps": {name: cost(values) for name, values in per_step.items()},
    }


@dataclass
class TimedNudge:
    """A runtime's nudge that counts its sends and the time they take."""

    send: Nudge
    seconds: float = 0.0
    sent: Counter[str] = field(default_factory=Counter)

    def __call__(
        self, task: str, args: Sequence[Any], queue: str | None, /, label: str = ""
    ) -> None:
        started = time.perf_counter()
        self.send(task, args, queue, label=label)
        self.seconds += time.perf_counter() - started
        self.sent[task] += 1


# ------------------------------------------------------------------ report


def items_in(client: ZooKeeperClient, scale: ScaleSystem) -> int:
    return sum(idle.items_in(client, t, p) for t in scale.tenants for p in PIPELINES)


def measure(services: Services, scale: ScaleSystem, burst: int, runs: int) -> dict[str, Any]:
    settings = load_settings()
    real_env, layouts = build(settings)
    nudge = TimedNudge(real_env.nudge)
    env = replace(real_env, nudge=nudge)
    client = env.client
    report: dict[str, Any] = {"load_measuring": loadavg()}
    try:
        for tenant in scale.tenants:  # a worker's steady state: layouts cached, passes warm
            layouts.get(tenant)
            for pipeline in PIPELINES:
                process_pipeline(env, tenant, pipeline)
        report["ceilings"] = ceilings(client, 1.0 if runs > 1 else 0.3)
        report["items_before"] = items_in(client, scale)
        report["sweep_before"] = sweep_cost(client, settings, runs)
        # one event through every hop first: the queues it creates, the caches it fills
        # (the first event a tenant and a pipeline ever get) are not part of the figures
        hops(env, layouts, scale, burst_events(scale, 1, "feature-warm"))
        before, sent = services.mntr(), Counter(nudge.sent)
        done = hops(env, layouts, scale, burst_events(scale, burst))
        after = services.mntr()
        report["hops"] = [vars(h) for h in done]
        report["burst_packets"] = after[PACKETS_IN] - before[PACKETS_IN] - 1  # minus mntr's own
        report["nudges"] = dict(nudge.sent - sent)
        report["items_after"] = items_in(client, scale)
        report["sweep_after"] = sweep_cost(client, settings, runs)
        report["fanout"] = fanout_limit(env, layouts, scale)  # last: it may leave a batch stuck
    finally:
        client.stop()
        client.close()
    return report


def print_table(report: dict[str, Any]) -> None:
    size, ceil = report["size"], report["ceilings"]
    rtt, burst = ceil["zk_exists_per_s"], size["burst"]
    pipelines = size["tenants"] * len(PIPELINES)
    loads = (report[k] for k in ("load_before", "load_measuring", "load_after"))
    print("\nload average before, when measuring, after: {} / {} / {}".format(*loads))
    print(
        f"{size['tenants']} tenants x {len(PIPELINES)} pipelines, {size['items']} item(s) each "
        f"by hand ({report['items_before']} items), setup {report['setup_s']:.0f} s"
    )
    gets = ceil["zk_pipelined_gets_per_s"]
    print(f"ceiling: ZooKeeper exists round trips/s, sequential  {rtt:7.0f}")
    print(f"ceiling: ZooKeeper gets/s, pipelined by 100          {gets:7.0f}")
    print(
        f"\nburst of {burst} ref-updated events for app (every tenant holds it; 2 pipelines each)"
    )
    print(
        f"  {'hop':33} {'in':>5} {'out':>5} {'ms':>7} {'in/s':>6} {'sends ms':>8} "
        f"{'reqs':>6} {'req/in':>6} {'req/s':>6} {'/ceil':>5}"
    )
    for hop in report["hops"]:
        counted, seconds = hop["events_in"] or hop["events_out"], hop["seconds"]
        per_s = hop["requests"] / seconds
        print(
            f"  {hop['name']:33} {hop['events_in']:5} {hop['events_out']:5} "
            f"{1000 * seconds:7.0f} {counted / seconds:6.0f} {1000 * hop['nudge_seconds']:8.0f} "
            f"{hop['requests']:6} {hop['requests'] / counted:6.2f} {per_s:6.0f} {per_s / rtt:5.2f}"
        )
        for shape, n in hop["shapes"]:
            print(f"      {n / counted:6.2f} per event  {shape}")
    to_queues = sum(h["seconds"] for h in report["hops"][:3])
    total = to_queues + report["hops"][3]["seconds"]
    print(
        f"  put -> in every pipeline queue: {burst / to_queues:5.1f} events/s ({to_queues:.2f} s)"
    )
    print(f"  put -> items enqueued:          {burst / total:5.1f} events/s ({total:.2f} s)")
    packets = report["burst_packets"]
    print(f"  ZooKeeper packets received (mntr): {packets:.0f}, {packets / burst:.0f} per event")
    print(f"  nudges sent: {report['nudges']}")
    for key, items in (("sweep_before", "items_before"), ("sweep_after", "items_after")):
        sweep, when = report[key], key.split("_")[1]
        print(f"\nat {pipelines} pipelines, {report[items]} items ({when} the burst), median")
        for label, ms, reqs in (
            ("maintenance sweep", sweep["sweep"]["ms"], sweep["sweep"]["requests"]),
            ("pending_work", sweep["pending_work"]["ms"], sweep["pending_work"]["requests"]),
        ):
            print(
                f"  {label:20} {ms:7.0f} ms {reqs:6.0f} requests, {reqs / pipelines:5.1f} per "
                f"pipeline; as sequential round trips {1000 * reqs / rtt:5.0f} ms"
            )
        for name, step in sweep["steps"].items():
            if step["requests"] > 2:
                print(f"    step {name:26} {step['ms']:7.0f} ms {step['requests']:6.0f} requests")
    fan = report["fanout"]
    print(
        f"\nconnection hop: {fan['txn_bytes_per_event']} transaction bytes per event at "
        f"{size['tenants']} tenants: at most {fan['largest_batch']} events per commit "
        f"(it reads {fan['batch']}); a full batch: {fan['full_batch']}"
    )


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--items", type=int, default=2, help="items enqueued per pipeline")
    parser.add_argument("--burst", type=int, default=50, help="ref-updated events (K)")
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
