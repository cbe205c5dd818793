"""Where the whole machine's CPU goes during the check benchmark, by process and role.

``bench/throughput.py`` counts the CPU of the workers' process trees from
``/proc`` (their own and their reaped children's); this one samples every
CPU of the host with ``perf record -a`` during the measured window of one
check run and gives each sample to the process that was running, grouped by
role: a worker's main (Celery's consumer) and pool processes, the step
zygotes, and each child below them by its command (git, bwrap, the job's
shell), ZooKeeper's threads, Redis, the kernel's threads, idle. Nothing is
missed that ``/proc`` accounting misses (a process reaped by init, a kernel
thread's work, time before a child is reaped).

With ``--timeline MS``, the whole measured window instead, from the
first enqueue to the last report, in buckets of MS milliseconds: each
bucket's samples by role (the eight busiest roles, a worker's children
with it), which shows what paces a burst (the first merge, a merger
working alone, idle CPUs); ``--pipeline gate`` for the gate.

Needs ``perf`` (Debian: linux-perf) and root (or ``perf_event_paranoid`` -1).
Not run in CI: ``.venv/bin/python bench/cpu_by_process.py [--changes 100]
[--seconds 5] [--build-dir tmpfs] [--timeline 50 [--pipeline gate]]``. The
run must be long enough for the window: about 30 builds a second, so 100
changes (300 builds) for 5 s; a timeline wants 20 changes.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
STARTED = "measuring check: started"
DONE = "measuring check: done"
# perf script's time field: seconds, then a colon
TIME = re.compile(r"\s(\d+\.\d+):")
FORK = re.compile(r"PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)")
WORKER = re.compile(r"worker -Q (\S+)")
CPUS = os.cpu_count() or 1


def snapshot() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process now."""
    ps = ["ps", "-eo", "pid,ppid,args"]
    out = subprocess.run(ps, capture_output=True, text=True, check=True).stdout
    table: dict[int, tuple[int, str]] = {}
    for line in out.splitlines()[1:]:
        pid, ppid, args = line.split(None, 2)
        table[int(pid)] = (int(ppid), args)
    return table


class Roles:
    """The role of a process from the long-lived ones' command lines and the fork tree."""

    def __init__(self, processes: dict[int, tuple[int, str]], forks: dict[int, int]) -> None:
        self.args = {pid: args for pid, (_ppid, args) in processes.items()}
        self.parent = {**forks, **{pid: ppid for pid, (ppid, _args) in processes.items()}}

    def own(self, pid: int) -> str | None:
        """The role of a process named by its own command line, if it has one."""
        args = self.args.get(pid, "")
        if found := WORKER.search(args):
            queue = found.group(1).split(",")[0]
            main = WORKER.search(self.args.get(self.parent.get(pid, 0), "")) is None
            return f"{queue} worker, {'main' if main else 'pool'}"
        if "zygote.py" in args:
            return "step zygote"
        if "bench/throughput.py" in args:
            return "benchmark"
        if "zookeeper" in args.lower():
            return "ZooKeeper"
        if "redis-server" in args:
            return "Redis"
        return None

    def of(self, pid: int, comm: str) -> str:
        if pid == 0:
            return "idle"
        if role := self.own(pid):
            return role
        ancestor = self.parent.get(pid)
        for _ in range(20):
            if ancestor is None or ancestor <= 1:
                break
            if role := self.own(ancestor):
                return f"{role} > {comm}"
            ancestor = self.parent.get(ancestor)
        return f"other: {comm}"


def perf_script(data: Path) -> str:
    """The samples (command, pid) and the fork events of ``perf record``'s ``data``."""
    script = ["perf", "script", "-i", str(data), "--show-task-events", "-F", "comm,pid"]
    return subprocess.run(script, capture_output=True, text=True, check=True).stdout


def parse(out: str) -> tuple[dict[int, int], list[tuple[float, int, str]]]:
    """The fork events (child -> parent) and the samples (time, pid, command) of ``out``.

    ``out`` is ``perf script --show-task-events`` with the fields
    ``comm,pid`` or ``comm,pid,time``; without the time, every sample's is 0.
    """
    forks: dict[int, int] = {}
    samples: list[tuple[float, int, str]] = []
    for line in out.splitlines():
        if found := FORK.search(line):
            pid, tid, ppid = (int(found.group(i)) for i in (1, 2, 3))
            if pid == tid:
                forks.setdefault(pid, ppid)
            continue
        if "PERF_RECORD" in line or not line.strip():
            continue
        stamp = TIME.search(line)
        head = line[: stamp.start()] if stamp else line
        name, _, number = head.strip().rpartition(" ")
        if number.isdigit():
            samples.append((float(stamp.group(1)) if stamp else 0.0, int(number), name.strip()))
    return forks, samples


def attribute(out: str, processes: dict[int, tuple[int, str]]) -> tuple[Counter[str], int]:
    """Samples per role, and all samples, from ``perf script``'s output ``out``."""
    forks, samples = parse(out)
    roles = Roles(processes, forks)
    by_role = Counter(roles.of(pid, comm) for _when, pid, comm in samples)
    return by_role, len(samples)


def timeline(
    out: str,
    processes: dict[int, tuple[int, str]],
    window: tuple[float, float],
    bucket: float,
) -> list[Counter[str]]:
    """Samples per role in each ``bucket`` seconds of ``window`` (perf's clock).

    ``out`` is ``perf script --show-task-events -F comm,pid,time``; a
    worker's children count as the worker (``executor worker, pool > bwrap``
    is ``executor worker, pool``), every kernel or unknown process as
    ``other``.
    """
    forks, samples = parse(out)
    roles = Roles(processes, forks)
    start, end = window
    count = max(1, math.ceil(round((end - start) / bucket, 9)))
    buckets = [Counter[str]() for _ in range(count)]
    for when, pid, comm in samples:
        if start <= when <= end:
            role = roles.of(pid, comm).split(" > ")[0]
            role = "other" if role.startswith("other") else role
            buckets[min(count - 1, int((when - start) / bucket))][role] += 1
    return buckets


def print_timeline(buckets: list[Counter[str]], bucket: float, columns: int = 8) -> None:
    total: Counter[str] = Counter()
    for counts in buckets:
        total.update(counts)
    roles = [role for role, _ in total.most_common(columns)]
    names = [role.replace(" worker, ", " ") for role in roles]  # "executor pool"
    width = max(len(name) for name in names) + 2
    print(f"samples by role in each {1000 * bucket:.0f} ms (a worker's children with it)")
    print("   ms " + "".join(f"{name:>{width}}" for name in names))
    for n, counts in enumerate(buckets):
        cells = "".join(f"{counts[role]:>{width}}" for role in roles)
        print(f"{1000 * n * bucket:5.0f} {cells}")


def run_timeline(args: argparse.Namespace, command: list[str], folder: Path) -> None:
    """The whole window of one run, in buckets of ``args.timeline`` ms."""
    log, data = folder / "throughput.log", folder / "perf.data"
    started, done = markers(args.pipeline)
    record = ["perf", "record", "-a", "-F", "997", "-k", "CLOCK_MONOTONIC", "-o", str(data)]
    perf = subprocess.Popen(record, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks: list[float] = []
    processes: dict[int, tuple[int, str]] = {}
    try:
        time.sleep(1.0)  # perf is recording
        with log.open("w") as output:
            bench = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        while bench.poll() is None and len(marks) < 2:
            text = log.read_text()
            if not marks and started in text:
                marks.append(time.monotonic())
                processes = snapshot()
            elif marks and done in text:
                marks.append(time.monotonic())
            time.sleep(0.01)
        bench.wait()
    finally:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    if len(marks) < 2:
        sys.exit(f"the benchmark did not measure: {log}")
    script = ["perf", "script", "-i", str(data), "--show-task-events", "-F", "comm,pid,time"]
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    bucket = args.timeline / 1000
    print(f"{args.pipeline} {args.changes} x 3: {marks[1] - marks[0]:.2f} s from the enqueue "
          f"to the last report seen; {CPUS} CPUs, 997 samples a second each")  # fmt: skip
    print_timeline(timeline(out, processes, (marks[0], marks[1]), bucket), bucket)
    print(f"(files in {folder})")


def markers(pipeline: str) -> tuple[str, str]:
    """What throughput.py prints as it starts and ends measuring ``pipeline``."""
    return STARTED.replace("check", pipeline), DONE.replace("check", pipeline)


def rate(text: str, name: str) -> float:
    """The best figure of ``name`` in throughput.py's table."""
    for line in text.splitlines():
        if line.strip().startswith(name):
            return float(line.split()[-2])
    raise SystemExit(f"no {name} in the benchmark's output")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--build-dir", choices=("state", "tmpfs"), default="state")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--timeline", type=float, default=0.0, help="bucket width, ms")
    parser.add_argument("--pipeline", choices=("check", "gate"), default="check")
    args = parser.parse_args()
    if shutil.which("perf") is None:
        sys.exit("perf is not installed (Debian: linux-perf)")
    folder = Path(tempfile.mkdtemp(prefix="sluice-perf-"))
    log, data = folder / "throughput.log", folder / "perf.data"
    command = [
        sys.executable, str(BENCH / "throughput.py"), "--runs", "1", "--pipelines", args.pipeline,
        "--changes", str(args.changes), "--depths", "10", "--build-dir", args.build_dir,
    ]  # fmt: skip
    if args.timeline:
        run_timeline(args, command, folder)
        return
    started, done = markers(args.pipeline)
    with log.open("w") as output:
        bench = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        while started not in log.read_text():
            if bench.poll() is not None:
                sys.exit(f"the benchmark ended before measuring: {log}")
            time.sleep(0.1)
        time.sleep(1.0)  # past the enqueue burst: the steady state
        processes = snapshot()
        record = ["perf", "record", "-a", "-F", "997", "-o", str(data)]
        subprocess.run([*record, "--", "sleep", str(args.seconds)], capture_output=True, check=True)
        late = done in log.read_text()
    finally:
        bench.wait()
    by_role, total = attribute(perf_script(data), processes)
    builds_per_s = rate(log.read_text(), "builds/s")
    changes_per_s = rate(log.read_text(), "changes/s")
    # every CPU's time in the window over the builds in it (the run's mean rate)
    ms_per_share = 1000 * CPUS / builds_per_s
    print(
        f"{total} samples over {args.seconds:.0f} s on {CPUS} CPUs; "
        f"the run: {changes_per_s:.2f} changes/s, {builds_per_s:.1f} builds/s"
    )
    if late:
        print("WARNING: the run ended inside the window; use more --changes")
    print("     share   CPU ms per build  role > child process")
    for role, count in by_role.most_common(args.top):
        share = count / total
        print(f"  {100 * share:6.2f} %  {share * ms_per_share:15.1f}  {role}")
    print(f"(files in {folder})")


if __name__ == "__main__":
    main()
