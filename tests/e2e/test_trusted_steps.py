"""A base job with a trusted pre-run in the config project, driven from outside.

Zuul's usual ``base`` job lives in the config project and names a pre-run
playbook there; every job inherits it. The item's repo state must hold the
config project (and every required project), and a trusted step runs from
the branch head, never from a speculative merge: a proposed change to the
config project cannot run its own edit of a trusted step.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.system import SluiceSystem

TENANT = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
          - lib:
              include-branches: ['^main$']
"""

PRE = "#!/bin/sh\necho trusted pre-run v1 of {project}\n"

CONFIG = {
    "zuul.d/base.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
        - job:
            name: base
            parent: null
            timeout: 120
            pre-run: playbooks/pre.sh
        - job:
            name: config-unit
            run: playbooks/unit.sh
        - project:
            name: config
            check:
              jobs: [config-unit]
        """,
    "playbooks/pre.sh": PRE.format(project="$SLUICE_PROJECT"),
    "playbooks/unit.sh": "#!/bin/sh\necho config unit v1\n",
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
            required-projects: [lib]
        - project:
            check:
              jobs: [unit]
        """,
    # the required project is checked out beside the change's
    "ci/unit.sh": '#!/bin/sh\necho unit v1\ncat "$SLUICE_SRC_DIR/lib/VERSION"\n',
}


@pytest.fixture
def demo(system: SluiceSystem) -> SluiceSystem:
    system.tenant(TENANT)
    system.config_base = system.repos.commit("config", "main", CONFIG)  # type: ignore[attr-defined]
    system.app_base = system.repos.commit("app", "main", APP)  # type: ignore[attr-defined]
    system.repos.commit("lib", "main", {"VERSION": "lib 1\n"})
    return system


def logs(system: SluiceSystem) -> dict[tuple[str, str], str]:
    """(ref, job) -> the text of the build's log."""
    sets = {b["uuid"]: b for b in system.buildsets()}
    found = {}
    for build in system.builds():
        text = Path(build["log_url"]).read_text() if build["log_url"] else ""
        found[(sets[build["buildset"]]["ref"], build["job"])] = f"{build['result']}\n{text}"
    return found


def test_trusted_pre_run_required_projects_and_the_branch_head(demo: SluiceSystem) -> None:
    # an untrusted change edits its own run step: it runs the new one
    demo.repos.commit(
        "app",
        "app-change",
        {"ci/unit.sh": APP["ci/unit.sh"].replace("v1", "v2")},
        base=demo.app_base,  # type: ignore[attr-defined]
    )
    # a proposed change to the config project edits the trusted pre-run and its
    # own untrusted-looking run step; both are trusted: neither edit may run
    demo.repos.commit(
        "config",
        "config-change",
        {
            "playbooks/pre.sh": "#!/bin/sh\necho EDITED trusted pre-run\n",
            "playbooks/unit.sh": "#!/bin/sh\necho EDITED config unit\n",
        },
        base=demo.config_base,  # type: ignore[attr-defined]
    )
    demo.repos.git("config", "checkout", "-q", "main")
    demo.repos.commit("lib", "main", {"VERSION": "lib 2\n"})  # lib's head moves on
    demo.start_workers()
    demo.sluice("reconfigure")
    demo.enqueue("app-change", "check")
    demo.enqueue("config-change", "check", project="config")
    demo.sluice("wait", "--idle", "--timeout", "120")

    found = logs(demo)
    app = found[("app-change", "unit")]
    assert app.startswith("SUCCESS"), app
    assert "trusted pre-run v1 of app" in app  # the base job's pre-run, from config
    assert "unit v2" in app  # the change's own edit of its untrusted step
    assert "lib 2" in app  # the required project at its branch head
    config = found[("config-change", "config-unit")]
    assert config.startswith("SUCCESS"), config
    assert "trusted pre-run v1 of config" in config and "config unit v1" in config
    assert "EDITED" not in config
