"""The independent manager end to end: real git, ZooKeeper, Redis, SQL and workers."""

from __future__ import annotations

from tests.e2e.system import TENANT_YAML, SluiceSystem

MAIN_YAML = TENANT_YAML

CONFIG = {
    "zuul.d/pipelines.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger:
              local:
                - event: ref-updated
                  ref: ^refs/heads/feature.*$
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: lint
            run: ci/lint.sh
        - job:
            name: unit
            run: ci/unit.sh
            dependencies: [lint]
        - job:
            name: experimental
            voting: false
            run: ci/fail.sh
        - project:
            check:
              jobs: [lint, unit, experimental]
        """,
    "ci/lint.sh": """
        #!/bin/sh
        echo linting
        echo '{"lint": "clean"}' > "$SLUICE_RESULT_FILE"
        """,
    "ci/unit.sh": """
        #!/bin/sh
        grep -q clean "$SLUICE_VARS_FILE" || { echo "no data from lint"; exit 1; }
        test -f src/feature.py
        """,
    "ci/fail.sh": """
        #!/bin/sh
        exit 1
        """,
    "src/app.py": "print('app')\n",
}


def prepare_check(system: SluiceSystem, refs: tuple[str, ...] = ("feature",)) -> None:
    """The tenant, its config, ``app`` with a branch per ref; no workers yet."""
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    for ref in refs:
        system.repos.commit("app", ref, {"src/feature.py": "x = 1\n"}, base=base)


def test_a_change_through_check(system: SluiceSystem) -> None:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "feature", {"src/feature.py": "x = 1\n"}, base=base)
    system.start_workers()

    out = system.sluice("reconfigure")
    assert "tenant demo" in out

    item = system.enqueue("feature")
    assert len(item) == 32
    system.sluice("wait", "--idle", "--timeout", "90")

    results = {b["job"]: b["result"] for b in system.builds()}
    assert results == {"lint": "SUCCESS", "unit": "SUCCESS", "experimental": "FAILURE"}
    (buildset,) = system.buildsets()
    assert (buildset["result"], buildset["project"], buildset["pipeline"]) == (
        "SUCCESS",
        "app",
        "check",
    )


def test_clear_errors_for_unknown_names(system: SluiceSystem) -> None:
    system.tenant(MAIN_YAML)
    system.repos.commit("config", "main", CONFIG)
    system.repos.commit("app", "main", APP)
    system.start_workers()
    system.sluice("reconfigure")
    cases = {
        ("nope", "check", "app"): "tenant 'nope'",
        ("demo", "gate", "app"): "no pipeline 'gate'",
        ("demo", "check", "lib"): "no project 'lib'",
    }
    for (tenant, pipeline, project), message in cases.items():
        out = system.enqueue("main", pipeline, project=project, tenant=tenant, expect=1)
        assert message in out
    out = system.enqueue("no-such-ref", expect=1)
    assert "has no ref 'no-such-ref'" in out
