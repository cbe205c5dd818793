"""Git operations on one cache repo, used while its lock is held.

A :class:`Repo` is handed out by :meth:`RepoCache.open`; it never takes
locks itself. Failed git commands become the engine's errors through
:func:`~workers.merger.gitcmd.classify`, naming the project.

Few git processes: questions about objects (is a commit here, its date
and parents, the files a change touches, the config files of a tree) go
to one ``git cat-file`` process (:mod:`.catfile`, :mod:`.objects`), ref
transactions to one ``git update-ref --stdin`` (:mod:`.reftx`), both kept
per repo and worker process from one lock session to the next
(:mod:`.parking`: taken back on first use under the lock, parked by
:meth:`Repo.park` before the lock is released); branch heads are read
from the repo's files (:mod:`.branchrefs`), and a merge whose tip is an
ancestor of the change (known from the commits read) needs no
``merge-base``. Each of these answers as the git command would or not at
all; where it cannot, the git command runs as before, so results and
errors do not change.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from workers.gitobjects import Commit, loose_object_kind, parse_commit
from workers.merger.branchrefs import read_heads, read_refs
from workers.merger.catfile import CatFile, CatFileError
from workers.merger.errors import CorruptRepoError, GitCommandError, MergerError
from workers.merger.gitcmd import Git, classify
from workers.merger.gitproc import pack_files
from workers.merger.jobrefs import JobRefs
from workers.merger.objects import (
    CONFIG_DIRS,
    CONFIG_FILES,
    ConfigMemo,
    changed_paths,
    is_config_path,
    read_config_files,
)
from workers.merger.parking import parked_cat_files, parked_ref_updates
from workers.merger.reftx import RefTransactionError, RefUpdates

T = TypeVar("T")

log = logging.getLogger(__name__)

_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

# A fetch that keeps what it receives as one pack (``fetch.unpackLimit`` 1,
# given in the environment so that the command line stays ``git fetch``).
_ONE_PACK = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "fetch.unpackLimit",
    "GIT_CONFIG_VALUE_0": "1",
}

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

# Cache repos run with git's auto maintenance off (``maintenance.auto``,
# cache.py): a fetch would otherwise start ``git maintenance run --auto``
# after itself, every time, only to find nothing to do. This process asks
# for it (gc when loose objects or packs pile up) after its first fetch of
# a repo and after every MAINTENANCE_EVERY-th one.
MAINTENANCE_EVERY = 25


class Upkeep:
    """When a repo's auto maintenance is due, counted per repo and process."""

    def __init__(self, every: int = MAINTENANCE_EVERY) -> None:
        self.every = every
        self.fetches = 0

    def due(self) -> bool:
        """Count a fetch; True for the first and every ``every``-th after it."""
        due = self.fetches % self.every == 0
        self.fetches += 1
        return due


# Entries of a repo's memo of changed files before it starts over.
_FILES_MEMO_SIZE = 10_000
# Commits kept per repo and lock (parsed headers, for dates and ancestry).
_COMMITS_KEPT = 10_000
# commits read from a branch down to a change's parent (Repo.known_merge_base): a gate's
# window of items merged on the tip they came from, two commits an item
_MERGE_BASE_WALK = 128


class Repo:
    """A bare cache repo (``path``) and its merge worktree."""

    def __init__(
        self,
        path: Path,
        git: Git,
        label: str,
        *,
        files_memo: dict[tuple[str, str], list[str]] | None = None,
        config_memo: ConfigMemo | None = None,
        job_refs: JobRefs | None = None,
        upkeep: Upkeep | None = None,
    ) -> None:
        self.path = path
        self.git = git
        self.label = label
        # (base, commit) -> changed files: a pure function of two immutable
        # commits, kept per process so a gate's items do not diff the
        # changes ahead of them again and again.
        self.files_memo = {} if files_memo is None else files_memo
        # A root tree's config entries -> its config files (objects.py).
        self.config_memo: ConfigMemo = {} if config_memo is None else config_memo
        # Which jobs' refs the repo keeps (jobrefs.py), kept per process.
        self.job_refs = JobRefs(path) if job_refs is None else job_refs
        self.upkeep = Upkeep() if upkeep is None else upkeep
        # The git processes in hand (taken back or started under this lock).
        self._objects: CatFile | None = None
        self._objects_failed = False
        self._ref_updates: RefUpdates | None = None
        self._commits: dict[str, Commit] = {}
        self._replace_refs: bool | None = None  # known once looked for

    def park(self) -> None:
        """The lock is about to be released: keep the git processes for this process's next use."""
        objects, self._objects = self._objects, None
        if objects is not None:
            parked_cat_files().park(self.path, objects)
        updates, self._ref_updates = self._ref_updates, None
        if updates is not None:
            parked_ref_updates().park(self.path, updates)

    def close(self) -> None:
        """End the repo's git processes, in hand and parked (a repo discarded, packs deleted)."""
        objects, self._objects = self._objects, None
        if objects is not None:
            objects.close()
        updates, self._ref_updates = self._ref_updates, None
        if updates is not None:
            updates.close()
        parked_cat_files().end(self.path)
        parked_ref_updates().end(self.path)

    def _ask(self, question: Callable[[CatFile], T | None]) -> T | None:
        """``question`` answered through the cat-file process; None: ask git instead."""
        if self._objects_failed:
            return None
        try:
            if self._objects is None:
                parked = parked_cat_files().take(self.path, self.git)
                self._objects = parked or CatFile(self.git, self.path)
            return question(self._objects)
        except CatFileError as exc:
            # Not used again under this lock (the process is gone; the next
            # lock starts another): the git commands give the answer, or
            # the error (a corrupt object, ...) as they always did.
            log.info("%s: %s; asking git command by command", self.label, exc)
            self._objects = None
            self._objects_failed = True
            return None

    def _update_refs(self, lines: str, what: str) -> None:
        """One ref transaction (``update``/``delete`` lines) through the update-ref process.

        A process taken back that had died before it began the
        transaction (killed while parked) did nothing: a new one is
        started and carries it out.
        """
        for attempt in (1, 2):
            updates = self._ref_updates
            if updates is None:
                parked = parked_ref_updates().take(self.path, self.git)
                updates = self._ref_updates = parked or RefUpdates(self.git, self.path)
            try:
                updates.transaction(lines)
                return
            except RefTransactionError as exc:
                self._ref_updates = None  # the process is gone
                if exc.begun or updates.transactions == 0 or attempt == 2:
                    raise classify(exc, f"{self.label}: {what}") from None
                log.info("%s: %s; starting another git update-ref", self.label, exc)

    @staticmethod
    def worktree_path(path: Path) -> Path:
        return path.with_name(path.name + ".work")

    def _run(
        self, args: Sequence[str], what: str, stdin: bytes | None = None, git: Git | None = None
    ) -> bytes:
        try:
            return (git or self.git).run(args, self.path, stdin=stdin).stdout
        except GitCommandError as exc:
            raise classify(exc, f"{self.label}: {what}") from None

    # ------------------------------------------------------------------
    # Remote

    def fetch(
        self, refspecs: Sequence[str] = (), branches: bool = True, *, one_pack: bool = False
    ) -> None:
        """Fetch the branches and tags (``branches``) and any extra ``refspecs``.

        ``one_pack``: what comes is kept as one pack (two files), never as
        loose objects (a file each, and git's default below 100 objects):
        for a fetch of many changes at once, whose few objects each would
        otherwise cost an inode each on a disk.
        """
        specs = list(refspecs)
        if branches:
            specs = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", *specs]
        if not specs:
            return
        # The cat-file process goes on: it reads refs afresh and finds the
        # fetch's new packs (catfile.py); commits already read stay valid.
        args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
        if branches:
            args.append("--prune")
        git = self.git.with_env(**_ONE_PACK) if one_pack else None
        self._run([*args, "origin", *specs], "fetch", git=git)
        if self.upkeep.due():
            self.maintain()

    def maintain(self) -> None:
        """git's auto maintenance (a gc if the repo needs one), under our lock.

        A failure is logged, never the job's: the repo works without it,
        and the next operation finds a repo that is really broken. A gc
        that deleted packs ends the git processes, which may hold them
        open (and their disk space with them).
        """
        packs = pack_files(self.path)
        try:
            self._run(["maintenance", "run", "--auto", "--quiet"], "maintenance")
        except MergerError as exc:
            log.warning("%s: git maintenance failed: %s", self.label, exc)
        if not packs <= pack_files(self.path):
            self.close()

    # ------------------------------------------------------------------
    # Refs and objects

    def heads(self) -> dict[str, str]:
        """Branch name -> commit of every branch in the cache."""
        heads = read_heads(self.path)
        return heads if heads is not None else self._heads_from_git()

    def _heads_from_git(self) -> dict[str, str]:
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
        """The full sha of commit ``rev``, or None if there is no such commit here.

        A full sha is asked of the parked cat-file (:meth:`commits_of`), any
        other name of git (``rev-parse``), which takes every string safely.
        """
        if _FULL_SHA.fullmatch(rev):
            return self.commits_of([rev])[rev]
        proc = self.git.run(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
            self.path,
            check=False,
        )
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def commits_of(self, revs: Iterable[str]) -> dict[str, str | None]:
        """:meth:`commit_of` of many revisions: loose commits from their files, the rest at once."""
        wanted = list(dict.fromkeys(revs))
        found: dict[str, str | None] = {rev: rev for rev in wanted if self._loose_commit(rev)}
        rest = [rev for rev in wanted if rev not in found]
        if not rest:
            return found
        answers = self._ask(lambda cat: cat.info([f"{rev}^{{commit}}" for rev in rest]))
        if answers is not None:
            for rev, answer in zip(rest, answers, strict=True):
                found[rev] = answer.sha if answer is not None and answer.kind == "commit" else None
            return {rev: found[rev] for rev in wanted}
        stdin = "".join(f"{rev}^{{commit}}\n" for rev in wanted).encode()
        out = self.git.run(["cat-file", "--batch-check"], self.path, stdin=stdin).stdout
        found = {}
        for rev, line in zip(wanted, out.decode().splitlines(), strict=True):
            sha, _, kind = line.partition(" ")
            found[rev] = sha if kind.startswith("commit") else None
        return found

    def _loose_commit(self, rev: str) -> bool:
        """Whether ``rev`` is the full sha of a loose commit (no replace refs to mind)."""
        if (
            not _FULL_SHA.fullmatch(rev)
            or loose_object_kind(self.path / "objects", rev) != "commit"
        ):
            return False
        if self._replace_refs is None:
            self._replace_refs = read_refs(self.path, b"refs/replace/") != {}
        return not self._replace_refs

    def commit_times(self, shas: Iterable[str]) -> dict[str, int]:
        """Committer time (Unix seconds) of each commit."""
        wanted = list(dict.fromkeys(shas))
        if not wanted:
            return {}
        commits = self.commits(wanted)
        if commits is not None:
            known = {c.sha: c.time for c in commits.values() if c.time is not None}
            if len(known) == len(commits):
                return known
        out = self._run(["show", "--no-patch", "--format=%H %ct", *wanted], "commit dates")
        times: dict[str, int] = {}
        for line in out.decode().splitlines():
            sha, _, stamp = line.partition(" ")
            times[sha] = int(stamp)
        return times

    def commits(self, shas: Iterable[str]) -> dict[str, Commit] | None:
        """The parsed commits of full shas (None: ask git instead), read once per lock."""
        wanted = list(dict.fromkeys(shas))
        unread = [sha for sha in wanted if sha not in self._commits]
        if any(not _FULL_SHA.fullmatch(sha) for sha in unread):
            return None  # only immutable names are kept
        if unread:
            answers = self._ask(lambda cat: cat.contents(unread))
            if answers is None:
                return None
            if len(self._commits) + len(unread) > _COMMITS_KEPT:
                self._commits.clear()
            for sha, answer in zip(unread, answers, strict=True):
                commit = None
                if answer is not None and answer[0].kind == "commit" and answer[0].sha == sha:
                    commit = parse_commit(sha, answer[1])
                if commit is None:
                    return None
                self._commits[sha] = commit
        return {sha: self._commits[sha] for sha in wanted}

    def is_ancestor(self, ancestor: str, commit: str) -> bool | None:
        """True if ``ancestor`` is ``commit`` or one of its ancestors; None if not known.

        Reads ``commit`` and follows the parents of commits already read
        (a stack of changes read for their dates): never a walk through
        history, so a False is never claimed, only None.
        """
        if self._grafted():
            return None
        if ancestor == commit:
            return True
        if self.commits([commit]) is None:
            return None
        seen = {commit}
        pending = [commit]
        while pending:
            for parent in self._commits[pending.pop()].parents:
                if parent == ancestor:
                    return True
                if parent in self._commits and parent not in seen:
                    seen.add(parent)
                    pending.append(parent)
        return None

    def _grafted(self) -> bool:
        """Whether git would see other parents than the commit objects name (shallow, grafts)."""
        return (self.path / "shallow").exists() or (self.path / "info" / "grafts").exists()

    def note_jobs(self, jobs: Sequence[tuple[str, int]]) -> None:
        """Before a fetch writes refs of jobs: enter each ``(job id, refs)`` in the journal."""
        self.job_refs.enter(jobs, self.refs)

    def drop_overdue_refs(self) -> None:
        """Drop the refs of old jobs now if no merge did it for long (jobrefs.py)."""
        if self.job_refs.overdue(self.refs):
            self.update_job_refs(None, {})

    def update_job_refs(
        self, job_id: str | None, refs: Mapping[str, str], *, held: Sequence[str] = ()
    ) -> None:
        """Set every ``ref -> sha`` of job ``job_id`` in one transaction (None: only drop).

        ``held`` are memo refs the job found and keeps without writing
        them (the merges of the items ahead of it). The same transaction
        deletes the refs of the jobs beyond the repo's window, and the memo
        refs that only they wrote or held (jobrefs.py); with nothing to
        write or delete, no git process runs.
        """
        plan = self.job_refs.plan(job_id, refs, self.refs, held=held)
        if plan.lines:
            self._update_refs(plan.lines, "update refs")
        self.job_refs.done(plan)
        if plan.deleted:
            log.debug("%s: %d refs of earlier jobs dropped", self.label, plan.deleted)

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
            self._update_refs("".join(f"delete {ref}\n" for ref in refs), "delete refs")
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
        paths = self._changed_paths(base, commit)
        if paths is not None:
            return sorted(p.decode("utf-8", "replace") for p in paths)
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

    def _changed_paths(self, base: str, commit: str) -> list[bytes] | None:
        """``git diff base...commit`` in Python when the merge-base is known.

        (:meth:`known_merge_base`.) The diff is then that of the two trees.
        """
        below = self.known_merge_base(base, commit)
        if below is None:
            return None
        commits = self.commits([below, commit])
        if commits is None:
            return None
        old, new = commits[below].tree, commits[commit].tree
        return self._ask(lambda cat: changed_paths(cat, old, new))

    def known_merge_base(self, base: str, commit: str) -> str | None:
        """The merge-base of ``base`` and ``commit`` where it is known without git; else None.

        ``base`` itself when it is ``commit`` or an ancestor of it (a change
        on its branch's tip). Or the only parent of ``commit`` when every
        line of history from ``base`` reaches that parent within
        :data:`_MERGE_BASE_WALK` commits without meeting ``commit``: the
        parent is then an ancestor of ``base`` and ``commit`` is not, so no
        common ancestor is younger (a branch that merged the items ahead of
        a change, made on the tip they all came from).
        """
        if self.is_ancestor(base, commit):
            return base
        if self._grafted():
            return None
        read = self.commits([commit])
        if read is None or len(read[commit].parents) != 1:
            return None
        parent = read[commit].parents[0]
        return parent if self._lines_end_at(base, parent, commit) else None

    def _lines_end_at(self, base: str, parent: str, commit: str) -> bool:
        """Whether every line of history from ``base`` reaches ``parent``, not meeting ``commit``.

        Read a level at a time, at most :data:`_MERGE_BASE_WALK` commits: False
        beyond, and as soon as a line passes a commit dated before ``parent``
        (it went below it: a stack of changes, an older branch; git decides).
        """
        read = self.commits([parent])
        since = read[parent].time if read is not None else None
        seen = {base}
        level = [base]
        while level:
            commits = self.commits(level)
            if commits is None or since is None:
                return False
            following = []
            for sha in level:
                parents, when = commits[sha].parents, commits[sha].time
                if not parents or commit in parents or when is None or when < since:
                    return False  # a line ends elsewhere, base has the change, or went below
                following += [p for p in parents if p != parent and p not in seen]
                seen.update(parents)
            if len(seen) > _MERGE_BASE_WALK:
                return False
            level = following
        return True

    # ------------------------------------------------------------------
    # Config files

    def read_config(self, commit: str) -> dict[str, str]:
        """Config files of the tree of ``commit``: path -> text."""
        known = self._commits.get(commit)
        tree = known.tree if known is not None else f"{commit}^{{tree}}"
        files = self._ask(lambda cat: read_config_files(cat, tree, self.config_memo))
        return files if files is not None else self._read_config_with_git(commit)

    def _read_config_with_git(self, commit: str) -> dict[str, str]:
        paths = [*CONFIG_FILES, *CONFIG_DIRS]
        listing = self._run(["ls-tree", "-r", "-z", commit, "--", *paths], "list config files")
        blobs: list[tuple[str, str]] = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            _mode, kind, sha = meta.decode().split()
            path = raw_path.decode("utf-8", "replace")
            if kind == "blob" and is_config_path(path):
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
