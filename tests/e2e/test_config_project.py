"""The config project driven as a user drives it: through git and the CLI.

Proposed changes are branches of the repository (the git driver), so the
config project soon has branches besides its default one; Zuul reads a
config project from its default branch (or ``load-branch``) only.
"""

from __future__ import annotations

import pytest

from tests.e2e.system import SluiceSystem, dedent
from tests.fixtures.waiting import wait_until

# the config project is gated too: its changes are branches of its repository
TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
"""

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
        - pipeline:
            name: gate
            manager: dependent
            success:
              local:
                merge: true
        - job:
            name: base
            parent: null
            timeout: 120
        - job:
            name: config-check
            run: ci/pass.sh
        - project:
            name: config
            check:
              jobs: [config-check]
            gate:
              jobs: [config-check]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/pass.sh
        - project:
            check:
              jobs: [unit]
        """,
    "ci/pass.sh": "#!/bin/sh\nexit 0\n",
}


@pytest.fixture
def demo(system: SluiceSystem) -> SluiceSystem:
    system.tenant(TENANT)
    system.config_base = system.repos.commit("config", "main", CONFIG)  # type: ignore[attr-defined]
    system.app_base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    return system


def propose_config(system: SluiceSystem, ref: str, files: dict[str, str]) -> None:
    system.repos.commit("config", ref, files, base=system.config_base)  # type: ignore[attr-defined]
    system.repos.git("config", "checkout", "-q", "main")  # HEAD names the default branch


def enqueue_result(system: SluiceSystem, project: str) -> tuple[int, str]:
    return system.sluice_result(
        "enqueue",
        "--tenant",
        "demo",
        "--pipeline",
        "check",
        "--project",
        project,
        "--branch",
        "main",
        "--ref",
        "feature",
    )


def enqueued(system: SluiceSystem, project: str) -> bool:
    return enqueue_result(system, project)[0] == 0


def results(system: SluiceSystem) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    sets = {b["uuid"]: b for b in system.buildsets()}
    for buildset in sets.values():
        found.setdefault(f"{buildset['project']}:{buildset['ref']}", {})["*"] = buildset["result"]
    for build in system.builds():
        buildset = sets[build["buildset"]]
        found[f"{buildset['project']}:{buildset['ref']}"][build["job"]] = build["result"]
    return found


def test_a_second_branch_of_the_config_project_leaves_the_tenant_alone(
    demo: SluiceSystem,
) -> None:
    # a proposed change whose config is broken (base undefined) sits on a branch
    broken = CONFIG["zuul.d/pipelines.yaml"].replace("name: base", "name: not-base")
    propose_config(demo, "review/broken", {"zuul.d/pipelines.yaml": broken})
    demo.repos.commit("app", "feature", {"src/x.py": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_workers()
    out = demo.sluice("reconfigure")
    assert "not defined" not in out, out
    demo.enqueue("feature", "check")
    # the broken proposal is tested with its own (speculative) layout
    demo.enqueue("review/broken", "check", project="config")
    demo.sluice("wait", "--idle", "--timeout", "120")
    found = results(demo)
    assert found["app:feature"] == {"*": "SUCCESS", "unit": "SUCCESS"}
    assert found["config:review/broken"]["*"] == "CONFIG_ERROR"


def test_a_merged_config_change_takes_effect_without_reconfigure(demo: SluiceSystem) -> None:
    """Zuul reconfigures the tenant when a change to its config merges."""
    added = dedent(CONFIG["zuul.d/pipelines.yaml"]) + (
        "- job:\n    name: lint\n    run: ci/pass.sh\n"
        "- project:\n    name: app\n    check:\n      jobs: [lint]\n"
    )
    propose_config(demo, "review/add-lint", {"zuul.d/pipelines.yaml": added})
    demo.repos.commit("app", "feature", {"src/x.py": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_workers()
    demo.sluice("reconfigure")
    demo.enqueue("review/add-lint", "gate", project="config")
    demo.sluice("wait", "--idle", "--timeout", "120")
    assert results(demo)["config:review/add-lint"]["*"] == "SUCCESS"
    # no `sluice reconfigure`: the merge asked for it, and `wait --idle` waited for it
    demo.enqueue("feature", "check")
    demo.sluice("wait", "--idle", "--timeout", "120")
    assert results(demo)["app:feature"] == {"*": "SUCCESS", "unit": "SUCCESS", "lint": "SUCCESS"}


def test_tenants_load_at_start_and_follow_the_tenant_file(demo: SluiceSystem) -> None:
    """No `sluice reconfigure` at all: the sweep loads every tenant, then follows main.yaml."""
    demo.repos.commit("app", "feature", {"src/x.py": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.repos.commit("lib", "main", APP)
    demo.repos.commit(
        "lib", "feature", {"src/y.py": "y\n"}, base=demo.repos.git("lib", "rev-parse", "main")
    )
    demo.start_workers()
    demo.start_worker(("maintenance",), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True)
    wait_until(lambda: enqueued(demo, "app"), timeout=60, what="the tenant's first layout")
    # lib is not in the tenant yet
    code, output = enqueue_result(demo, "lib")
    assert code == 1 and "lib" in output, output
    lib = "- lib:\n              include-branches: ['^main$']\n          - app:"
    demo.tenant(TENANT.replace("- app:", lib))
    wait_until(lambda: enqueued(demo, "lib"), timeout=60, what="lib to join the tenant")
    demo.sluice("wait", "--idle", "--timeout", "120")
    found = results(demo)
    assert found["app:feature"]["*"] == "SUCCESS" and found["lib:feature"]["*"] == "SUCCESS"


def test_a_removed_pipeline_reports_its_items(demo: SluiceSystem) -> None:
    """Zuul dequeues the items of a pipeline a reconfiguration removed, with a report."""
    slow = dedent(CONFIG["zuul.d/pipelines.yaml"]) + (
        "- pipeline:\n    name: experimental\n    manager: independent\n    trigger: {}\n"
        "- job:\n    name: slow\n    run: ci/slow.sh\n"
        "- project:\n    name: app\n    experimental:\n      jobs: [slow]\n"
    )
    demo.repos.commit(
        "config", "main", {"zuul.d/pipelines.yaml": slow, "ci/slow.sh": "#!/bin/sh\nsleep 120\n"}
    )
    demo.repos.commit("app", "feature", {"src/x.py": "x\n"}, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_workers()
    demo.sluice("reconfigure")
    demo.enqueue("feature", "experimental")
    wait_until(lambda: "running" in demo.sluice("status"), timeout=60, what="the slow build")
    demo.repos.commit("config", "main", {"zuul.d/pipelines.yaml": CONFIG["zuul.d/pipelines.yaml"]})
    demo.sluice("reconfigure")
    demo.sluice("wait", "--idle", "--timeout", "60")
    (buildset,) = demo.buildsets()
    assert buildset["pipeline"] == "experimental" and buildset["result"] == "DEQUEUED"
    assert "removed" in buildset["message"]
    assert [(b["job"], b["result"]) for b in demo.builds()] == [("slow", "ABORTED")]


def test_a_tenant_removed_from_the_tenant_file_reports_its_items(demo: SluiceSystem) -> None:
    """A tenant that leaves main.yaml: its items are dequeued and reported, builds aborted."""
    slow = {"ci/pass.sh": "#!/bin/sh\nsleep 120\n"}  # the change makes its own job slow
    demo.repos.commit("app", "feature", slow, base=demo.app_base)  # type: ignore[attr-defined]
    demo.start_workers()
    demo.start_worker(("maintenance",), env={"SLUICE_SWEEP_INTERVAL": "1"}, beat=True)
    wait_until(lambda: enqueued(demo, "app"), timeout=60, what="the tenant's first layout")
    wait_until(lambda: "running" in demo.sluice("status"), timeout=60, what="the slow build")
    demo.tenant(TENANT.replace("name: demo", "name: other"))
    wait_until(demo.buildsets, timeout=60, what="the removed tenant's report")
    demo.sluice("wait", "--idle", "--timeout", "60")
    (buildset,) = demo.buildsets()
    assert buildset["pipeline"] == "check" and buildset["result"] == "DEQUEUED"
    assert [(b["job"], b["result"]) for b in demo.builds()] == [("unit", "ABORTED")]
    code, output = enqueue_result(demo, "app")
    assert code == 1, output
