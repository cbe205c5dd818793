"""A gate whose builds wait until the test lets them finish (a file appears)."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.system import TENANT_YAML, SluiceSystem

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
            timeout: 300
        """,
}


class HeldGate:
    """``app`` gated by job ``unit``, which runs ``minimum`` seconds, then until
    :meth:`release` (or 120 s)."""

    def __init__(self, system: SluiceSystem, *, minimum: float = 0) -> None:
        self.system = system
        self.flag = system.root / "release"
        script = (
            "#!/bin/sh\n"
            "echo unit starts\n"
            f"sleep {minimum}\n"
            f"for i in $(seq 1 1200); do test -e {self.flag} && exit 0; sleep 0.1; done\n"
            "exit 1\n"
        )
        app = {
            ".zuul.yaml": """
                - job:
                    name: unit
                    run: ci/unit.sh
                - project:
                    check:
                      jobs: [unit]
                    gate:
                      jobs: [unit]
                """,
            "ci/unit.sh": script,
            "src/app.py": "value = 1\n",
        }
        system.tenant(TENANT_YAML)
        system.repos.commit("config", "main", CONFIG)
        self.base = system.repos.commit("app", "main", app)
        system.repos.git("app", "checkout", "-q", "--detach")  # the merge queue pushes to main

    def change(self, ref: str) -> None:
        self.system.repos.commit("app", ref, {f"src/{ref}.py": "1\n"}, base=self.base)
        self.system.repos.git("app", "checkout", "-q", "--detach")

    def release(self) -> None:
        self.flag.write_text("go\n")

    def hold(self) -> None:
        self.flag.unlink(missing_ok=True)

    @property
    def released(self) -> bool:
        return Path(self.flag).exists()
