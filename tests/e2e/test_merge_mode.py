"""A project's merge-mode reaches the merger: squash-merge lands one squashed commit."""

from __future__ import annotations

from tests.e2e.system import TENANT_YAML, SluiceSystem

CONFIG = {
    "zuul.d/base.yaml": """
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
        """,
}

APP = {
    ".zuul.yaml": """
        - job:
            name: unit
            run: ci/unit.sh
        - project:
            merge-mode: squash-merge
            gate:
              jobs: [unit]
        """,
    "ci/unit.sh": "#!/bin/sh\nexit 0\n",
}


def test_squash_merge_mode(system: SluiceSystem) -> None:
    system.tenant(TENANT_YAML)
    system.repos.commit("config", "main", CONFIG)
    base = system.repos.commit("app", "main", APP)
    system.repos.commit("app", "change", {"a.txt": "a\n"}, base=base)
    change = system.repos.commit("app", "change", {"b.txt": "b\n"})
    system.repos.git("app", "checkout", "-q", "--detach")
    system.start_workers()
    system.sluice("reconfigure")
    system.enqueue("change", "gate")
    system.sluice("wait", "--idle", "--timeout", "90")
    assert [b["result"] for b in system.buildsets()] == ["SUCCESS"]
    tip = system.repos.git("app", "rev-parse", "main")
    # one commit with one parent (the old main) holds both files; the change's
    # own commits are not in main's history (a merge would have made them so)
    assert system.repos.git("app", "rev-parse", f"{tip}^@").split() == [base]
    files = system.repos.git("app", "ls-tree", "--name-only", "main").split()
    assert "a.txt" in files and "b.txt" in files
    history = system.repos.git("app", "rev-list", "main").split()
    assert change not in history
