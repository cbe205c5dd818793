"""Sample bare repositories for the demo tenant, and changes proposed as branches.

The repositories live under the demo connection's ``baseurl`` (by default
``.sluice/demo/repos``). They are created once; each demo run proposes new
change branches from the current ``main``, so ``make run`` can be repeated.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sluice Demo",
    "GIT_AUTHOR_EMAIL": "demo@sluice.invalid",
    "GIT_COMMITTER_NAME": "Sluice Demo",
    "GIT_COMMITTER_EMAIL": "demo@sluice.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}

PIPELINES = """
- pipeline:
    name: check
    description: Test each change on its own.
    manager: independent
- pipeline:
    name: gate
    description: Test changes on top of those ahead; merge what passes.
    manager: dependent
    success:
      demo:
        merge: true
- semaphore:
    name: integration-env
    max: 1
- job:
    name: base
    parent: null
    timeout: 300
"""

APP_CONFIG = """
- job:
    name: lint
    run: ci/lint.sh
- job:
    name: unit
    run: ci/unit.sh
    dependencies: [lint]
- job:
    name: integration
    run: ci/integration.sh
    semaphores: [integration-env]
- project:
    queue: integrated
    check:
      jobs: [lint, unit, integration]
    gate:
      jobs: [lint, unit, integration]
"""

LIB_CONFIG = """
- job:
    name: lib-unit
    run: ci/unit.sh
- project:
    queue: integrated
    check:
      jobs: [lib-unit]
    gate:
      jobs: [lib-unit]
"""

LINT = "#!/bin/sh\necho 'checking style'\nsleep 1\n"
# A change that adds a file named BROKEN fails its unit tests.
UNIT = (
    "#!/bin/sh\necho 'running unit tests'\nsleep 2\n"
    "if [ -e BROKEN ]; then echo 'test_feature FAILED'; exit 1; fi\necho 'all passed'\n"
)
INTEGRATION = "#!/bin/sh\necho 'using the shared integration environment'\nsleep 2\n"

PROJECTS: dict[str, dict[str, str]] = {
    "config": {"zuul.d/pipelines.yaml": PIPELINES},
    "app": {
        ".zuul.yaml": APP_CONFIG,
        "ci/lint.sh": LINT,
        "ci/unit.sh": UNIT,
        "ci/integration.sh": INTEGRATION,
        "src/app.py": "print('hello')\n",
    },
    "lib": {".zuul.yaml": LIB_CONFIG, "ci/unit.sh": UNIT, "src/lib.py": "VALUE = 1\n"},
}


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _write(worktree: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = worktree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        if name.endswith(".sh"):
            path.chmod(0o755)


def ensure_repositories(root: Path) -> list[str]:
    """Create the bare repositories that do not exist yet; returns those created."""
    created = []
    for project, files in PROJECTS.items():
        bare = root / project
        if (bare / "HEAD").exists():
            continue
        bare.mkdir(parents=True, exist_ok=True)
        git("init", "-q", "--bare", "-b", "main", str(bare))
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            git("init", "-q", "-b", "main", cwd=work)
            _write(work, files)
            git("add", "-A", cwd=work)
            git("commit", "-q", "-m", f"{project}: initial import", cwd=work)
            git("push", "-q", str(bare), "main", cwd=work)
        created.append(project)
    return created


def propose(root: Path, project: str, branch: str, files: dict[str, str], message: str) -> str:
    """Push a change branch made from the current ``main``; returns its commit."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / project
        git("clone", "-q", str(root / project), str(work))
        git("checkout", "-q", "-b", branch, cwd=work)
        _write(work, files)
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", message, cwd=work)
        git("push", "-q", "origin", branch, cwd=work)
        return git("rev-parse", "HEAD", cwd=work)


def head(root: Path, project: str, branch: str = "main") -> str:
    return git("--git-dir", str(root / project), "rev-parse", branch)


def merged_since(root: Path, project: str, base: str) -> list[str]:
    """One line per commit added to ``main`` since ``base`` (first parent)."""
    out = git(
        "--git-dir", str(root / project), "log", "--first-parent", "--format=%h %s", f"{base}..main"
    )
    return out.splitlines()
