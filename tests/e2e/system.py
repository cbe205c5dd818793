"""A whole Sluice on real parts: git repos, a tenant, workers, and the CLI.

``SluiceSystem`` writes a ``sluice.yaml`` and ``main.yaml`` over real git
repositories, starts real ``celery worker`` processes for every queue, and
runs ``sluice`` commands in-process (the same code the console script
runs) against the test's ZooKeeper chroot, Redis and SQLite database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli
from tests.fixtures.workers import ServiceEnvironment, WorkerFactory, WorkerProcess

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sluice Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Sluice Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


# The tenant of the end-to-end tests. Proposed changes are branches of the
# same repository, so only `main` is loaded as configuration.
TENANT_YAML = """
- tenant:
    name: demo
    source:
      local:
        config-projects: [config]
        untrusted-projects:
          - app:
              include-branches: ['^main$']
"""


# A config project's usual start: a check pipeline enqueued by hand and a base job.
CHECK_CONFIG = {
    "zuul.d/base.yaml": """
        - pipeline:
            name: check
            manager: independent
            trigger: {}
        - job:
            name: base
            parent: null
            timeout: 120
        """,
}


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


class Repos:
    """Repositories ``<root>/<project>``; files ending in ``.sh`` are executable."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def git(self, project: str, *args: str) -> str:
        done = subprocess.run(
            ["git", *args],
            cwd=self.root / project,
            env={**os.environ, **GIT_ENV},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return done.stdout.strip()

    def log(self, project: str, base: str, head: str) -> list[tuple[str, str]]:
        """``(sha, message)`` of each commit on ``head`` that ``base`` lacks, newest first."""
        listed = self.git(project, "log", "--format=%H%x00%B%x01", f"{base}..{head}")
        entries = [e.strip("\n").split("\x00", 1) for e in listed.split("\x01") if e.strip()]
        return [(sha, message) for sha, message in entries]

    def commit(
        self, project: str, branch: str, files: dict[str, str], base: str = "", message: str = ""
    ) -> str:
        path = self.root / project
        if not path.exists():
            path.mkdir(parents=True)
            self.git(project, "init", "-q", "-b", branch)
            # The merge queue pushes to this repository while a test has a
            # branch checked out: update that worktree instead of refusing.
            self.git(project, "config", "receive.denyCurrentBranch", "updateInstead")
        elif base:
            # committed detached, the branch set after: a poller never sees
            # the branch at ``base`` (one push moves a ref once)
            self.git(project, "checkout", "-q", "--detach", base)
        else:
            self.git(project, "checkout", "-q", branch)
        for name, text in files.items():
            target = path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(dedent(text), encoding="utf-8")
            if name.endswith(".sh"):
                target.chmod(0o755)
        self.git(project, "add", "-A")
        self.git(project, "commit", "-q", "-m", message or f"update {branch}")
        if base:
            self.git(project, "checkout", "-q", "-B", branch)
        return self.git(project, "rev-parse", "HEAD")


# Jobs that reach their nodes share the host's network (the sandbox gives
# every other step only a loopback of its own: docs/security.md).
NODE_NETWORK = "executor:\n  sandbox_network: nodes\n"


class SluiceSystem:
    def __init__(self, environment: ServiceEnvironment, workers: WorkerFactory, root: Path) -> None:
        self.environment = environment
        self.workers = workers
        self.root = root
        self.repos = Repos(root / "repos")
        self.config = root / "sluice.yaml"
        self.config.write_text(
            dedent(
                """
                tenant_config: main.yaml
                connections:
                  local:
                    driver: git
                    baseurl: repos
                """
            )
        )
        self.started: list[WorkerProcess] = []

    def env(self) -> dict[str, str]:
        env = self.environment.env()
        env["SLUICE_CONFIG"] = str(self.config)
        return env

    def tenant(self, text: str) -> None:
        (self.root / "main.yaml").write_text(dedent(text))

    def start_workers(self, count: int = 1) -> list[WorkerProcess]:
        """``count`` workers for every queue."""
        return [self.start_worker() for _ in range(count)]

    def start_worker(
        self,
        queues: tuple[str, ...] = ("scheduler", "merger", "executor", "maintenance"),
        *,
        concurrency: int = 2,
        env: dict[str, str] | None = None,
        beat: bool = False,
        pool: str = "prefork",
    ) -> WorkerProcess:
        """One worker; ``beat`` runs the sweep timer in it (schedule under the state dir)."""
        extra = {"SLUICE_CONFIG": str(self.config), **(env or {})}
        args: list[str] = []
        if beat:
            args = ["--beat", "--schedule", str(self.root / f"beat-{len(self.started)}")]
        worker = self.workers.start(
            list(queues), concurrency=concurrency, pool=pool, extra_env=extra, extra_args=args
        )
        self.started.append(worker)
        return worker

    def sluice_process(self, *args: str) -> subprocess.Popen[str]:
        """``sluice ARGS`` as a separate process (the installed console script)."""
        command = str(Path(sys.executable).parent / "sluice")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(self.env())
        return subprocess.Popen(
            [command, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def sluice(self, *args: str, expect: int = 0) -> str:
        """Run ``sluice ARGS`` in-process with this system's settings."""
        code, output = self.sluice_result(*args)
        assert code == expect, (args, code, output)
        return output

    def sluice_result(self, *args: str) -> tuple[int, str]:
        """``sluice ARGS`` in-process: its exit code and output, whatever they are."""
        runner = CliRunner()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env.update(self.env())
        old = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        try:
            result = runner.invoke(cli, list(args), catch_exceptions=False)
        finally:
            os.environ.clear()
            os.environ.update(old)
        return result.exit_code, result.output

    def enqueue(
        self,
        ref: str,
        pipeline: str = "check",
        *,
        project: str = "app",
        branch: str = "main",
        tenant: str = "demo",
        expect: int = 0,
    ) -> str:
        """``sluice enqueue``; the item id (or the error text when ``expect`` is 1)."""
        return self.sluice(
            "enqueue",
            "--tenant",
            tenant,
            "--pipeline",
            pipeline,
            "--project",
            project,
            "--branch",
            branch,
            "--ref",
            ref,
            expect=expect,
        ).strip()

    def builds(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.sluice("builds", "--json", "--limit", "0"))
        return rows

    def buildsets(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.sluice("buildsets", "--json", "--limit", "0"))
        return rows


@pytest.fixture
def system(
    test_environment: ServiceEnvironment, celery_workers: WorkerFactory, tmp_path: Path
) -> Iterator[SluiceSystem]:
    yield SluiceSystem(test_environment, celery_workers, tmp_path)
