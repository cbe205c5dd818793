"""Result nudges skipped while one waits lose no result (scheduler/nudge/pending_marks.py).

Real workers: builds of several changes end together and nudge one
pipeline; every result must be applied, whichever nudges were skipped.
"""

from __future__ import annotations

import redis

from scheduler.nudge import pending_marks
from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check

REFS = ("one", "two", "three", "four")


def _marks(broker: redis.Redis) -> list[bytes]:
    return list(broker.scan_iter(f"{pending_marks.PREFIX}*"))


def test_results_of_changes_that_end_together_are_all_applied(system: SluiceSystem) -> None:
    prepare_check(system, REFS)
    system.start_workers()
    system.sluice("reconfigure")
    broker = redis.Redis.from_url(system.environment.redis_url)
    # a nudge that was lost after it marked the pipeline: its mark holds the
    # first results' nudges back until it expires, and nothing is lost
    broker.set(pending_marks.mark_key("demo", "check"), b"1", px=pending_marks.TTL_MS)

    for ref in REFS:
        system.enqueue(ref)
    system.sluice("wait", "--idle", "--timeout", "90")

    buildsets = system.buildsets()
    assert len(buildsets) == len(REFS)
    assert {b["result"] for b in buildsets} == {"SUCCESS"}  # experimental does not vote
    builds = system.builds()
    assert len(builds) == 3 * len(REFS)
    # unit waits for lint's result in each: a lost wake-up would leave it unstarted
    assert sorted(b["job"] for b in builds if b["result"] == "SUCCESS") == sorted(
        ["lint", "unit"] * len(REFS)
    )
    assert _marks(broker) == []  # every nudge that marked the pipeline has started
    broker.close()
