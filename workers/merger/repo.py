"""Git operations on one cache repo, used while its lock is held.

A :class:`Repo` is handed out by :meth:`RepoCache.open`; it never takes
locks itself. Failed git commands become the engine's errors through
:func:`~workers.merger.gitcmd.classify`, naming the project.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from workers.merger.errors import CorruptRepoError, GitCommandError, MergerError
from workers.merger.gitcmd import Git, classify

# Config files read from a tree: single files, and directories read for
# every *.yaml below them.
CONFIG_FILES = ("zuul.yaml", ".zuul.yaml", ".sluice.yaml")
CONFIG_DIRS = ("zuul.d", ".zuul.d")

# Files of a linked worktree's git dir that an interrupted operation leaves.
_OPERATION_STATE = (
    "MERGE_HEAD",
    "MERGE_MSG",
    "MERGE_MODE",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "AUTO_MERGE",
    "index.lock",
    "HEAD.lock",
)
_OPERATION_DIRS = ("rebase-merge", "rebase-apply", "sequencer")

# Entries of a repo's memo of changed files before it starts over.
_FILES_MEMO_SIZE = 10_000


class Repo:
    """A bare cache repo (``path``) and its merge worktree."""

    def __init__(
        self,
        path: Path,
        git: Git,
        label: str,
        files_memo: dict[tuple[str, str], list[str]] | None = None,
    ) -> None:
        self.path = path
        self.git = git
        self.label = label
        # (base, commit) -> changed files: a pure function of two immutable
        # commits, kept per process so a gate's items do not diff the
        # changes ahead of them again and again.
        self.files_memo = {} if files_memo is None else files_memo

    @staticmethod
    def worktree_path(path: Path) -> Path:
        return path.with_name(path.name + ".work")

    def _run(self, args: Sequence[str], what: str, stdin: bytes | None = None) -> bytes:
        try:
            return self.git.run(args, self.path, stdin=stdin).stdout
        except GitCommandError as exc:
            raise classify(exc, f"{self.label}: {what}") from None

    # ------------------------------------------------------------------
    # Remote

    def fetch(self, refspecs: Sequence[str] = (), branches: bool = True) -> None:
        """Fetch the branches and tags (``branches``) and any extra ``refspecs``."""
        specs = list(refspecs)
        if branches:
            specs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", *specs]
        if not specs:
            return
        args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
        if branches:
            args.append("--prune")
        self._run([*args, "origin", *specs], "fetch")

    # ------------------------------------------------------------------
    # Refs and objects

    def heads(self) -> dict[str, str]:
        """Branch name -> commit of every branch in the cache."""
        out = self._run(
            ["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"], "heads"
        )
        heads: dict[str, str] = {}
        for line in out.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition(" ")
            heads[ref.removeprefix("refs/heads/")] = sha
        return heads

    def default_branch(self) -> str:
        """The branch the remote's HEAD named when the cache cloned it ("" if none)."""
        proc = self.git.run(["symbolic-ref", "--quiet", "--short", "HEAD"], self.path, check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else ""

    def commit_of(self, rev: str) -> str | None:
        """The full sha of commit ``rev``, or None if there is no such commit here."""
        proc = self.git.run(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
            self.path,
            check=False,
        )
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def commits_of(self, revs: Iterable[str]) -> dict[str, str | None]:
        """:meth:`commit_of` for many revisions in one git process."""
        wanted = list(dict.fromkeys(revs))
        if not wanted:
            return {}
        stdin = "".join(f"{rev}^{{commit}}\n" for rev in wanted).encode()
        out = self.git.run(["cat-file", "--batch-check"], self.path, stdin=stdin).stdout
        found: dict[str, str | None] = {}
        for rev, line in zip(wanted, out.decode().splitlines(), strict=True):
            sha, _, kind = line.partition(" ")
            found[rev] = sha if kind.startswith("commit") else None
        return found

    def commit_times(self, shas: Iterable[str]) -> dict[str, int]:
        """Committer time (Unix seconds) of each commit."""
        wanted = list(dict.fromkeys(shas))
        if not wanted:
            return {}
        out = self._run(["show", "--no-patch", "--format=%H %ct", *wanted], "commit dates")
        times: dict[str, int] = {}
        for line in out.decode().splitlines():
            sha, _, stamp = line.partition(" ")
            times[sha] = int(stamp)
        return times

    def update_refs(self, refs: Mapping[str, str]) -> None:
        """Set every ``ref -> sha`` in one transaction."""
        if refs:
            lines = "".join(f"update {ref} {sha}\n" for ref, sha in refs.items())
            self._run(["update-ref", "--stdin"], "update refs", stdin=lines.encode())

    def refs(self, prefix: str) -> list[str]:
        """Names of the refs under ``prefix``."""
        return (
            self._run(["for-each-ref", "--format=%(refname)", prefix], "list refs").decode().split()
        )

    def remove_stale_git_locks(self) -> int:
        """Delete ``*.lock`` files of the bare repo (only under the repo lock!)."""
        found = [p for p in self.path.glob("*.lock") if p.is_file()]
        found += [p for p in (self.path / "refs").rglob("*.lock") if p.is_file()]
        for lock in found:
            lock.unlink(missing_ok=True)
        return len(found)

    def delete_refs(self, prefix: str) -> int:
        """Delete every ref under ``prefix`` (e.g. one job's refs); returns how many."""
        refs = self.refs(prefix)
        if refs:
            lines = "".join(f"delete {ref}\n" for ref in refs)
            self._run(["update-ref", "--stdin"], "delete refs", stdin=lines.encode())
        return len(refs)

    def changed_files(self, base: str, commit: str) -> list[str]:
        """Files ``commit`` changes against its merge-base with ``base``.

        With no merge-base (a history of its own), every file of its tree.
        """
        known = self.files_memo.get((base, commit))
        if known is not None:
            return list(known)
        files = self._changed_files(base, commit)
        if len(self.files_memo) >= _FILES_MEMO_SIZE:
            self.files_memo.clear()
        self.files_memo[(base, commit)] = files
        return list(files)

    def _changed_files(self, base: str, commit: str) -> list[str]:
        args = ["diff", "--name-only", "-z", "--no-renames", f"{base}...{commit}"]
        proc = self.git.run(args, self.path, check=False)
        if proc.returncode != 0 and b"no merge base" in proc.stderr:
            proc = self.git.run(
                ["ls-tree", "-r", "-z", "--name-only", commit], self.path, check=False
            )
        if proc.returncode != 0:
            stderr = proc.stderr.decode("utf-8", "replace")
            raise classify(GitCommandError(args, proc.returncode, stderr), f"{self.label}: diff")
        return sorted(p.decode("utf-8", "replace") for p in proc.stdout.split(b"\0") if p)

    # ------------------------------------------------------------------
    # Config files

    def read_config(self, commit: str) -> dict[str, str]:
        """Config files of the tree of ``commit``: path -> text."""
        paths = [*CONFIG_FILES, *CONFIG_DIRS]
        listing = self._run(["ls-tree", "-r", "-z", commit, "--", *paths], "list config files")
        blobs: list[tuple[str, str]] = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            _mode, kind, sha = meta.decode().split()
            path = raw_path.decode("utf-8", "replace")
            if kind == "blob" and _is_config_path(path):
                blobs.append((path, sha))
        if not blobs:
            return {}
        stdin = "".join(f"{sha}\n" for _path, sha in blobs).encode()
        data = self._run(["cat-file", "--batch"], "read config files", stdin=stdin)
        texts = _parse_batch(data, len(blobs))
        return {path: text for (path, _sha), text in zip(blobs, texts, strict=True)}

    # ------------------------------------------------------------------
    # Worktree

    def worktree(self, commit: str) -> Path:
        """The repo's merge worktree, with no operation in progress.

        A new worktree starts (unchecked-out) at ``commit``: the bare repo's
        ``HEAD`` may name a branch the remote does not have.
        """
        path = self.worktree_path(self.path)
        gitdir = self._worktree_gitdir(path)
        if gitdir is None:
            shutil.rmtree(path, ignore_errors=True)
            self._run(["worktree", "prune"], "prune worktrees")
            self._run(
                ["worktree", "add", "--quiet", "--detach", "--no-checkout", str(path), commit],
                "add worktree",
            )
            gitdir = self._worktree_gitdir(path)
            if gitdir is None:
                raise MergerError(f"{self.label}: cannot create a worktree at {path}")
        for name in _OPERATION_STATE:
            (gitdir / name).unlink(missing_ok=True)
        for name in _OPERATION_DIRS:
            shutil.rmtree(gitdir / name, ignore_errors=True)
        return path

    def _worktree_gitdir(self, path: Path) -> Path | None:
        if not (path / ".git").is_file():
            return None
        proc = self.git.run(["rev-parse", "--absolute-git-dir"], path, check=False)
        if proc.returncode != 0:
            return None
        return Path(proc.stdout.decode().strip())

    def clean_worktree(self, commit: str) -> Path:
        """:meth:`worktree` without untracked files (a failed merge leaves ``file~HEAD``)."""
        path = self.worktree(commit)
        self._run(["-C", str(path), "clean", "-q", "-f", "-d", "-x"], "clean worktree")
        return path


def _is_config_path(path: str) -> bool:
    if path in CONFIG_FILES:
        return True
    return path.split("/", 1)[0] in CONFIG_DIRS and path.endswith(".yaml")


def _parse_batch(data: bytes, count: int) -> list[str]:
    """Contents from ``git cat-file --batch`` output (``<sha> <type> <size>\\n<body>\\n``)."""
    texts: list[str] = []
    pos = 0
    for _ in range(count):
        header_end = data.index(b"\n", pos)
        header = data[pos:header_end].split()
        if header[-1:] == [b"missing"]:
            raise CorruptRepoError(f"object {header[0].decode()} is missing")
        if len(header) != 3:
            raise MergerError(f"unexpected cat-file output: {header!r}")
        size = int(header[2])
        body = data[header_end + 1 : header_end + 1 + size]
        texts.append(body.decode("utf-8", "replace"))
        pos = header_end + 1 + size + 1
    return texts
