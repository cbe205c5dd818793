"""How long a whole ``sluice enqueue`` takes, beside a bare Python start in the same run.

Starts a ZooKeeper, a Redis, a scheduler worker, a merger and an executor
(the check system of ``bench/throughput.py``), then runs ``sluice enqueue``
as a separate process for fresh refs, one at a time on an otherwise idle
system: the command starts, checks the tenant, pipeline, project and ref,
queues the event, nudges the scheduler and waits until the pipeline has
applied it. Prints the median and the slowest run beside ``python -c pass``
and ``sluice --help``, with their ratio to the floor.

Run by hand (``.venv/bin/python bench/enqueue.py``); ``--smoke`` runs it
small, as ``tests/bench/test_smoke.py`` does in CI.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _checksystem import check_system, start_workers
from _system import Services
from gate_depth import TENANT

SLUICE = str(Path(sys.executable).parent / "sluice")


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--smoke", action="store_true", help="3 runs (CI)")
    args = parser.parse_args()
    runs = 3 if args.smoke else args.runs
    with tempfile.TemporaryDirectory(prefix="sluice-bench-enqueue-") as base:
        services = Services(Path(base))
        services.start()
        check = None
        try:
            check = check_system(services, "enqueue", changes=runs + 1, jobs=1)
            start_workers(check)
            system = check.phase.system
            env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
            env.update(system.env())
            # as on a user's machine: Python keeps the bytecode it compiled
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            enqueue = [SLUICE, "enqueue", "--tenant", TENANT, "--pipeline", "check"]
            enqueue += ["--project", "app", "--branch", "main", "--ref"]
            timed([*enqueue, check.refs[-1]], env)  # warm the workers' caches
            floor = statistics.median(timed([sys.executable, "-c", "pass"], env) for _ in range(5))
            helps = statistics.median(timed([SLUICE, "--help"], env) for _ in range(5))
            times = [timed([*enqueue, ref], env) for ref in check.refs[:runs]]
        finally:
            if check is not None:  # the builds still running stop with their workers
                check.phase.stop()
            services.stop()
    median = statistics.median(times)
    print(f"sluice enqueue, {runs} runs, one at a time on an idle system")
    print(f"  {'':28} {'seconds':>8} {'x floor':>8}")
    print(f"  {'python -c pass (floor)':28} {floor:8.3f} {1.0:8.1f}")
    print(f"  {'sluice --help':28} {helps:8.3f} {helps / floor:8.1f}")
    print(f"  {'sluice enqueue (median)':28} {median:8.3f} {median / floor:8.1f}")
    print(f"  {'sluice enqueue (slowest)':28} {max(times):8.3f} {max(times) / floor:8.1f}")


if __name__ == "__main__":
    main()
