"""Real git repositories in a temporary folder, and a ``fetch`` reading them.

``GitRepos.fetch`` is what a test hands to ``reconfigure_tenant``: every
branch of a repository, and for each the config files of its head, read
with ``git ls-tree`` and ``git cat-file`` (what a merger's config job does).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from scheduler.config.checkout import candidate_paths

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Sluice Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Sluice Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


class GitRepos:
    """Bare-bones repositories ``<root>/<project>`` with commits made from file maps."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fetches: list[tuple[str, str]] = []

    def git(self, project: str, *args: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(
            ["git", *args],
            cwd=self.root / project,
            env={**os.environ, **GIT_ENV},
            input=stdin,
            capture_output=True,
            check=True,
            timeout=60,
        )
        return done.stdout

    def commit(self, project: str, branch: str, files: dict[str, str | None]) -> str:
        """Commit ``files`` (None deletes) on ``branch``, creating repo and branch as needed."""
        path = self.root / project
        if not path.exists():
            path.mkdir(parents=True)
            self.git(project, "init", "-q", "-b", branch)
        elif branch not in self.branches(project):
            self.git(project, "checkout", "-q", "-b", branch)
        else:
            self.git(project, "checkout", "-q", branch)
        for name, text in files.items():
            target = path / name
            if text is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        self.git(project, "add", "-A")
        self.git(project, "commit", "-q", "--allow-empty", "-m", f"update {branch}")
        return self.git(project, "rev-parse", "HEAD").decode().strip()

    def branches(self, project: str) -> list[str]:
        out = self.git(project, "for-each-ref", "--format=%(refname:short)", "refs/heads/")
        return sorted(out.decode().split())

    def read_config(self, project: str, branch: str) -> dict[str, str]:
        listing = self.git(project, "ls-tree", "-r", "-z", "--name-only", branch)
        names = [n.decode() for n in listing.split(b"\0") if n]
        return {
            name: self.git(project, "show", f"{branch}:{name}").decode("utf-8", "surrogateescape")
            for name in candidate_paths(names)
        }

    def fetch(self, connection: str, project: str) -> dict[str, dict[str, str]]:
        """Every branch's config files: what a merger config job returns."""
        self.fetches.append((connection, project))
        if not (self.root / project).exists():
            return {}
        return {b: self.read_config(project, b) for b in self.branches(project)}
