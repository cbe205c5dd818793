"""Build history survives a database that is down at report time (real PostgreSQL).

The item stays in its pipeline (``sluice status`` says it waits to report,
``sluice wait --idle`` does not call the system idle) until the database is
back; then its buildset and builds land exactly once and it leaves.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem
from tests.fixtures.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.fixtures.waiting import wait_until

CONFIG = CHECK_CONFIG

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
        - project:
            check:
              jobs: [unit]
        """,
    "ci/unit.sh": "#!/bin/sh\nsleep 3\n",
}


@pytest.mark.timeout(240)
def test_a_report_waits_for_the_database(
    system: SluiceSystem,
    postgres_server: PostgresServer,  # noqa: F811
) -> None:
    system.environment.extra["SLUICE_DATABASE_URL"] = postgres_server.url
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "feature", {"x": "x\n"}, base=base)
    system.start_workers()
    system.start_worker(("maintenance",), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True)
    system.sluice("reconfigure")
    system.enqueue("feature")
    wait_until(lambda: "running" in system.sluice("status"), timeout=60, what="the build")
    postgres_server.stop()

    # the build ends; its report cannot land; the item stays and says why
    wait_until(
        lambda: "waiting to report" in system.sluice("status"),
        timeout=60,
        what="the failed report to show",
    )
    code, output = system.sluice_result("wait", "--idle", "--timeout", "3")
    assert code != 0, output
    document = json.loads(system.sluice("status", "--json"))
    items = [
        i
        for t in document["tenants"]
        for p in t["pipelines"]
        for q in p["queues"]
        for i in q["items"]
    ]
    assert len(items) == 1 and items[0]["result"] == "SUCCESS"
    assert items[0]["report_failures"] >= 1

    postgres_server.start()
    system.sluice("wait", "--idle", "--timeout", "90")
    (buildset,) = system.buildsets()
    assert buildset["result"] == "SUCCESS" and buildset["ref"] == "feature"
    builds = system.builds()
    assert [(b["job"], b["result"]) for b in builds] == [("unit", "SUCCESS")]
