"""Issue 37's targets in the round model of the gating bench (tests/scheduler/gating_model.py).

Rounds, not seconds: the same on every machine, so they can be asserted.
``bench/gating.py`` measures the same gate on real workers.
"""

from __future__ import annotations

import pytest

from scheduler.config.model import BatchConfig
from tests.scheduler.gating_model import Run, run

SEEDS = range(12)
BATCH = BatchConfig(size=8, max_wait=0.0, max_bisect_depth=1)


def mean(runs: list[Run], field: str) -> float:
    return sum(getattr(r, field) for r in runs) / len(runs)


def side_by_side(rate: float) -> tuple[list[Run], list[Run]]:
    return [run(rate, s, None) for s in SEEDS], [run(rate, s, BATCH) for s in SEEDS]


def test_at_five_percent_batches_save_forty_percent_of_builds_and_merge_sooner() -> None:
    per_change, batched = side_by_side(0.05)
    assert mean(batched, "builds") <= 0.6 * mean(per_change, "builds")
    assert mean(batched, "last_push") <= mean(per_change, "last_push")
    assert sum(r.merged_wrongly for r in per_change + batched) == 0


@pytest.mark.parametrize("rate", [0.10, 0.25])
def test_at_high_failure_rates_batches_are_no_worse_than_per_change(rate: float) -> None:
    per_change, batched = side_by_side(rate)
    assert mean(batched, "builds") <= mean(per_change, "builds")
    assert mean(batched, "last_push") <= mean(per_change, "last_push")
    assert sum(r.merged_wrongly for r in per_change + batched) == 0
    # every change that fails on its own stays out; a flaky one may merge on a retest
    assert all(r.merged >= p.merged for r, p in zip(batched, per_change, strict=True))
