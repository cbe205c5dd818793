"""The config project driven as a user drives it: through git and the CLI.

Proposed changes are branches of the repository (the git driver), so the
config project soon has branches besides its default one; Zuul reads a
config project from its default branch (or ``load-branch``) only.
"""

from __future__ import annotations

import pytest

from tests.e2e.system import SluiceSystem

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
