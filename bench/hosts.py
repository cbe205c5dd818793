"""What several hosts would give (issue 39): executors on one, two and three hosts.

Three hosts as network namespaces on a bridge (tests/fixtures/hosts.py): a
ZooKeeper member in each (one 3-node ensemble), Redis and ``git daemon`` on
h1 (every fetch goes over ``git://``), a scheduler worker and a merger worker
(with the sweep timer) on h1, and one executor worker on each of the first
1, 2, then 3 hosts, each host with its own state dir; every executor merges
the item again from the request ZooKeeper keeps (``executor.merge_here``),
as an executor on another host does, the one on h1 too so the phases compare.
Each phase is a fresh ZooKeeper chroot and state dir with its own workers
(the same ensemble, Redis and git daemon): warm-up changes until every
executor has run a build, then N changes x M no-op jobs (``true``) through
check, enqueued at once as bench/throughput.py does (management events, one
nudge).

Each executor worker runs the stack's default number of processes (as a
host added to a deployment would), so the phases differ by one host's
worker each. The hosts share this machine's two cores, so builds/s cannot
grow with them: the figure is the per-build cost, which must not grow with
hosts. Printed per phase, with its ratio to the one-host phase:

* builds/s, from the enqueue to the last build's end (SQL);
* ZooKeeper requests per build: ``zk_packets_received`` summed over the
  three members (each counts the requests of the clients connected to it;
  our own ``mntr`` polls taken off);
* ZooKeeper writes per build: the leader's ``zk_proposal_count`` (every
  write is one proposal, which every member logs and fsyncs; the sum of the
  members' ``zk_cnt_updatelatency`` gives the same count), and the leader's
  fsyncs and bytes of znode data written per build;
* CPU ms per build of the worker process trees (/proc, reaped children
  included) per role, and of the three ZooKeeper members and Redis.

Then the ensemble's write ceiling, in the same run on the same ensemble:
``--writers`` client processes (one per member, round robin), each keeping
``--window`` kazoo async writes in flight (create a node of the size of
Sluice's mean write in the one-host phase, then delete it) for
``--ceiling-seconds``; writes/s is the leader's proposal count over that
time. Beside it the fsync ceiling of the members' disk (one disk for all
three here). The model: how many executor hosts the ensemble feeds before
that ceiling, ``ceiling / (writes per build x builds/s of one host)``, with
its assumptions printed.

Root only (namespaces), not in CI: ``sudo .venv/bin/python bench/hosts.py
[--changes 100 --jobs 3 --hosts 1 2 3 1]`` (a phase may repeat: the one-host
phase again at the end shows the machine's drift); ``--smoke``: 3 changes x
1 job on one and two hosts (75-85 s on this host, mostly starting workers).
Leaves nothing behind: the fixture's ``destroy()`` kills every process of
the namespaces and deletes them and the bridge.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import redis
from _checksystem import CheckSystem, check_system
from _sampling import fsync_ceiling
from _system import Phase, Services, cpu_seconds, epoch
from kazoo.client import KazooClient

from cli.stack.workers import EXECUTOR_CONCURRENCY
from tests.e2e.system import SluiceSystem, dedent
from tests.fixtures.ensemble import Member
from tests.fixtures.hosts import (
    REDIS_PORT,
    HostNetwork,
    HostWorkerFactory,
    NetHost,
    NetnsGitDaemon,
    NetnsRedis,
    host_ensemble,
    require_host_tools,
)
from tests.fixtures.workers import ServiceEnvironment, WorkerProcess

REPLAYED = "merged again here"  # an executor's log line: one per build it ran
REPLAY_SECONDS = re.compile(rf"{REPLAYED} in ([0-9.]+)s")
PACKETS_IN = "zk_packets_received"
PROPOSALS = "zk_proposal_count"  # the leader's
FSYNCS = "zk_cnt_fsynctime"
ROLES = ("scheduler", "merger", "executor")


# ------------------------------------------------------------------- the hosts


@dataclass(frozen=True)
class Counters:
    """The ensemble's counters at one moment (see the module's docstring)."""

    leader: int  # myid
    requests: float  # summed over the members
    writes: float  # the leader's proposals
    fsyncs: float  # the leader's
    written: float  # bytes of znode data (every member applies every write)

    def minus(self, before: Counters) -> Counters:
        if before.leader != self.leader:
            raise RuntimeError(f"the leader changed (zk{before.leader} -> zk{self.leader})")
        polls = 3  # one ``mntr`` packet per member
        return Counters(
            self.leader,
            self.requests - before.requests - polls,
            self.writes - before.writes,
            self.fsyncs - before.fsyncs,
            self.written - before.written,
        )


class HostServices(Services):
    """bench/_system.py's Services across the three hosts: the ensemble, Redis and git on h1.

    A phase (:meth:`system`) is a fresh chroot on the ensemble and a state dir
    and repositories of its own, served by the git daemon and fetched over
    ``git://`` by every worker.
    """

    def __init__(self, base: Path, network: HostNetwork) -> None:
        self.base = base
        self.network = network
        self.h1 = network.hosts[0]
        self.ensemble = host_ensemble(network, base / "ensemble")
        self.zookeeper = self.ensemble.members[0].server
        self.redis = NetnsRedis(
            data_dir=base / "redis", port=REDIS_PORT, host=self.h1.address, netns=self.h1.netns
        )
        self.git = NetnsGitDaemon(self.h1, base, base / "git-daemon.log")

    def start(self) -> None:
        self.ensemble.start_all()
        self.redis.start()
        self.redis.wait_ready()
        # the daemon is up once ``git ls-remote <url>/config`` answers: an empty one at
        # the top (each phase's repositories are under ``<tag>/repos``)
        subprocess.run(["git", "init", "-q", "--bare", str(self.base / "config")], check=True)
        self.git.start()

    def stop(self) -> None:
        self.git.stop()
        self.redis.stop()
        self.ensemble.stop_all()

    def pids(self) -> list[int]:
        return [*self.ensemble.pids(), *([self.redis.proc_pid] if self.redis.proc_pid else [])]

    def counters(self) -> Counters:
        every = {m.myid: MemberCounters(m).mntr() for m in self.ensemble.members}
        leader = self.ensemble.leader()
        mine = every[leader.myid]
        return Counters(
            leader.myid,
            sum(c.get(PACKETS_IN, 0.0) for c in every.values()),
            mine.get(PROPOSALS, 0.0),
            mine.get(FSYNCS, 0.0),
            self.written(mine),
        )

    def system(self, tag: str, session_timeout: float = 10.0) -> Phase:
        root = self.base / tag
        state = root / "state"  # the operator's: logs and the SQL database
        state.mkdir(parents=True)
        client = redis.Redis.from_url(self.redis.url)
        client.flushall()
        client.close()
        environment = ServiceEnvironment(
            zookeeper=self.ensemble.target(f"/bench-{uuid.uuid4().hex[:8]}"),
            redis_url=self.redis.url,
            state_dir=state,
            session_timeout=session_timeout,
        )
        factory = self.factory(environment, self.h1, root)
        system = SluiceSystem(environment, factory, root)
        system.config.write_text(
            dedent(
                f"""
                tenant_config: main.yaml
                connections:
                  local:
                    driver: git
                    baseurl: {self.git.url}/{tag}/repos
                executor:
                  merge_here: true
                """
            )
        )
        return Phase(system, factory)

    def factory(
        self, environment: ServiceEnvironment, host: NetHost, root: Path
    ) -> HostWorkerFactory:
        return HostWorkerFactory(environment, host, root / "hosts" / host.name / "state")


class MemberCounters(Services):
    """Services' ``mntr`` reading, pointed at one member of the ensemble."""

    def __init__(self, member: Member) -> None:  # only ``zookeeper``: all ``mntr`` reads
        self.zookeeper = member.server


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


# ------------------------------------------------------------------- a phase


@dataclass
class HostPhase:
    """One phase's check system and its workers, by host."""

    services: HostServices
    check: CheckSystem
    executors: dict[str, WorkerProcess]
    scheduler: WorkerProcess
    merger: WorkerProcess
    factories: list[HostWorkerFactory]

    def replays(self) -> dict[str, int]:
        """Builds each host's executor ran so far (its log's count)."""
        return {name: len(times) for name, times in self.replay_seconds().items()}

    def replay_seconds(self) -> dict[str, list[float]]:
        """Each host's executor's merges again so far: the seconds each took (its log)."""
        return {
            name: [float(s) for s in REPLAY_SECONDS.findall(w.log_text())]
            for name, w in self.executors.items()
        }

    def stop(self) -> None:
        workers = factory_workers(self.factories)
        for worker in workers:  # every warm shutdown at once, then each waited for
            worker.kill(signal.SIGTERM)
        for factory in self.factories:
            factory.stop_all()


def start_phase(
    services: HostServices, hosts: int, changes: int, jobs: int, concurrency: int
) -> HostPhase:
    tag = f"hosts{hosts}-{uuid.uuid4().hex[:6]}"
    check = check_system(services, tag, changes, jobs)
    system = check.phase.system
    h1 = check.phase.factory
    assert isinstance(h1, HostWorkerFactory)
    factories = [h1]
    factories += [
        services.factory(system.environment, host, system.root)
        for host in services.network.hosts[1:hosts]
    ]
    env = {"SLUICE_CONFIG": str(system.config)}
    beat = ["--beat", "--schedule", str(h1.state_dir / "beat-schedule")]
    try:
        scheduler = h1.start(("scheduler",), wait=False, extra_env=env)
        merger = h1.start(("merger", "maintenance"), wait=False, extra_env=env, extra_args=beat)
        executors = {
            f.host.name: f.start(("executor",), concurrency=concurrency, wait=False, extra_env=env)
            for f in factories
        }
        for factory in factories:
            for worker in factory.started:
                factory.wait_ready(worker, timeout=120)
        system.started += factory_workers(factories)
        system.sluice("reconfigure")
    except BaseException:
        for factory in factories:
            factory.stop_all()
        raise
    return HostPhase(services, check, executors, scheduler, merger, factories)


def factory_workers(factories: list[HostWorkerFactory]) -> list[WorkerProcess]:
    return [w for f in factories for w in f.started]


def warm_up(phase: HostPhase, refs: list[str]) -> int:
    """One change at a time until every executor has run a build; the changes used."""
    used = 0
    for ref in refs:
        phase.check.enqueue([ref])
        phase.check.wait_reported([ref])
        used += 1
        if all(phase.replays().values()):
            break
    phase.check.phase.system.sluice("wait", "--idle", "--timeout", "60")
    cold = [name for name, n in phase.replays().items() if not n]
    if cold:
        print(f"  (warm-up: the executor on {', '.join(cold)} ran no build)", flush=True)
    return used


def run_phase(
    services: HostServices,
    hosts: int,
    *,
    changes: int,
    jobs: int,
    warm: int,
    concurrency: int,
    logs: Path | None = None,
) -> dict[str, Any]:
    clock = time.monotonic()
    phase = start_phase(services, hosts, warm + changes, jobs, concurrency)
    check = phase.check
    timings = {"workers up": time.monotonic() - clock}
    try:
        clock = time.monotonic()
        used = warm_up(phase, check.refs[:warm])
        timings["warm-up"] = time.monotonic() - clock
        refs = check.refs[warm:]
        roles = {
            "scheduler": [phase.scheduler.pid],
            "merger": [phase.merger.pid],
            "executor": [w.pid for w in phase.executors.values()],
        }
        load_before = uptime()
        spread_before = phase.replays()
        role_before = {role: cpu_seconds(pids) for role, pids in roles.items()}
        service_before = cpu_seconds(services.pids())
        before = services.counters()
        started = time.time()
        sent = check.enqueue(refs)
        check.wait_reported(refs)
        counted = services.counters().minus(before)
        service_after = cpu_seconds(services.pids())
        role_after = {role: cpu_seconds(pids) for role, pids in roles.items()}
        replays = phase.replay_seconds()
        spread_after = {name: len(times) for name, times in replays.items()}
        load_after = uptime()
        builds, _sets = check.phase.rows()
        timings["measured"] = time.time() - started
    finally:
        clock = time.monotonic()
        phase.stop()
        timings["workers stopped"] = time.monotonic() - clock
        if logs is not None:  # the workers' logs, kept (--logs)
            system = check.phase.system
            shutil.copytree(system.environment.state_dir / "logs", logs / system.root.name)
    final: dict[tuple[str, str], dict[str, Any]] = {}
    for build in sorted((b for b in builds if b["ref"] in sent), key=lambda b: b["attempt"]):
        final[build["ref"], build["job"]] = build  # a retried build counts once, its last try
    measured = list(final.values())
    assert len(measured) == len(refs) * jobs, (len(measured), len(refs), jobs)
    assert all(b["result"] == "SUCCESS" for b in measured), [b["result"] for b in measured]
    count = len(measured)
    span = max(epoch(b["end_time"]) or 0.0 for b in measured) - started
    return {
        "hosts": hosts,
        "changes": len(refs),
        "jobs": jobs,
        "warm_changes": used,
        "retried": sum(1 for b in builds if b["ref"] in sent and b["attempt"] > 1),
        "builds": count,
        "seconds": span,
        "builds_per_s": count / span,
        "zk_requests_per_build": counted.requests / count,
        "zk_writes_per_build": counted.writes / count,
        "zk_fsyncs_per_build": counted.fsyncs / count,
        "zk_bytes_per_write": counted.written / counted.writes if counted.writes else 0.0,
        **{
            f"cpu_ms_{role}": 1000 * (role_after[role] - role_before[role]) / count
            for role in ROLES
        },
        "cpu_ms_workers": 1000 * sum(role_after[r] - role_before[r] for r in ROLES) / count,
        "cpu_ms_zk_redis": 1000 * (service_after - service_before) / count,
        "replay_s_p50": statistics.median(
            t for name, times in replays.items() for t in times[spread_before.get(name, 0) :]
        ),
        "builds_by_host": {h: spread_after[h] - spread_before.get(h, 0) for h in spread_after},
        "leader": f"zk{counted.leader}",
        "load_before": load_before,
        "load_after": load_after,
        "timings": timings,
    }


# ------------------------------------------------------------------- the write ceiling


@dataclass(frozen=True)
class Writer:
    """One ceiling client process: where it connects, what it writes, its signals."""

    hosts: str  # one member, with the chroot
    size: int
    window: int
    ready: multiprocessing.synchronize.Event
    go: multiprocessing.synchronize.Event
    stop: multiprocessing.synchronize.Event
    done: multiprocessing.Queue[int]


def _write(spec: Writer) -> None:
    """Keep ``window`` writes in flight (create a node, then delete it) until ``stop``."""
    client = KazooClient(hosts=spec.hosts, timeout=30)
    client.start(timeout=30)
    payload = b"x" * spec.size
    slots = threading.Semaphore(spec.window)
    completed = [0]
    lock = threading.Lock()

    def finished(_result: Any) -> None:
        with lock:
            completed[0] += 1

    def deleted(result: Any) -> None:
        finished(result)
        slots.release()

    def created(path: str) -> Callable[[Any], None]:
        def then(result: Any) -> None:
            finished(result)
            client.delete_async(path).rawlink(deleted)

        return then

    spec.ready.set()
    spec.go.wait()
    n = 0
    while not spec.stop.is_set():
        if not slots.acquire(timeout=0.5):
            continue
        path = f"/w{uuid.uuid4().hex[:8]}-{n}"
        n += 1
        client.create_async(path, payload).rawlink(created(path))
    for _ in range(spec.window):  # every write in flight completed
        slots.acquire(timeout=30)
    client.stop()
    client.close()
    spec.done.put(completed[0])


def write_ceiling(
    services: HostServices, size: int, seconds: float, writers: int, window: int
) -> dict[str, float]:
    """Writes/s the ensemble completes (the leader's proposals) under async clients."""
    context = multiprocessing.get_context("fork")
    root = f"/ceiling-{uuid.uuid4().hex[:8]}"
    members = services.ensemble.members
    ready = [context.Event() for _ in range(writers)]
    go, stop = context.Event(), context.Event()
    done: multiprocessing.Queue[int] = context.Queue()
    specs = [
        Writer(members[i % len(members)].hosts + root, size, window, ready[i], go, stop, done)
        for i in range(writers)
    ]
    procs = [context.Process(target=_write, args=(spec,), daemon=True) for spec in specs]
    admin = KazooClient(hosts=services.ensemble.hosts, timeout=30)
    admin.start(timeout=30)
    admin.ensure_path(root)
    for proc in procs:
        proc.start()
    try:
        for event in ready:
            if not event.wait(60):
                raise RuntimeError("a ceiling writer did not connect")
        time.sleep(0.5)
        go.set()
        time.sleep(0.5)  # every writer has its window in flight
        writer_pids = [proc.pid for proc in procs if proc.pid is not None]
        members_before = cpu_seconds(services.ensemble.pids())
        writers_before = cpu_seconds(writer_pids)
        before = services.counters()
        started = time.perf_counter()
        time.sleep(seconds)
        counted = services.counters().minus(before)
        elapsed = time.perf_counter() - started
        members_cpu = cpu_seconds(services.ensemble.pids()) - members_before
        writers_cpu = cpu_seconds(writer_pids) - writers_before
        stop.set()
        client_writes = 0
        for _ in procs:
            try:
                client_writes += done.get(timeout=60)
            except Empty:
                break
    finally:
        stop.set()
        go.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
        admin.delete(root, recursive=True)
        admin.stop()
        admin.close()
    return {
        "writes_per_s": counted.writes / elapsed,
        "fsyncs_per_s": counted.fsyncs / elapsed,
        "client_writes": client_writes,
        "members_cpu_share": members_cpu / elapsed,  # of one core
        "writers_cpu_share": writers_cpu / elapsed,
        "size": size,
        "seconds": elapsed,
    }


# ------------------------------------------------------------------- report

ROWS = [
    ("builds/s", "builds_per_s", "{:.2f}"),
    ("ZooKeeper requests per build (3 members)", "zk_requests_per_build", "{:.1f}"),
    ("ZooKeeper writes per build (leader)", "zk_writes_per_build", "{:.2f}"),
    ("ZooKeeper fsyncs per build (leader)", "zk_fsyncs_per_build", "{:.2f}"),
    ("CPU ms per build, workers", "cpu_ms_workers", "{:.1f}"),
    ("  scheduler", "cpu_ms_scheduler", "{:.1f}"),
    ("  merger", "cpu_ms_merger", "{:.1f}"),
    ("  executors", "cpu_ms_executor", "{:.1f}"),
    ("CPU ms per build, ZooKeeper x3 + Redis", "cpu_ms_zk_redis", "{:.1f}"),
    ("an executor's merge again, s (median)", "replay_s_p50", "{:.2f}"),
]


def print_phases(phases: list[dict[str, Any]]) -> None:
    base = phases[0]
    for p in phases:
        print(
            f"\n{p['hosts']} executor host(s): {p['changes']} changes x {p['jobs']} jobs, "
            f"{p['builds']} builds in {p['seconds']:.1f} s (warm-up {p['warm_changes']} "
            f"change(s)); builds per host {p['builds_by_host']}; retried {p['retried']}; "
            f"leader {p['leader']}"
        )
        print(f"  load before: {p['load_before']}")
        print(f"  load after:  {p['load_after']}")
        print("  seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in p["timings"].items()))
    head = "".join(f"{str(p['hosts']) + ' host(s)':>18}" for p in phases)
    print(f"\n{'per phase (ratio to one host)':42}{head}")
    for label, key, fmt in ROWS:
        cells = "".join(
            f"{fmt.format(p[key]):>10} x{p[key] / base[key] if base[key] else float('nan'):5.2f}"
            for p in phases
        )
        print(f"  {label:40}{cells}")
    print(
        "  requests: zk_packets_received summed over the 3 members (each counts its own "
        "clients'); writes and fsyncs: the leader's (every write is one proposal, which every "
        "member logs and fsyncs)"
    )


def print_model(phases: list[dict[str, Any]], ceiling: dict[str, float], disk: float) -> None:
    one = phases[0]
    writes = max(p["zk_writes_per_build"] for p in phases)
    per_host = one["builds_per_s"]
    fed = ceiling["writes_per_s"] / (writes * per_host)
    print(
        f"\nwrite ceiling of the 3-node ensemble: {ceiling['writes_per_s']:.0f} writes/s "
        f"({ceiling['size']:.0f}-byte nodes created then deleted, async, "
        f"{ceiling['seconds']:.1f} s; {ceiling['fsyncs_per_s']:.0f} leader fsyncs/s; CPU: "
        f"members {ceiling['members_cpu_share']:.2f}, writers {ceiling['writers_cpu_share']:.2f} "
        f"cores); fsync ceiling of the members' one disk: {disk:.0f}/s"
    )
    print(
        f"model: executor hosts one ensemble feeds = ceiling / (writes per build x builds/s "
        f"per host) = {ceiling['writes_per_s']:.0f} / ({writes:.2f} x {per_host:.2f}) "
        f"= {fed:.1f} hosts ({ceiling['writes_per_s'] / writes:.0f} builds/s in all)"
    )
    busiest = max(phases, key=lambda p: p["zk_writes_per_build"] * p["builds_per_s"])
    load = busiest["zk_writes_per_build"] * busiest["builds_per_s"]
    print(
        f"  the busiest phase ({busiest['hosts']} host(s)) wrote {load:.0f} writes/s: "
        f"{100 * load / ceiling['writes_per_s']:.0f} % of the ceiling"
    )
    print(
        "  assuming: executor hosts of this machine's speed, each at the one-host rate measured "
        "here (no-op builds, the host's two cores shared with everything else), writes per "
        "build the largest of the phases, a scheduler and merger that keep up, and a ceiling "
        "measured with the three members, their clients and the writers on the same two "
        "cores and one disk: on real hardware each member has its own cores and disk"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100, help="changes per phase (N)")
    parser.add_argument("--jobs", type=int, default=3, help="no-op jobs per change (M)")
    parser.add_argument("--hosts", type=int, nargs="+", help="phases (default: 1 2 3)")
    parser.add_argument("--warm", type=int, default=6, help="most warm-up changes per phase")
    parser.add_argument(
        "--executor-concurrency",
        type=int,
        default=EXECUTOR_CONCURRENCY,
        help="processes of each host's executor worker (default: the local stack's)",
    )
    parser.add_argument("--ceiling-seconds", type=float, default=5.0)
    parser.add_argument("--writers", type=int, default=3, help="ceiling client processes")
    parser.add_argument("--window", type=int, default=100, help="writes in flight per writer")
    parser.add_argument("--logs", type=Path, help="keep every phase's worker logs here")
    parser.add_argument("--smoke", action="store_true", help="3 x 1 on 1 and 2 hosts, 1 s")
    args = parser.parse_args()
    if args.smoke:
        args.changes, args.jobs, args.hosts, args.warm = 3, 1, args.hosts or [1, 2], 3
        args.ceiling_seconds, args.window = 1.0, 20
    args.hosts = args.hosts or [1, 2, 3]
    require_host_tools()
    print(f"bench/hosts.py at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print(f"load: {uptime()}", flush=True)
    print(
        f"executor worker per host: {args.executor_concurrency} processes; "
        f"{args.changes} changes x {args.jobs} no-op jobs per phase, check",
        flush=True,
    )
    began = time.monotonic()
    timings: dict[str, float] = {}
    network = HostNetwork.create()
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-hosts-") as tmp:
            base = Path(tmp)
            base.chmod(0o755)  # the git daemon and the jobs' users read under it
            services = HostServices(base, network)
            try:
                services.start()
                timings["hosts and services up"] = time.monotonic() - began
                phases = []
                for hosts in args.hosts:
                    result = run_phase(
                        services,
                        hosts,
                        changes=args.changes,
                        jobs=args.jobs,
                        warm=args.warm,
                        concurrency=args.executor_concurrency,
                        logs=args.logs,
                    )
                    phases.append(result)
                    print(f"{hosts} host(s): {result['builds_per_s']:.2f} builds/s", flush=True)
                clock = time.monotonic()
                size = round(phases[0]["zk_bytes_per_write"]) or 1000
                ceiling = write_ceiling(
                    services, size, args.ceiling_seconds, args.writers, args.window
                )
                disk = fsync_ceiling(services.ensemble.members[0].server.data_dir, seconds=1.0)
                timings["write ceiling"] = time.monotonic() - clock
                clock = time.monotonic()
            finally:
                services.stop()
    finally:
        network.destroy()
    timings["teardown"] = time.monotonic() - clock
    timings["in all"] = time.monotonic() - began
    print_phases(phases)
    print_model(phases, ceiling, disk)
    print("\nseconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))
    print(f"load at the end: {uptime()}")


if __name__ == "__main__":
    main()
