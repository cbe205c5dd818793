"""Real git repositories with real job scripts, and build specs that use them."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.stack.process import is_alive
from scheduler.wire.build_spec import JobStep
from workers.executor import BuildControl, BuildResult, BuildSpec, RunnerOptions, run_build


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip()


@dataclass
class Repo:
    """A real git repository in a temporary folder; files are committed on ``commit``."""

    path: Path
    branch: str = "main"

    @classmethod
    def create(cls, path: Path, branch: str = "main") -> Repo:
        path.mkdir(parents=True)
        git(path, "init", "-q", f"--initial-branch={branch}")
        return cls(path, branch)

    def write(self, name: str, text: str, executable: bool = False) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(0o755 if executable else 0o644)

    def script(self, name: str, body: str) -> None:
        """An executable shell script (``#!/bin/sh`` and ``set -e`` added)."""
        self.write(name, "#!/bin/sh\nset -e\n" + body.strip() + "\n", executable=True)

    def symlink(self, name: str, target: str) -> None:
        link = self.path / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)

    def commit(self, message: str = "change") -> str:
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.path, "rev-parse", "HEAD")

    def dangling_commit(self, message: str = "speculative merge") -> str:
        """A commit on top of HEAD that no ref points at (like a merger's merge)."""
        return git(self.path, "commit-tree", "-m", message, "-p", "HEAD", "HEAD^{tree}")


def make_spec(
    repo: Repo,
    commit: str,
    *,
    run: tuple[str | JobStep, ...] = ("run.sh",),
    project: str = "org/project",
    others: Mapping[str, tuple[str, Mapping[str, str]]] | None = None,
    **fields: Any,
) -> BuildSpec:
    """A spec for ``project`` at ``commit`` of ``repo``; ``others``: {name: (source, state)}."""
    repo_state: dict[str, Mapping[str, str]] = {project: {repo.branch: commit}}
    sources = {project: str(repo.path)}
    for name, (source, state) in (others or {}).items():
        repo_state[name] = state
        sources[name] = source
    values: dict[str, Any] = {
        "tenant": "tenant-one",
        "pipeline": "check",
        "project": project,
        "branch": repo.branch,
        "ref": "refs/changes/01/1/1",
        "job": "unit-tests",
        "build_uuid": uuid.uuid4().hex,
        "run": run,
        "repo_state": repo_state,
        "sources": sources,
    }
    values.update(fields)
    return BuildSpec(**values)


@dataclass
class BuildThread:
    """``run_build`` in a thread, for tests that act while the build runs."""

    spec: BuildSpec
    control: BuildControl
    options: RunnerOptions
    result: BuildResult | None = None
    error: BaseException | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = run_build(self.spec, self.control, self.options)
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float = 30.0) -> BuildResult:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "build did not finish"
        assert self.error is None, self.error
        assert self.result is not None
        return self.result


def processes_of_build(build_uuid: str) -> list[int]:
    """Live pids whose environment names ``build_uuid`` (every job process does)."""
    marker = f"SLUICE_BUILD={build_uuid}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and is_alive(int(entry)):
            found.append(int(entry))
    return found


def read_pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


# A job that leaves three kinds of leftovers, all ignoring SIGTERM, their pids
# in $SLUICE_LOG_DIR/pids: a background child in the job's process group, a
# double-forked orphan, and one that escaped into a session of its own.
LEFTOVERS = """
pids="$SLUICE_LOG_DIR/pids"
sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 60' "$pids" &
( sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 60' "$pids" & )
setsid sh -c 'trap "" TERM; echo $$ >> "$0"; exec sleep 60' "$pids" &
while [ "$(wc -l < "$pids" 2>/dev/null || echo 0)" -lt 3 ]; do sleep 0.02; done
echo leftovers started
"""
