"""Gating: a gate of N changes per change (Zuul's way) and batched with bisection.

For each failure rate (0, 5, 10 and 25 % by default), the same N changes of
one project (40 by default) go through a dependent gate twice, side by
side in one invocation and each in a fresh ZooKeeper chroot, state dir and
broker with its own real ``celery worker`` processes (bench/_system.py):

* **per change**: the pipeline without ``batch`` (each change tested on
  those ahead of it, Zuul's default window of 20);
* **batched**: the same pipeline with ``batch: {size: 8, max-wait: 2}``
  (``--batch-size``, ``--max-wait``, ``--max-bisect-depth``): a failed
  batch is bisected.

Every change adds ``src/c<n>.py``. Which changes fail is drawn with a seeded
random (``--seed``): ``round(rate x N)`` of them, of which a share
(``--flaky-share``, half by default) is *flaky* and the rest
*deterministic*. A deterministic failer adds ``fail/c<n>``: the job (one,
``unit``: ``sleep --sleep`` seconds, 2 by default, then its checks) fails
on every tree that holds it. A flaky one adds ``flaky/c<n>`` and the bench
leaves a marker for it in a folder the jobs may write; the first build
whose tree holds the change removes the marker and fails, every later one
passes (a retest passes).

All N enqueue events are put back to back (as ``sluice enqueue`` writes
them) and the scheduler nudged once, after a warm-up change through an
unmeasured check pipeline. For each run it prints:

* *builds run*: builds the executor worker started (its log: ``claimed
  by``, ``started``, then completed or aborted), those a reset threw away
  included; *CI s*: the sum of their durations, start to end; those it
  claimed and ended unstarted (cancelled while they waited) are counted
  apart. *builds reported* and *reported CI s* are the SQL rows (``sluice
  builds --json``): only the builds of each item's last buildset, since a
  reset gives an item a new buildset and its old builds are never reported;
* *last merge s*: from the first enqueue to the report of the last change
  that merged (its buildset's SQL ``updated``: written after the push);
* *merged*: changes reported SUCCESS, checked against the branch (each
  one's file is on ``main``, and ``main`` has exactly that many commits
  more); *flaky merged*: of them, flaky ones;
* *merged wrongly*: deterministic failers reported SUCCESS or whose file
  is on ``main``. It must be 0: the bench exits 1 otherwise.

Then per rate, batched over per change for builds run, CI seconds and the
last merge, and whether the targets of issue 37 hold (printed, never
asserted): at 5 %, at least 40 % fewer builds and no later last merge; at
25 %, no more builds and no later last merge.

``.venv/bin/python bench/gating.py [--changes 40] [--rates 0 5 10 25]
[--sleep 2] [--batch-size 8] [--max-wait 2] [--executor-concurrency 4]``;
``--smoke``: 6 changes, 25 %, ``sleep 0`` (``make test`` runs it through
``tests/bench/test_smoke.py``; only that it runs and nothing merged wrongly
is checked).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _checksystem import MAIN_YAML, CheckSystem, WorkerSetup, start_workers
from _system import Phase, Services, epoch

from cli.stack.workers import EXECUTOR_CONCURRENCY

PROJECT = "app"

PIPELINES = """
    - pipeline:
        name: check
        manager: independent
        trigger:
          local:
            - event: ref-updated
              ref: ^refs/heads/never$
    - pipeline:
        name: gate
        manager: dependent
        trigger:
          local:
            - event: ref-updated
              ref: ^refs/heads/never$
        success:
          local:
            merge: true
        BATCH
    - job:
        name: base
        parent: null
        timeout: 300
    """

APP_ZUUL = """
    - job:
        name: warm
        run: ci/warm.sh
    - job:
        name: unit
        run: ci/unit.sh
    - project:
        check:
          jobs: [warm]
        gate:
          jobs: [unit]
    """

# The job: a test that takes SLEEP seconds, then fails, once for each, on a
# tree holding a flaky change whose marker is still there (``rm`` succeeds
# for one build only: the first to get there), and on every tree holding a
# deterministic failer.
UNIT = """
    #!/bin/sh
    sleep {sleep}
    status=0
    for f in flaky/*; do
        [ -e "$f" ] || continue
        if rm "{markers}/$(basename "$f")" 2>/dev/null; then
            echo "flaky, fails this once: $f"
            status=1
        fi
    done
    if [ -d fail ] && [ -n "$(ls fail)" ]; then
        echo "breaks its own test: $(ls fail)"
        status=1
    fi
    exit $status
    """

WARM = "#!/bin/sh\nexec true\n"

# the executor's log: "[2026-12-07 10:00:00,123: INFO/ForkPoolWorker-1] ..."
LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): [A-Z]+/[^\]]*\] (.*)$")
CLAIMED = re.compile(r"build request (\w+): claimed by .*change=(\S+) job=unit")
STARTED = re.compile(r"build request (\w+): started, log ")
ENDED = re.compile(r"build request (\w+): (\w+), (\w+)$")


@dataclass(frozen=True)
class Plan:
    """Which of the changes fail, and how (the same for both modes of a rate)."""

    changes: int
    rate: float
    deterministic: frozenset[int]
    flaky: frozenset[int]

    @classmethod
    def draw(cls, changes: int, rate: float, seed: int, flaky_share: float) -> Plan:
        rng = random.Random(f"{seed}-{changes}-{rate}")
        failing = rng.sample(range(changes), round(rate * changes))
        flaky = rng.sample(failing, round(flaky_share * len(failing)))
        return cls(changes, rate, frozenset(failing) - frozenset(flaky), frozenset(flaky))

    def files(self, n: int) -> dict[str, str]:
        files = {f"src/c{n}.py": f"c{n} = {n}\n"}
        if n in self.deterministic:
            files[f"fail/c{n}"] = "breaks its own test\n"
        if n in self.flaky:
            files[f"flaky/c{n}"] = "fails on its first test\n"
        return files

    def describe(self) -> str:
        det = ", ".join(f"c{n}" for n in sorted(self.deterministic)) or "none"
        flaky = ", ".join(f"c{n}" for n in sorted(self.flaky)) or "none"
        return f"deterministic: {det}; flaky: {flaky}"


@dataclass(frozen=True)
class Mode:
    name: str
    batch: dict[str, float] | None

    def pipelines(self) -> dict[str, str]:
        batch = ""
        if self.batch:
            pairs = ", ".join(f"{k}: {v:g}" for k, v in self.batch.items())
            batch = f"batch: {{{pairs}}}"
        text = PIPELINES.replace("BATCH" if batch else "        BATCH\n", batch)
        return {"zuul.d/pipelines.yaml": text}


@dataclass
class Outcome:
    mode: str
    rate: float
    builds_run: int = 0
    builds_aborted: int = 0
    builds_unstarted: int = 0
    ci_seconds: float = 0.0
    builds_reported: int = 0
    reported_ci_seconds: float = 0.0
    last_merge_s: float = float("nan")
    all_reported_s: float = 0.0
    merged: int = 0
    flaky_merged: int = 0
    wrongly: int = 0
    problems: list[str] = field(default_factory=list)


def prepare(
    services: Services, tag: str, plan: Plan, mode: Mode, sleep: float
) -> tuple[CheckSystem, list[str], str]:
    """A tenant with the mode's gate, N changes under ``refs/changes/<n>``, markers."""
    phase = services.system(tag)
    phase.use_environment()
    system = phase.system
    markers = system.root / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # not sticky: a job of another user removes the bench's file
    for n in plan.flaky:
        (markers / f"c{n}").write_text("fail once\n")
        (markers / f"c{n}").chmod(0o666)
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", mode.pipelines())
    app = {
        ".zuul.yaml": APP_ZUUL,
        "ci/unit.sh": UNIT.format(sleep=f"{sleep:g}", markers=markers),
        "ci/warm.sh": WARM,
    }
    base = system.repos.commit(PROJECT, "main", app)
    for n in range(-1, plan.changes):  # -1: the warm-up change, through check only
        files = plan.files(n) if n >= 0 else {"src/warm.py": "warm = 1\n"}
        system.repos.commit(PROJECT, f"c{n}", files, base=base)
    system.repos.git(PROJECT, "checkout", "-q", "--detach")  # the gate pushes to main
    refs = []
    for n in range(-1, plan.changes):
        ref = f"refs/changes/{n}" if n >= 0 else "refs/changes/warm"
        system.repos.git(PROJECT, "update-ref", ref, f"refs/heads/c{n}")
        system.repos.git(PROJECT, "update-ref", "-d", f"refs/heads/c{n}")
        refs.append(ref)
    return CheckSystem(phase, refs), refs, base


@dataclass(frozen=True)
class Ran:
    """A ``unit`` build the executor ran: when it was claimed, for how long, its change."""

    start: float
    seconds: float
    change: str
    result: str


def executor_builds(phase: Phase, since: float) -> tuple[list[Ran], int]:
    """The ``unit`` builds the executor started (start to end), in the order they started,
    and how many it claimed and ended without starting (cancelled while they waited)."""
    claimed: dict[str, str] = {}
    started: dict[str, float] = {}
    ran: list[Ran] = []
    unstarted = 0
    for worker in phase.system.started:
        if worker.queues != ("executor",):
            continue
        for line in worker.log.read_text(errors="replace").splitlines():
            found = LOG_LINE.match(line)
            if not found:
                continue
            when = datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            message = found[2]
            if m := CLAIMED.match(message):
                if when >= since - 1:
                    claimed[m[1]] = m[2]
            elif (m := STARTED.match(message)) and m[1] in claimed:
                started[m[1]] = when
            elif (m := ENDED.match(message)) and m[1] in claimed:
                change = claimed.pop(m[1])
                if m[1] in started:
                    begun = started.pop(m[1])
                    ran.append(Ran(begun - since, when - begun, change, m[3]))
                else:
                    unstarted += 1
    # a build still running at the end (none, once every change is reported) counts
    ran += [Ran(begun - since, 0.0, claimed[u], "RUNNING") for u, begun in started.items()]
    return sorted(ran, key=lambda r: r.start), unstarted


@dataclass(frozen=True)
class Options:
    """How every run goes: the job's length, the executors, the run's timeout."""

    sleep: float
    setup: WorkerSetup
    executors: int = 1
    timeout: float = 900
    verbose: bool = False


def gate_run(services: Services, plan: Plan, mode: Mode, options: Options) -> Outcome:
    tag = f"{mode.name}-{plan.rate:g}-{int(time.time() * 1000) % 10**6}"
    check, refs, base = prepare(services, tag, plan, mode, options.sleep)
    phase = check.phase
    system = phase.system
    outcome = Outcome(mode.name, plan.rate)
    warm, gated = refs[:1], refs[1:]
    try:
        start_workers(check, options.setup, executors=options.executors, sweep="5")
        check.enqueue(warm, pipeline="check")
        check.wait_reported(warm)
        system.sluice("wait", "--idle", "--timeout", "60")
        print(f"  {mode.name}: enqueueing {len(gated)}", flush=True)
        sent = check.enqueue(gated, pipeline="gate")
        first = min(sent.values())
        check.wait_reported(gated, timeout=options.timeout)
        outcome.all_reported_s = time.time() - first
        system.sluice("wait", "--idle", "--timeout", "60")
        builds, sets = phase.rows()
        ran, outcome.builds_unstarted = executor_builds(phase, first)
        tip = system.repos.git(PROJECT, "rev-parse", "refs/heads/main")
        on_main = set(system.repos.git(PROJECT, "ls-tree", "-r", "--name-only", tip).split())
        commits = len(system.repos.log(PROJECT, base, tip))
    finally:
        phase.stop()
    outcome.builds_run = len(ran)
    outcome.builds_aborted = sum(r.result in ("ABORTED", "CANCELED") for r in ran)
    outcome.ci_seconds = sum(r.seconds for r in ran)
    if options.verbose:
        for r in ran:
            print(f"    {r.start:7.2f} s +{r.seconds:5.2f} s  {r.change:>10}  {r.result}")
    gated_sets = [s for s in sets if s["ref"] in sent]
    reported = [b for b in builds if b["ref"] in sent and b["job"] == "unit"]
    outcome.builds_reported = len(reported)
    outcome.reported_ci_seconds = sum(
        (epoch(b["end_time"]) or 0.0) - (epoch(b["start_time"]) or 0.0)
        for b in reported
        if b["start_time"] and b["end_time"]
    )
    index = {f"refs/changes/{n}": n for n in range(plan.changes)}
    results = {s["ref"]: s["result"] for s in gated_sets}
    succeeded = sorted(index[r] for r, result in results.items() if result == "SUCCESS")
    outcome.merged = len(succeeded)
    outcome.flaky_merged = sum(n in plan.flaky for n in succeeded)
    merges = [epoch(s["updated"]) or 0.0 for s in gated_sets if s["result"] == "SUCCESS"]
    if merges:
        outcome.last_merge_s = max(merges) - first
    for n in sorted(plan.deterministic):
        if results.get(f"refs/changes/{n}") == "SUCCESS" or f"fail/c{n}" in on_main:
            outcome.wrongly += 1
            outcome.problems.append(f"c{n} fails on its own and merged")
    for n in succeeded:
        if f"src/c{n}.py" not in on_main:
            outcome.problems.append(f"c{n} reported merged, not on main")
    for n in range(plan.changes):
        if n not in succeeded and f"src/c{n}.py" in on_main:
            outcome.problems.append(f"c{n} on main, not reported merged")
    if commits < outcome.merged:
        outcome.problems.append(f"main has {commits} new commits for {outcome.merged} merged")
    if len(results) != plan.changes:
        outcome.problems.append(f"{len(results)} of {plan.changes} changes reported")
    return outcome


ROWS = [
    ("builds run (executor started them)", "builds_run", "{:.0f}"),
    ("  of them aborted by a reset", "builds_aborted", "{:.0f}"),
    ("CI s (executor, start to end)", "ci_seconds", "{:.1f}"),
    ("builds cancelled before they started", "builds_unstarted", "{:.0f}"),
    ("builds reported (SQL)", "builds_reported", "{:.0f}"),
    ("CI s reported (SQL)", "reported_ci_seconds", "{:.1f}"),
    ("first enqueue -> last merge s", "last_merge_s", "{:.1f}"),
    ("first enqueue -> all reported s", "all_reported_s", "{:.1f}"),
    ("changes merged", "merged", "{:.0f}"),
    ("  of them flaky", "flaky_merged", "{:.0f}"),
    ("changes merged wrongly", "wrongly", "{:.0f}"),
]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_rate(plan: Plan, per: Outcome, batched: Outcome) -> None:
    print(f"\nfailure rate {plan.rate * 100:g} % of {plan.changes}: {plan.describe()}")
    print(f"  {'':38} {'per change':>11} {'batched':>11} {'batched/per':>12}")
    for label, key, fmt in ROWS:
        a, b = getattr(per, key), getattr(batched, key)
        r = f"x{ratio(b, a):.2f}" if key in ("builds_run", "ci_seconds", "last_merge_s") else ""
        print(f"  {label:38} {fmt.format(a):>11} {fmt.format(b):>11} {r:>12}")
    for outcome in (per, batched):
        for problem in outcome.problems:
            print(f"  PROBLEM ({outcome.mode}): {problem}")
    builds = ratio(batched.builds_run, per.builds_run)
    later = batched.last_merge_s <= per.last_merge_s
    rate = round(plan.rate * 100)
    if rate == 5:
        held = builds <= 0.6 and later
        print(
            f"  target at 5 %: >= 40 % fewer builds and no later last merge: "
            f"{'holds' if held else 'does not hold'} (builds x{builds:.2f}, "
            f"last merge {'no later' if later else 'later'})"
        )
    elif rate == 25:
        held = builds <= 1.0 and later
        print(
            f"  target at 25 %: no worse than per change (builds, last merge): "
            f"{'holds' if held else 'does not hold'} (builds x{builds:.2f}, "
            f"last merge {'no later' if later else 'later'})"
        )


def git_head() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--rates", type=float, nargs="+", default=[0, 5, 10, 25], help="in %%")
    parser.add_argument("--sleep", type=float, default=2.0, help="seconds each build takes")
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--flaky-share", type=float, default=0.5, help="of the failing changes")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-wait", type=float, default=2.0)
    parser.add_argument("--max-bisect-depth", type=int, default=None, help="default: Sluice's")
    parser.add_argument("--modes", nargs="+", default=["per-change", "batched"])
    parser.add_argument("--executors", type=int, default=1, help="executor workers")
    parser.add_argument(
        "--executor-concurrency",
        type=int,
        default=EXECUTOR_CONCURRENCY,
        help="processes of each executor worker (default: the local stack's)",
    )
    parser.add_argument("--timeout", type=float, default=900, help="per run, seconds")
    parser.add_argument("--keep", default="", help="a folder for the run's files, kept after")
    parser.add_argument(
        "--verbose", action="store_true", help="each run's builds: start, seconds, change, result"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="6 changes, 25 %%, sleep 0 (make test runs it)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.changes, args.rates, args.sleep, args.timeout = 6, [25], 0.0, 240
    batch: dict[str, float] = {"size": args.batch_size, "max-wait": args.max_wait}
    if args.max_bisect_depth is not None:
        batch["max-bisect-depth"] = args.max_bisect_depth
    modes = {"per-change": Mode("per-change", None), "batched": Mode("batched", batch)}
    chosen = [modes[m] for m in args.modes]
    setup = WorkerSetup(executor_concurrency=args.executor_concurrency)
    options = Options(args.sleep, setup, args.executors, args.timeout, args.verbose)
    print(
        f"gating: {args.changes} changes, job sleep {args.sleep:g} s, rates {args.rates} %, "
        f"seed {args.seed}, flaky share {args.flaky_share:g}; batched: batch {batch}; "
        f"window: Zuul's default (20); {args.executors} executor worker(s) x "
        f"{args.executor_concurrency} processes; commit {git_head()}, {platform.node()}, "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    table: list[tuple[Plan, dict[str, Outcome]]] = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as tmp:
        base = Path(args.keep or tmp)
        base.mkdir(parents=True, exist_ok=True)
        services = Services(base)
        try:
            services.start()
            for rate in args.rates:
                plan = Plan.draw(args.changes, rate / 100, args.seed, args.flaky_share)
                print(f"rate {rate:g} %: {plan.describe()}", flush=True)
                runs: dict[str, Outcome] = {}
                for mode in chosen:
                    started = time.time()
                    runs[mode.name] = gate_run(services, plan, mode, options)
                    print(
                        f"  {mode.name}: done in {time.time() - started:.0f} s, "
                        f"{runs[mode.name].builds_run} builds, "
                        f"{runs[mode.name].merged} merged",
                        flush=True,
                    )
                table.append((plan, runs))
        finally:
            services.stop()
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    wrong = 0
    for plan, runs in table:
        if "per-change" in runs and "batched" in runs:
            print_rate(plan, runs["per-change"], runs["batched"])
        else:
            for outcome in runs.values():
                print(f"\nrate {plan.rate * 100:g} %, {outcome.mode}: {outcome}")
        wrong += sum(o.wrongly for o in runs.values())
    if wrong:
        print(f"\n{wrong} change(s) merged wrongly")
        sys.exit(1)
    print("\nno change merged wrongly")


if __name__ == "__main__":
    main()
