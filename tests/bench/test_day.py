"""bench/day.py: the day it draws, and the options it refuses before starting anything.

The day itself runs in tests/bench/test_smoke.py (``--smoke``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from day import Sizes, draw, jobs_yaml

BENCH = Path(__file__).resolve().parents[2] / "bench"

DAY = Sizes(
    changes=1500,
    projects=50,
    tenants=5,
    jobs=13,
    gate_share=0.7,
    depends_share=0.05,
    fail_share=0.05,
    flaky_share=0.5,
    rate=1.5,
    seed=39,
)


def test_the_day_is_the_same_for_a_seed_and_holds_its_shares() -> None:
    changes = draw(DAY)
    assert changes == draw(DAY)
    assert changes != draw(Sizes(**{**DAY.__dict__, "seed": 40}))
    gated = [c for c in changes if c.gated]
    assert 0.65 < len(gated) / len(changes) < 0.75
    failing = [c for c in changes if c.failure]
    assert all(c.gated for c in failing)  # they fail in the gate
    assert 0.02 < len(failing) / len(gated) < 0.08
    assert {c.failure for c in failing} == {"deterministic", "flaky"}
    depending = [c for c in changes if c.depends_on is not None]
    assert 0.03 < len(depending) / len(changes) < 0.07
    for change in depending:
        assert change.depends_on is not None
        needed = changes[change.depends_on]
        # an earlier pull request of another project of the same tenant, gated and passing
        assert needed.n < change.n
        assert needed.project != change.project
        assert DAY.tenant_of(needed.project) == DAY.tenant_of(change.project)
        assert needed.gated and not needed.failure and needed.depends_on is None
    arrivals = [c.at for c in changes]
    assert arrivals == sorted(arrivals)
    assert 850 < arrivals[-1] < 1150  # 1,500 at 1.5 a second: about 17 minutes


def test_the_jobs_average_the_size_and_their_graph_holds_for_every_project() -> None:
    counts = [DAY.jobs_of(p) for p in range(DAY.projects)]
    assert sum(counts) / len(counts) == 8  # a pipeline's: 13 over check and a 70 % share of gate
    changes = draw(DAY)
    builds = sum(DAY.jobs_of(c.project) * (1 + c.gated) for c in changes)
    assert 19_000 < builds < 21_500  # OpenStack's 20,000 jobs a day
    assert min(Sizes(**{**DAY.__dict__, "jobs": 1}).jobs_of(p) for p in range(5)) == 2
    text = jobs_yaml(15)
    assert "name: j0\n        run: ci/job.sh\n" in text  # the root needs nothing
    for k in range(1, 15):
        # each job needs an earlier one: any prefix j0..j<n> is a whole graph
        assert (
            f"name: j{k}\n        run: ci/job.sh\n        dependencies: [j{(k - 1) // 3}]" in text
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "0"], "argument --rate: 0 is not above 0"),
        (["--rate", "nan"], "argument --rate: nan is not a finite number"),
        (["--changes", "-3"], "argument --changes: -3 is not from 1 to 100000"),
        (["--changes", "1e12"], "argument --changes: '1e12' is not a whole number"),
        (["--projects", "99999999"], "argument --projects: 99999999 is not from 1 to 100000"),
        (["--gate-share", "1.5"], "argument --gate-share: 1.5 is not between 0 and 1"),
        (["--fail-share", "a lot"], "argument --fail-share: 'a lot' is not a number"),
        (["--tenants", "9", "--projects", "3"], "--tenants 9 is more than --projects 3"),
        (["--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_a_bad_option_is_refused_before_anything_starts(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / "day.py"), *args],
        check=False,
        cwd=BENCH.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""  # nothing started: no day line
