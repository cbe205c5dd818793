"""Real git repositories with real job scripts, and build specs that use them."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from cli.stack.process import is_alive
from scheduler.config.freeze import FrozenJob
from scheduler.config.model import Playbook, RequiredProject
from workers.executor import (
    BuildContext,
    BuildControl,
    BuildResult,
    BuildSpec,
    Phase,
    RunnerOptions,
    run_build,
)


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


JOB_FIELDS = frozenset(f.name for f in fields(FrozenJob))
CONTEXT_FIELDS = frozenset(f.name for f in fields(BuildContext))

Steps = tuple[str | Playbook, ...]


def make_spec(
    repo: Repo,
    commit: str,
    *,
    run: Steps = ("run.sh",),
    project: str = "org/project",
    others: Mapping[str, tuple[str, Mapping[str, str]]] | None = None,
    checkouts: Mapping[str, str] | None = None,
    **values: Any,
) -> BuildSpec:
    """A build of a frozen job of ``project`` at ``commit`` of ``repo``.

    ``run``, ``pre_run`` and ``post_run`` name steps: a path (a playbook of
    ``project`` at the repo's branch) or a :class:`Playbook`. ``others``:
    more projects in the repo state, ``{name: (source, {branch: commit})}``;
    ``checkouts``: ``{project: branch}``, the job's override-checkouts. The
    other keywords are fields of the frozen job or of the build's context.
    """
    repo_state: dict[str, Mapping[str, str]] = {project: {repo.branch: commit}}
    sources = {project: str(repo.path)}
    for name, (source, state) in (others or {}).items():
        repo_state[name] = state
        sources[name] = source
    unknown = set(values) - JOB_FIELDS - CONTEXT_FIELDS
    assert not unknown, f"not a field of a frozen job or a build context: {unknown}"
    job: dict[str, Any] = {
        "name": "unit-tests",
        "project": project,
        "branch": repo.branch,
        "pipeline": "check",
        "run": run,
        **{k: v for k, v in values.items() if k in JOB_FIELDS},
    }
    for phase in ("pre_run", "run", "post_run"):
        job[phase] = playbooks(job.get(phase, ()), job["project"], job["branch"])
    if checkouts:
        job["required_projects"] = tuple(RequiredProject(p, b) for p, b in checkouts.items())
    context: dict[str, Any] = {
        "tenant": "tenant-one",
        "ref": "refs/changes/01/1/1",
        "build_uuid": uuid.uuid4().hex,
        "repo_state": repo_state,
        "sources": sources,
        **{k: v for k, v in values.items() if k in CONTEXT_FIELDS},
    }
    return BuildSpec(FrozenJob(**job), BuildContext(**context))


def playbooks(steps: Steps, project: str, branch: str) -> tuple[Playbook, ...]:
    """Paths as playbooks of ``project`` at ``branch`` (untrusted, no secrets)."""
    return tuple(
        step if isinstance(step, Playbook) else Playbook(step, project, branch, False)
        for step in steps
    )


def playbook(
    path: str,
    project: str = "org/project",
    branch: str = "main",
    *,
    trusted: bool = False,
    secrets: tuple[tuple[str, str], ...] = (),
) -> Playbook:
    """A step of a frozen job: ``path`` in ``project`` at ``branch`` (make_spec's defaults)."""
    return Playbook(path, project, branch, trusted, secrets)


def with_job(spec: BuildSpec, **changes: Any) -> BuildSpec:
    """``spec`` with fields of its frozen job changed."""
    return replace(spec, job=replace(spec.job, **changes))


def with_context(spec: BuildSpec, **changes: Any) -> BuildSpec:
    """``spec`` with fields of its build's context changed."""
    return replace(spec, context=replace(spec.context, **changes))


def exit_codes(result: BuildResult, phase: Phase) -> list[int | None]:
    """The exit codes of one phase's executables, in order."""
    return [step.exit_code for step in result.steps if step.phase is phase]


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
