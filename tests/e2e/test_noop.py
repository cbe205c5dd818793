"""Zuul's built-in noop job on real workers: no definition, no executor, SUCCESS."""

from __future__ import annotations

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem

CONFIG = CHECK_CONFIG

APP = {
    ".zuul.yaml": """
        - job:
            name: after-noop
            run: ci/pass.sh
            dependencies: [noop]
        - project:
            check:
              jobs: [noop, after-noop]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}


def test_noop_job_succeeds_without_an_executor(system: SluiceSystem) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "feature", {"README": "x\n"}, base=base)
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    (buildset,) = system.buildsets()
    assert buildset["result"] == "SUCCESS"
    builds = {b["job"]: b for b in system.builds()}
    assert {job: b["result"] for job, b in builds.items()} == {
        "noop": "SUCCESS",
        "after-noop": "SUCCESS",
    }
    # no executor ran it: the scheduler completed it (no log, no worker)
    assert not builds["noop"]["log_url"] and not builds["noop"]["executor"]
    assert builds["after-noop"]["log_url"] and builds["after-noop"]["executor"]
