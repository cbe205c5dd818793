"""Remote git repositories for merger tests, written with git plumbing.

Remotes are bare repositories under one base directory (the ``baseurl``
of a git connection). Commits are made without a worktree (a temporary
index, ``commit-tree``), with fixed identities and increasing dates, so
tests are fast and independent of any user or system git configuration.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_env(home: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LANG": "C",
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Author",
        "GIT_COMMITTER_EMAIL": "author@example.invalid",
    }


class Remote:
    """One bare remote repository (a project of the connection)."""

    def __init__(self, path: Path, env: dict[str, str]) -> None:
        self.path = path
        self.env = env
        self._clock = 1_700_000_000

    def git(
        self, *args: str, stdin: bytes | None = None, extra: dict[str, str] | None = None
    ) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=self.path,
            env={**self.env, **(extra or {})},
            input=stdin,
            capture_output=True,
            check=True,
        )
        return proc.stdout.decode().strip()

    def rev(self, rev: str) -> str:
        return self.git("rev-parse", rev)

    def commit(
        self,
        files: dict[str, str | None],
        *,
        parent: str | None = None,
        parents: list[str] | None = None,
        message: str = "change",
        ref: str | None = None,
    ) -> str:
        """A commit changing ``files`` (None deletes) on ``parent``; sets ``ref`` if given."""
        parent_shas = parents if parents is not None else ([self.rev(parent)] if parent else [])
        index = self.path / f"tmp-index-{os.getpid()}"
        index.unlink(missing_ok=True)
        idx = {"GIT_INDEX_FILE": str(index)}
        if parent_shas:
            self.git("read-tree", parent_shas[0], extra=idx)
        for name, text in files.items():
            if text is None:
                removal = f"0 {'0' * 40}\t{name}\n".encode()
                self.git("update-index", "--index-info", stdin=removal, extra=idx)
                continue
            blob = self.git("hash-object", "-w", "--stdin", stdin=text.encode())
            self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}", extra=idx)
        tree = self.git("write-tree", extra=idx)
        index.unlink(missing_ok=True)
        self._clock += 60
        date = f"{self._clock} +0000"
        args = ["commit-tree", tree, "-m", message]
        for sha in parent_shas:
            args += ["-p", sha]
        sha = self.git(*args, extra={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        if ref:
            self.git("update-ref", ref, sha)
        return sha

    def commit_entries(
        self,
        entries: dict[bytes, tuple[str, str]],
        *,
        parent: str | None = None,
        message: str = "entries",
        ref: str | None = None,
    ) -> str:
        """A commit whose tree is exactly ``entries``: path -> (mode, text).

        Any mode git knows: ``100755``, ``120000`` (the text is the link's
        target), ``160000`` (a submodule: the text is its commit sha).
        Paths are bytes, so they need not be UTF-8.
        """
        index = self.path / f"tmp-index-{os.getpid()}"
        index.unlink(missing_ok=True)
        lines = []
        blobs: dict[str, str] = {}
        for path, (mode, text) in entries.items():
            sha = text
            if mode != "160000":
                if text not in blobs:
                    blobs[text] = self.git("hash-object", "-w", "--stdin", stdin=text.encode())
                sha = blobs[text]
            lines.append(f"{mode} {sha}\t".encode() + path + b"\0")
        idx = {"GIT_INDEX_FILE": str(index)}
        self.git("update-index", "-z", "--index-info", stdin=b"".join(lines), extra=idx)
        tree = self.git("write-tree", extra=idx)
        index.unlink(missing_ok=True)
        self._clock += 60
        date = f"{self._clock} +0000"
        args = ["commit-tree", tree, "-m", message]
        if parent:
            args += ["-p", self.rev(parent)]
        sha = self.git(*args, extra={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        if ref:
            self.git("update-ref", ref, sha)
        return sha

    def change(self, number: int, files: dict[str, str | None], branch: str = "main") -> str:
        """A Gerrit-style change ``refs/changes/<n>`` on top of ``branch``."""
        return self.commit(
            files, parent=branch, message=f"change {number}", ref=f"refs/changes/{number}"
        )

    def advance(self, branch: str, files: dict[str, str | None]) -> str:
        """Move ``branch`` forward by one commit."""
        return self.commit(files, parent=f"refs/heads/{branch}", ref=f"refs/heads/{branch}")


class Remotes:
    """The projects of one git connection, all under ``base``."""

    def __init__(self, base: Path, home: Path) -> None:
        self.base = base
        self.env = git_env(home)
        base.mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)

    def create(self, project: str, files: dict[str, str] | None = None) -> Remote:
        """A new project whose ``main`` branch has one commit with ``files``."""
        path = self.base / project
        path.mkdir(parents=True)
        subprocess.run(
            ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(path)],
            env=self.env,
            check=True,
        )
        remote = Remote(path, self.env)
        initial: dict[str, str | None] = dict(files or {"README": "hello\n"})
        remote.commit(initial, message="initial", ref="refs/heads/main")
        return remote
