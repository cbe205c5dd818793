"""A job's executor zone set in its configuration routes its builds to that zone's workers."""

from __future__ import annotations

from tests.e2e.system import CHECK_CONFIG, TENANT_YAML, SluiceSystem

CONFIG = CHECK_CONFIG

APP = {
    ".sluice.yaml": """
        - job:
            name: east-job
            run: ci/pass.sh
            zone: east
        - job:
            name: plain
            run: ci/pass.sh
        - project:
            check:
              jobs: [east-job, plain]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}


def test_a_zoned_job_runs_on_its_zone_only(system: SluiceSystem) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "feature", {"x": "x\n"}, base=base)
    general = system.start_worker()
    east = system.start_worker(("executor.east",))
    system.sluice("reconfigure")
    system.enqueue("feature")
    system.sluice("wait", "--idle", "--timeout", "90")
    builds = {b["job"]: b for b in system.builds()}
    assert {job: b["result"] for job, b in builds.items()} == {
        "east-job": "SUCCESS",
        "plain": "SUCCESS",
    }

    def claimed(job: str) -> str:
        return f"build request {builds[job]['uuid']}: claimed"

    assert claimed("east-job") in east.log_text()
    assert claimed("east-job") not in general.log_text()
    assert claimed("plain") in general.log_text()
    assert claimed("plain") not in east.log_text()
