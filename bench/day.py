"""A peak day, compressed (issue 39): pull requests through check and gate as GitHub webhooks.

OpenStack's peak day at a chosen size: ``--changes`` pull requests over
``--projects`` projects in ``--tenants`` tenants (project ``p`` belongs to
tenant ``p mod tenants``; each tenant's gate is one shared queue), on a real
``sluice web``, real ``celery worker`` processes (a scheduler, a merger,
``--executors`` executors, and the sweep's timer in a worker of its own), a
ZooKeeper and a Redis of the run's own (bench/_system.py). GitHub is the
tests' fake (tests/fixtures/fake_github.py), which sends its webhooks signed
to ``sluice web``, as GitHub does.

What arrives, drawn with a seeded random (``--seed``), at ``--rate``
pull requests a second (exponential gaps):

* each pull request is *opened* (``pull_request`` ``opened``: check);
* ``--gate-share`` of them are labelled ``gate`` once their check
  succeeded (``pull_request`` ``labeled``: the gate's trigger and
  requirement);
* ``--depends-share`` say ``Depends-On:`` a gated, passing pull request of
  another project of their tenant opened earlier, and are labelled only
  after it;
* ``--fail-share`` of the gated ones fail in the gate: a share
  (``--flaky-share``) *flaky*, failing the first gate build whose tree
  holds them, the rest *deterministic*, failing every gate build whose tree
  holds them (as bench/gating.py's);
* a change runs about ``--jobs-per-change`` short jobs (``true``) in all,
  over its check and, if gated, its gate (OpenStack's day: 20,000 jobs for
  1,500 changes), so each project runs ``jobs / (1 + gate-share)`` of them
  in each pipeline, in a graph: job ``j<k>`` depends on ``j<(k-1)//3>``.

Each item is measured from its webhook's POST to its report: the fake
forge stamps the final commit status (``<tenant>/<pipeline>``, success or
failure) when it arrives. Printed: wall time, builds/s, p50/p95/p99 from
webhook to report per pipeline, ZooKeeper writes/s (``mntr``) beside an
fsync ceiling measured on the ZooKeeper data dir's disk in the same run,
each component's peak memory and its mean in each fifth of the run
(*flat* when the last fifth's is within 10 % of the first's), the znode
count and data size at the peak, Redis's ``used_memory``, and lost and
doubled results: each pull request must get exactly one final status per
pipeline it entered, each gated one be merged at most once and never
before its ``Depends-On``, and a deterministic failer never. The bench
exits 1 if any of these is not 0.

``.venv/bin/python bench/day.py [--changes 1500 --projects 50 --tenants 5
--rate 1.5]``; ``--smoke`` (``make test``, tests/bench/test_smoke.py):
8 changes, 4 projects, 2 tenants, about 3 jobs a pipeline.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import random
import re
import resource
import sqlite3
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _checksystem import CheckSystem, WorkerSetup, percentile, start_workers
from _sampling import Sampler, fsync_ceiling, print_cpu, print_memory, print_zookeeper
from _system import Phase, Services
from gating import LOG_LINE, STARTED, git_head

from cli.stack.workers import EXECUTOR_CONCURRENCY
from tests.fixtures.fake_forge import Reply
from tests.fixtures.fake_github import TOKEN, FakeGitHub, Pull
from tests.fixtures.waiting import wait_until
from tests.web.server import WebServer, start_web

SECRET = "day-webhook-secret"
FINAL = ("success", "failure", "error")

PIPELINES = r"""
    - queue:
        name: shared
    - pipeline:
        name: check
        manager: independent
        trigger:
          github:
            - event: pull_request
              action: [opened, changed]
        start:
          github: {status: pending}
        success:
          github: {status: success}
        failure:
          github: {status: failure}
    - pipeline:
        name: gate
        manager: dependent
        trigger:
          github:
            - event: pull_request
              action: labeled
              label: gate
        require:
          github:
            open: true
            label: [gate]
        success:
          github: {status: success, merge: true}
        failure:
          github: {status: failure}
    - job:
        name: base
        parent: null
        timeout: 120
    """

# Every job runs this; in the gate, j1 fails on a tree holding a deterministic
# failer, or a flaky one whose marker it is the first to remove.
JOB = """
    #!/bin/sh
    [ "$SLUICE_PIPELINE" = gate ] && [ "$SLUICE_JOB" = j1 ] || exit 0
    status=0
    for f in flaky/*; do
        [ -e "$f" ] || continue
        rm "{markers}/$(basename "$f")" 2>/dev/null && status=1
    done
    if [ -d fail ] && [ -n "$(ls fail)" ]; then
        status=1
    fi
    exit $status
    """


def jobs_yaml(count: int) -> str:
    """Jobs ``j0``..``j<count-1>``: ``j<k>`` depends on ``j<(k-1)//3>`` (a tree, 3 wide)."""
    stanzas = []
    for k in range(count):
        needs = f"\n        dependencies: [j{(k - 1) // 3}]" if k else ""
        stanzas.append(f"    - job:\n        name: j{k}\n        run: ci/job.sh{needs}\n")
    return "".join(stanzas)


def project_yaml(jobs: int) -> str:
    names = ", ".join(f"j{k}" for k in range(jobs))
    return f"""
        - project:
            queue: shared
            check: {{jobs: [{names}]}}
            gate: {{jobs: [{names}]}}
        """


@dataclass(frozen=True)
class Sizes:
    changes: int
    projects: int
    tenants: int
    jobs: int
    gate_share: float
    depends_share: float
    fail_share: float
    flaky_share: float
    rate: float
    seed: int

    def tenant_of(self, project: int) -> int:
        return project % self.tenants

    def project_name(self, project: int) -> str:
        return f"org{self.tenant_of(project)}/p{project}"

    def jobs_of(self, project: int) -> int:
        """The jobs ``project`` runs in each pipeline, spread -2..+2 about the mean.

        ``jobs`` counts a change's builds over its check and its gate, so a
        pipeline runs ``jobs / (1 + gate_share)`` of them (at least 2: j1 is
        the one that fails).
        """
        per_run = round(self.jobs / (1 + self.gate_share))
        return max(2, per_run + (project % 5) - 2)


@dataclass(frozen=True)
class Change:
    """One pull request of the day: when it arrives and what it does."""

    n: int
    project: int
    at: float  # seconds after the start
    gated: bool
    failure: str = ""  # "", "deterministic" or "flaky"
    depends_on: int | None = None  # the change it says Depends-On

    def files(self) -> dict[str, str]:
        files = {f"src/c{self.n}.py": f"c{self.n} = {self.n}\n"}
        if self.failure == "deterministic":
            files[f"fail/c{self.n}"] = "breaks its own test\n"
        elif self.failure == "flaky":
            files[f"flaky/c{self.n}"] = "fails its first gate test\n"
        return files


def draw(sizes: Sizes) -> list[Change]:
    """The day's pull requests, the same for the same sizes and seed."""
    rng = random.Random(f"day-{sizes.seed}")
    changes: list[Change] = []
    at = 0.0
    for n in range(sizes.changes):
        at += rng.expovariate(sizes.rate) if n else 0.0
        project = rng.randrange(sizes.projects)
        gated = rng.random() < sizes.gate_share
        failure = ""
        if gated and rng.random() < sizes.fail_share:
            failure = "flaky" if rng.random() < sizes.flaky_share else "deterministic"
        depends_on = None
        if rng.random() < sizes.depends_share:
            tenant = sizes.tenant_of(project)
            candidates = [
                c.n
                for c in changes[-30:]
                if c.gated
                and not c.failure
                and c.depends_on is None
                and c.project != project
                and sizes.tenant_of(c.project) == tenant
            ]
            depends_on = candidates[-1] if candidates else None
        changes.append(Change(n, project, at, gated, failure, depends_on))
    return changes


class StampedGitHub(FakeGitHub):
    """The fake GitHub, stamping each final commit status with the time it arrived,
    and each webhook with the time its POST began (:meth:`posted`, per thread)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # (sha, context) -> [(time, state)] of the final (not pending) statuses
        self.finals: dict[tuple[str, str], list[tuple[float, str]]] = {}
        self._posts = threading.local()

    def post_webhook(self, raw: bytes, headers: Mapping[str, str]) -> dict[str, Any]:
        self._posts.at = time.time()
        return super().post_webhook(raw, headers)

    def posted(self) -> float:
        """When this thread's last webhook POST began."""
        return float(self._posts.at)

    def route(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> Reply:
        reply = super().route(method, path, headers, body)
        if method == "POST" and "/statuses/" in path and reply.status == 201:
            state = str(body.get("state"))
            if state in FINAL:
                key = (path.rsplit("/", 1)[1], str(body.get("context")))
                with self.lock:
                    self.finals.setdefault(key, []).append((time.time(), state))
        return reply

    def last_final(self) -> float:
        """When the last final status arrived (0 before the first)."""
        with self.lock:
            return max((t for found in self.finals.values() for t, _ in found), default=0.0)

    def final(self, sha: str, context: str) -> list[tuple[float, str]]:
        with self.lock:
            return list(self.finals.get((sha, context), []))


@dataclass
class Opened:
    change: Change
    pull: Pull
    sha: str
    tenant: str
    opened_at: float
    labelled_at: float | None = None


@dataclass
class Day:
    """A day in progress: the forge, the plan, the pull requests opened so far, what went wrong."""

    sizes: Sizes
    forge: StampedGitHub
    plan: list[Change]
    opened: dict[int, Opened] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    not_gated: list[str] = field(default_factory=list)

    def open(self, change: Change) -> None:
        name = self.sizes.project_name(change.project)
        body = ""
        if change.depends_on is not None and change.depends_on in self.opened:
            dep = self.opened[change.depends_on]
            body = f"Depends-On: https://github.com/{dep.pull.project}/pull/{dep.pull.number}\n"
        tenant = f"t{self.sizes.tenant_of(change.project)}"
        try:
            pull = self.forge.open_pull(name, f"c{change.n}", f"Change {change.n}", body=body)
        except OSError as exc:
            self.refused.append(f"c{change.n} opened: {exc}")
            return
        sha = pull.sha(self.forge.repos)
        self.opened[change.n] = Opened(change, pull, sha, tenant, self.forge.posted())

    def ready_to_label(self, item: Opened) -> bool | None:
        """Whether a gated pull request may be labelled now (None: it never will)."""
        checks = self.forge.final(item.sha, f"{item.tenant}/check")
        if not checks:
            return False
        if checks[0][1] != "success":
            return None
        dep = item.change.depends_on
        if dep is None or dep not in self.opened:
            return True
        return self.opened[dep].labelled_at is not None

    def label(self, item: Opened) -> None:
        try:
            self.forge.label(item.pull, "gate")
        except OSError as exc:
            self.refused.append(f"c{item.change.n} labelled: {exc}")
            return
        item.labelled_at = self.forge.posted()

    def settled(self) -> bool:
        """Every pull request opened has its check report; every one labelled its gate's."""
        for item in self.opened.values():
            if not self.forge.final(item.sha, f"{item.tenant}/check"):
                return False
            if item.labelled_at is not None and not self.forge.final(
                item.sha, f"{item.tenant}/gate"
            ):
                return False
        return True


def drive(day: Day, timeout: float) -> float:
    """Open and label the day's pull requests on time; returns when all are reported."""
    start = time.time()
    waiting = list(day.plan)
    to_label: list[Opened] = []
    while True:
        now = time.time()
        while waiting and start + waiting[0].at <= now:
            change = waiting.pop(0)
            day.open(change)
            if change.gated and change.n in day.opened:
                to_label.append(day.opened[change.n])
        for item in list(to_label):
            ready = day.ready_to_label(item)
            if ready is None:
                day.not_gated.append(f"c{item.change.n}: its check failed")
                to_label.remove(item)
            elif ready:
                day.label(item)
                to_label.remove(item)
        if not waiting and not to_label and day.settled():
            return start
        if now - start > timeout:
            print(f"  timed out after {timeout:.0f} s", flush=True)
            return start
        time.sleep(0.05)


# ----------------------------------------------------------------- the system


def write_repos(phase: Phase, sizes: Sizes, changes: list[Change], markers: Path) -> None:
    """Each tenant's config project, the projects and one branch per pull request."""
    system = phase.system
    repos = system.repos
    tenants = []
    for t in range(sizes.tenants):
        mine = [sizes.project_name(p) for p in range(sizes.projects) if sizes.tenant_of(p) == t]
        tenants.append(
            f"""
            - tenant:
                name: t{t}
                source:
                  local:
                    config-projects: [config{t}]
                  github:
                    untrusted-projects: [{", ".join(mine)}]
            """
        )
        most = max(sizes.jobs_of(p) for p in range(sizes.projects))
        repos.commit(
            f"config{t}",
            "main",
            {
                "zuul.d/pipelines.yaml": PIPELINES.rstrip() + "\n" + jobs_yaml(most),
                "ci/job.sh": JOB.format(markers=markers),
            },
        )
    system.tenant("".join(tenants))
    bases = {}
    for p in range(sizes.projects):
        files = {".zuul.yaml": project_yaml(sizes.jobs_of(p)), "src/app.py": "x = 0\n"}
        bases[p] = repos.commit(sizes.project_name(p), "main", files)
    for change in changes:
        repos.commit(
            sizes.project_name(change.project),
            f"c{change.n}",
            change.files(),
            base=bases[change.project],
        )
        if change.failure == "flaky":
            marker = markers / f"c{change.n}"
            marker.write_text("fail once\n")
            marker.chmod(0o666)
    for p in range(sizes.projects):
        repos.git(sizes.project_name(p), "checkout", "-q", "--detach")  # merges go to main


@contextlib.contextmanager
def running_day(
    services: Services, sizes: Sizes, changes: list[Change], setup: WorkerSetup, executors: int
) -> Iterator[tuple[Day, Phase, WebServer]]:
    """The forge as connection ``github``, the repositories, the workers and ``sluice web``."""
    phase = services.system("day")
    phase.use_environment()
    system = phase.system
    markers = system.root / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # not sticky: a job of another user removes the bench's file
    forge = StampedGitHub(system.repos, "", SECRET)
    try:
        with forge:
            connection = (
                "  github:\n    driver: github\n    baseurl: repos\n"
                f"    api_url: {forge.url}\n    api_token: {TOKEN}\n"
                f"    webhook_token: {SECRET}\n"
            )
            text = system.config.read_text()
            system.config.write_text(text.replace("connections:\n", "connections:\n" + connection))
            write_repos(phase, sizes, changes, markers)
            # the sweep's timer starts once ``sluice reconfigure`` configured the
            # tenants: started with the workers, its own reconfiguration of the
            # new tenant file can hold the single merger process while the
            # command waits on a merge (seen once in three runs)
            start_workers(CheckSystem(phase, []), setup, executors=executors)
            sweep = {"SLUICE_SWEEP_INTERVAL": "5"}
            system.start_worker(("maintenance",), concurrency=1, env=sweep, beat=True)
            wait_until(
                lambda: _logged(phase, RECONFIGURED) >= sizes.tenants,
                180,
                "the sweep's reconfiguration of the new tenant file",
                interval=0.5,
            )
            with start_web(system, "") as web:
                forge.webhook_url = f"{web.url}/api/connection/github/payload"
                yield Day(sizes, forge, changes), phase, web
    finally:
        phase.stop()


# the merger's log, a tenant reconfigured by a task (the sweep's request)
RECONFIGURED = re.compile(r"Task sluice\.merger\.reconfigure\[[^\]]+\] succeeded")


def _logged(phase: Phase, pattern: re.Pattern[str]) -> int:
    """Lines of the workers' logs that ``pattern`` finds."""
    return sum(
        len(pattern.findall(w.log.read_text(errors="replace"))) for w in phase.system.started
    )


def components(phase: Phase, web: WebServer, services: Services) -> dict[str, list[int]]:
    """Each component's process trees (roots)."""
    found: dict[str, list[int]] = {}
    for worker in phase.system.started:  # named by their first queue
        found.setdefault(worker.queues[0], []).append(worker.pid)
    found["web"] = [web.pid]
    found["zookeeper"] = [services.zookeeper.proc_pid or 0]
    found["redis"] = [services.redis.proc_pid or 0]
    return found


def builds_finished(phase: Phase) -> int:
    """Build rows with an end in SQL so far (read-only; 0 before the reporter's tables)."""
    if not phase.database.exists():
        return 0
    connection = sqlite3.connect(f"file:{phase.database}?mode=ro", uri=True, timeout=1)
    try:
        query = "SELECT count(*) FROM sluice_builds WHERE end_time IS NOT NULL"
        return int(connection.execute(query).fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        connection.close()


def builds_started(phase: Phase) -> int:
    """Builds the executors started (their logs), those a gate reset aborted included."""
    count = 0
    for worker in phase.system.started:
        if worker.queues != ("executor",):
            continue
        for line in worker.log.read_text(errors="replace").splitlines():
            found = LOG_LINE.match(line)
            if found and STARTED.match(found[2]):
                count += 1
    return count


# ----------------------------------------------------------------- the figures


@dataclass
class Verdict:
    """Lost and doubled results, and what merged that must not have (or not then)."""

    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    wrongly: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def judge(day: Day) -> Verdict:
    verdict = Verdict()
    merges = Counter((m["project"], m["number"]) for m in day.forge.merges)
    order = {(m["project"], m["number"]): n for n, m in enumerate(day.forge.merges)}
    for item in day.opened.values():
        name = f"c{item.change.n}"
        pipelines = ["check"] + (["gate"] if item.labelled_at is not None else [])
        for pipeline in pipelines:
            reports = day.forge.final(item.sha, f"{item.tenant}/{pipeline}")
            if not reports:
                verdict.lost.append(f"{name} {pipeline}")
            elif len(reports) > 1:
                verdict.doubled.append(f"{name} {pipeline} x{len(reports)}")
        merged = merges[(item.pull.project, item.pull.number)]
        if merged > 1:
            verdict.doubled.append(f"{name} merged x{merged}")
        if merged and item.change.failure == "deterministic":
            verdict.wrongly.append(f"{name} fails on its own and merged")
        needed = day.opened.get(
            item.change.depends_on if item.change.depends_on is not None else -1
        )
        if merged and needed is not None:
            mine = order[(item.pull.project, item.pull.number)]
            theirs = order.get((needed.pull.project, needed.pull.number))
            if theirs is None or theirs > mine:
                verdict.wrongly.append(f"{name} merged before c{needed.change.n}, its Depends-On")
        gate = day.forge.final(item.sha, f"{item.tenant}/gate")
        if gate and gate[-1][1] == "success" and not merged:
            verdict.problems.append(f"{name} reported merged, not merged on the forge")
        if merged and not (gate and gate[-1][1] == "success"):
            verdict.problems.append(f"{name} merged without a successful gate report")
    return verdict


def latencies(day: Day, pipeline: str) -> list[float]:
    """Seconds from each item's webhook POST to its first final report."""
    found = []
    for item in day.opened.values():
        sent = item.opened_at if pipeline == "check" else item.labelled_at
        reports = day.forge.final(item.sha, f"{item.tenant}/{pipeline}")
        if sent is not None and reports:
            found.append(reports[0][0] - sent)
    return found


def print_latencies(day: Day) -> None:
    print("webhook POST -> report (final commit status), s:")
    for pipeline in ("check", "gate"):
        values = latencies(day, pipeline)
        if not values:
            print(f"  {pipeline:6} none")
            continue
        p50, p95, p99 = (percentile(values, q) for q in (0.5, 0.95, 0.99))
        print(
            f"  {pipeline:6} n={len(values):<5} p50 {p50:6.2f}  p95 {p95:6.2f}  p99 {p99:6.2f}"
            f"  max {max(values):6.2f}"
        )


@dataclass(frozen=True)
class Measured:
    """What the bench read around the day: its window, builds, ZooKeeper's counters, own CPU."""

    start: float
    end: float
    builds: int
    reported: int
    mntr_before: Mapping[str, float]
    mntr_after: Mapping[str, float]
    bench_cpu: float
    snapshot: tuple[str, int]  # the newest snapshot file on disk: name, bytes


def report(day: Day, sampler: Sampler, measured: Measured, ceilings: tuple[float, float]) -> None:
    wall = measured.end - measured.start
    arrivals = max((i.opened_at for i in day.opened.values()), default=measured.start)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    print(
        f"wall time, first webhook -> last report: {wall:.1f} s"
        f" (pull requests opened over the first {arrivals - measured.start:.1f} s,"
        f" {max((c.at for c in day.plan), default=0.0):.1f} s planned)"
    )
    labelled = sum(i.labelled_at is not None for i in day.opened.values())
    print(
        f"builds: {measured.builds} started ({measured.builds / wall:.2f}/s),"
        f" {measured.reported} reported (SQL); {len(day.opened)} pull requests opened,"
        f" {labelled} labelled gate, {len(day.forge.merges)} merged"
    )
    print_latencies(day)
    print_zookeeper(sampler, measured.mntr_before, measured.mntr_after, wall)
    print(
        f"  fsync ceiling of the ZooKeeper data dir's disk (512 B appends, same run): "
        f"{ceilings[0]:.0f}/s before the day, {ceilings[1]:.0f}/s after"
    )
    print(
        f"  newest snapshot on disk: {measured.snapshot[0]}, {measured.snapshot[1] / 1024:.0f} kB"
    )
    used = [s.redis_used for s in sampler.samples]
    print(
        f"Redis used_memory: peak {max(used) / 2**20:.1f} MB, at the end {used[-1] / 2**20:.1f} MB"
    )
    ratios = print_memory(sampler.samples, measured.start, measured.end)
    grown = [n for n, r in ratios.items() if r > 1.10]
    flat = "yes" if not grown else "no: " + ", ".join(grown)
    print(f"  flat (the last fifth within 10 % of the first): {flat}")
    print_cpu(sampler.samples, measured.start, measured.end)
    print(f"the benchmark's own CPU (the fake GitHub, the driver): {measured.bench_cpu:.1f} s")


def print_verdict(day: Day, verdict: Verdict) -> None:
    for label, found in (
        ("webhooks refused", day.refused),
        ("not gated", day.not_gated),
        ("problems", verdict.problems),
    ):
        if found:
            print(f"{label}: {len(found)}: {', '.join(found[:20])}")
    print(f"lost results: {len(verdict.lost)} {', '.join(verdict.lost[:20])}")
    print(f"doubled results: {len(verdict.doubled)} {', '.join(verdict.doubled[:20])}")
    wrongly = ", ".join(verdict.wrongly[:20])
    print(f"merged wrongly (a failer, or before its Depends-On): {len(verdict.wrongly)} {wrongly}")


def newest_snapshot(services: Services) -> tuple[str, int]:
    folder = services.zookeeper.data_dir / "data" / "version-2"
    snaps = sorted(folder.glob("snapshot.*"), key=lambda p: p.stat().st_mtime)
    return (snaps[-1].name, snaps[-1].stat().st_size) if snaps else ("none", 0)


# the largest size any option takes (a day of 1,500 changes is the goal)
MOST = 100_000


def count(text: str) -> int:
    """A whole number from 1 to :data:`MOST` (argparse's type: its message on anything else)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MOST:
        raise argparse.ArgumentTypeError(f"{text} is not from 1 to {MOST}")
    return value


def share(text: str) -> float:
    """A fraction from 0 to 1."""
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def rate(text: str) -> float:
    """A number above 0."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=count, default=1500)
    parser.add_argument("--projects", type=count, default=50)
    parser.add_argument("--tenants", type=count, default=5)
    parser.add_argument(
        "--jobs-per-change", type=count, default=13, help="over its check and gate, on average"
    )
    parser.add_argument("--gate-share", type=share, default=0.7)
    parser.add_argument("--depends-share", type=share, default=0.05)
    parser.add_argument("--fail-share", type=share, default=0.05, help="of the gated ones")
    parser.add_argument("--flaky-share", type=share, default=0.5, help="of the failing ones")
    parser.add_argument("--rate", type=rate, default=1.5, help="pull requests opened a second")
    parser.add_argument("--seed", type=int, default=39)
    parser.add_argument("--executors", type=count, default=1, help="executor workers")
    parser.add_argument(
        "--executor-concurrency",
        type=count,
        default=EXECUTOR_CONCURRENCY,
        help="processes of each executor worker (default: the local stack's)",
    )
    parser.add_argument("--timeout", type=rate, default=3600, help="seconds, for the whole day")
    parser.add_argument("--keep", default="", help="a folder for the run's files, kept after")
    parser.add_argument(
        "--smoke", action="store_true", help="8 changes, 4 projects, 2 tenants (make test)"
    )
    args = parser.parse_args(argv)
    if args.tenants > args.projects:
        parser.error(f"--tenants {args.tenants} is more than --projects {args.projects}")
    if args.smoke:
        args.changes, args.projects, args.tenants, args.jobs_per_change = 8, 4, 2, 5
        args.depends_share, args.fail_share, args.rate, args.timeout = 0.25, 0.25, 2.0, 240
    sizes = Sizes(
        args.changes,
        args.projects,
        args.tenants,
        args.jobs_per_change,
        args.gate_share,
        args.depends_share,
        args.fail_share,
        args.flaky_share,
        args.rate,
        args.seed,
    )
    changes = draw(sizes)
    setup = WorkerSetup(executor_concurrency=args.executor_concurrency)
    jobs = sum(sizes.jobs_of(c.project) * (1 + c.gated) for c in changes) / max(1, len(changes))
    print(
        f"day: {sizes.changes} pull requests, {sizes.projects} projects, {sizes.tenants} tenants,"
        f" {jobs:.1f} jobs a change (check and gate), {sizes.rate:g}/s;"
        f" gated {sum(c.gated for c in changes)},"
        f" Depends-On {sum(c.depends_on is not None for c in changes)},"
        f" failing in the gate {sum(c.failure == 'deterministic' for c in changes)}"
        f" + {sum(c.failure == 'flaky' for c in changes)} flaky; seed {sizes.seed};"
        f" {args.executors} executor(s) x {args.executor_concurrency};"
        f" commit {git_head()}, {platform.node()}, load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="sluice-day-") as tmp:
        base = Path(args.keep or tmp)
        base.mkdir(parents=True, exist_ok=True)
        services = Services(base)
        try:
            services.start()
            zk_disk = services.zookeeper.data_dir / "data"
            ceiling_before = fsync_ceiling(zk_disk)
            with running_day(services, sizes, changes, setup, args.executors) as (day, phase, web):
                print("  the system is up; the day starts", flush=True)
                sampler = Sampler(
                    services,
                    lambda: components(phase, web, services),
                    builds=lambda: builds_finished(phase),
                )
                sampler.start()
                before = services.mntr()
                usage = resource.getrusage(resource.RUSAGE_SELF)
                start = drive(day, args.timeout)
                end = day.forge.last_final() or time.time()
                after = services.mntr()
                bench_cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - _cpu(usage)
                sampler.stop()
                phase.system.sluice("wait", "--idle", "--timeout", "120")
                builds = builds_started(phase)
                reported = len(phase.rows()[0])
                snapshot = newest_snapshot(services)
            ceiling_after = fsync_ceiling(zk_disk)
        finally:
            services.stop()
    ceilings = (ceiling_before, ceiling_after)
    report(
        day,
        sampler,
        Measured(start, end, builds, reported, before, after, bench_cpu, snapshot),
        ceilings,
    )
    verdict = judge(day)
    print_verdict(day, verdict)
    if verdict.lost or verdict.doubled or verdict.wrongly or day.refused:
        sys.exit(1)
    print("\nnothing lost, nothing doubled, nothing merged wrongly")


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
