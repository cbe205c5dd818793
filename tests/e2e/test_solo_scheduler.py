"""A scheduler worker on Celery's ``solo`` pool (docs/celery.md, "Pools").

The worker runs each pass in its own process, with no pool child: the
ZooKeeper client, SQL engine and fast-send connection are made there on
first use, as in a prefork child. A change goes through check, and a
second one after the first has settled, on real workers.
"""

from __future__ import annotations

from tests.e2e.system import SluiceSystem
from tests.e2e.test_check_pipeline import prepare_check


def test_a_scheduler_worker_on_the_solo_pool_runs_check(system: SluiceSystem) -> None:
    prepare_check(system, refs=("feature", "second"))
    system.start_worker(("scheduler",), pool="solo")
    system.start_worker(("merger", "executor", "maintenance"))
    system.sluice("reconfigure")

    for ref in ("feature", "second"):
        system.enqueue(ref)
        system.sluice("wait", "--idle", "--timeout", "90")

    results = sorted((b["ref"], b["job"], b["result"]) for b in system.builds())
    assert [r for r in results if r[1] != "experimental"] == [
        (ref, job, "SUCCESS") for ref in ("feature", "second") for job in ("lint", "unit")
    ]
    assert [b["result"] for b in system.buildsets()] == ["SUCCESS", "SUCCESS"]
