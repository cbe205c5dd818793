"""The benchmarks in smoke mode: each runs at tiny sizes and must not crash.

A benchmark that rots fails CI here. Its figures are printed (``-s`` shows
them) and never asserted: speed is measured by hand on an idle machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

SMOKES = {
    "throughput": ["throughput.py", "--smoke"],
    "checkout": ["checkout.py", "--seconds", "0.1", "--sizes", "5"],
    "cli_start": ["cli_start.py", "--runs", "1"],
    "day": ["day.py", "--smoke"],
    "enqueue": ["enqueue.py", "--smoke"],
    "executor": ["executor.py", "--seconds", "0.3", "--floor"],
    "executor_pieces": ["executor.py", "--seconds", "0.2", "--pieces"],
    "gating": ["gating.py", "--smoke"],
    "inodes": ["inodes.py", "--files", "20"],
    "latency": ["latency.py", "--smoke", "--pause", "0.2"],
    "merger": ["merger.py", "--rounds", "2", "--trials", "1"],
    "scale": ["scale.py", "--smoke"],
    "send": ["send.py", "--smoke"],
    "sql_report": ["sql_report.py", "--smoke"],
    "web_body": ["web_body.py", "--megabytes", "20"],
    "zk_primitives": ["zk_primitives.py", "--seconds", "0.2"],
}


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", sorted(SMOKES))
def test_benchmark_smoke(name: str) -> None:
    script, *args = SMOKES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        check=False,
        cwd=BENCH.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if name == "gating":
        # not its speed: that it checked the branch and nothing merged wrongly
        assert "no change merged wrongly" in done.stdout, done.stdout[-3000:]
    if name == "day":
        # every pull request reported once per pipeline, no failer merged, no Depends-On broken
        assert "nothing lost, nothing doubled, nothing merged wrongly" in done.stdout, done.stdout[
            -3000:
        ]
