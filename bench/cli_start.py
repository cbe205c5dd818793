"""How fast the ``sluice`` command starts, beside a bare Python start in the same run.

Measures, as separate processes (median of ``--runs``):

* ``python -c pass``: the floor any command pays;
* ``sluice --help``: the group and its lazy command list;
* loading each command (``sluice <command> --help``): what running it
  imports before it does any work.

Prints a table with the ratio to the floor. Not run in CI except in smoke
mode (``tests/bench/test_smoke.py``): ``.venv/bin/python bench/cli_start.py``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

SLUICE = str(Path(sys.executable).parent / "sluice")


def timed(argv: list[str], runs: int) -> float:
    """Median wall time of ``argv`` over ``runs`` runs, in seconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True, timeout=120)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from cli.main import COMMANDS

    floor = timed([sys.executable, "-c", "pass"], args.runs)
    rows = [
        ("python -c pass (floor)", floor),
        ("sluice --help", timed([SLUICE, "--help"], args.runs)),
    ]
    for name in sorted(COMMANDS):
        rows.append((f"sluice {name} --help", timed([SLUICE, name, "--help"], args.runs)))
    print(f"median of {args.runs} runs each")
    print(f"  {'command':34} {'seconds':>8} {'x floor':>8}")
    for label, seconds in rows:
        print(f"  {label:34} {seconds:8.3f} {seconds / floor:8.1f}")


if __name__ == "__main__":
    main()
