"""The repo cache of a worker host: one bare clone per project, locked per repo.

Layout under ``<state_dir>/git/``::

    <connection>/<project>            bare clone (project name percent-encoded)
    <connection>/<project>.lock       fcntl lock file of that repo
    <connection>/<project>.work       the repo's merge worktree (a linked worktree)
    <connection>/.tmp-<project>-*     a clone in progress (renamed into place when done)
    <connection>/.broken-<project>-*  a repo found broken, being deleted
    .home/                            HOME of every git process (no user config)

Why bare: the cache's ``refs/heads/*`` *are* the remote's branches (a fetch
writes them directly; a non-bare clone refuses to fetch into its checked-out
branch and keeps a local branch that drifts), executors clone from it as
from any remote, and the merge worktree is separate and disposable: a
broken worktree is deleted and re-added without re-cloning.

Guarantees:

* **One process per repo at a time.** :meth:`RepoCache.open` holds an
  exclusive ``flock`` on the repo's lock file for the whole block; the lock
  dies with its process, so a killed worker never leaves it held. Its git
  processes do outlive it: the holder's pid in the lock file tells the next
  holder that the last one died with the lock, and the next holder ends
  whatever still works in the repo before it starts (:mod:`.orphans`).
  Different repos proceed in parallel.
* **No half-written repo at the repo path.** A clone goes to a temporary
  directory that is renamed into place only once complete and checked. A
  repo that fails the check on first use in a process (not bare, a ref
  pointing at a missing object), or that a git command finds corrupt, is
  renamed aside and deleted; the next use clones afresh (one automatic
  retry in :meth:`RepoCache.run`). Lock files that a killed git process
  left (``packed-refs.lock``, ``refs/heads/x.lock``) are removed when a
  command trips over one, and the work retried.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from scheduler.settings.sections import ConnectionSettings, Settings
from scheduler.zk.retry import RetryPolicy
from workers.merger import forges
from workers.merger.errors import (
    CorruptRepoError,
    GitCommandError,
    InvalidJobError,
    RepoLockTimeoutError,
    StaleGitLockError,
)
from workers.merger.gitcmd import Git, classify, clean_env, redact_url
from workers.merger.jobrefs import KEEP_REFS, JobRefs
from workers.merger.objects import ConfigMemo
from workers.merger.orphans import end_processes_in
from workers.merger.repo import Repo, Upkeep

T = TypeVar("T")

log = logging.getLogger(__name__)

_CONNECTION_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

# Config of every cache repo. gc runs in the foreground (under our lock)
# instead of racing our ref updates in the background, and only when we ask
# (maintenance.auto off: repo.py, Upkeep); uploadpack lets an executor fetch
# a speculative commit by sha.
_MAINTENANCE_OFF = ("maintenance.auto", "false")
# What git adds is readable by all, whatever the worker's umask (readable_by_all).
_SHARED = ("core.sharedRepository", "0644")
_REPO_CONFIG = (
    ("remote.origin.fetch", "+refs/heads/*:refs/heads/*"),
    ("gc.autoDetach", "false"),
    _MAINTENANCE_OFF,
    ("core.logAllRefUpdates", "false"),
    ("uploadpack.allowAnySHA1InWant", "true"),
)


def encode_project(project: str) -> str:
    """The one path segment a project name maps to (``org/repo`` -> ``org%2Frepo``)."""
    parts = project.split("/")
    if not project or any(part in ("", ".", "..") for part in parts) or "\0" in project:
        raise InvalidJobError(f"invalid project name {project!r}")
    encoded = quote(project, safe="")
    # A leading dot would collide with the cache's own .tmp-/.broken- names.
    return "%2E" + encoded[1:] if encoded.startswith(".") else encoded


class RepoCache:
    """Bare clones of the projects of git connections, shared by a host's workers."""

    def __init__(
        self,
        state_dir: Path,
        connections: Mapping[str, ConnectionSettings],
        *,
        git_timeout: float = 300.0,
        lock_timeout: float = 600.0,
        extra_env: Mapping[str, str] | None = None,
        keep_refs: int = KEEP_REFS,
    ) -> None:
        self.root = Path(state_dir) / "git"
        home = self.root / ".home"
        home.mkdir(parents=True, exist_ok=True)
        self.connections = connections
        self.git = Git(clean_env(home, extra_env), git_timeout)
        self.lock_timeout = lock_timeout
        # Repos this process has checked since it (or anyone) cloned them.
        self._checked: set[Path] = set()
        # Per repo: (base, commit) -> files the commit changes, and a
        # tree's config entries -> its config files (see Repo).
        self._files_memo: dict[Path, dict[tuple[str, str], list[str]]] = {}
        self._config_memo: dict[Path, ConfigMemo] = {}
        # Per repo: the jobs whose refs it keeps (the last ones, ``keep_refs`` refs).
        self.keep_refs = keep_refs
        self._job_refs: dict[Path, JobRefs] = {}
        self._upkeep: dict[Path, Upkeep] = {}

    @classmethod
    def from_settings(cls, settings: Settings, **options: Any) -> RepoCache:
        """The cache of this host: ``<state_dir>/git`` with the configured connections."""
        return cls(settings.state_dir, settings.connections, **options)

    # ------------------------------------------------------------------
    # Names

    def remote_url(self, connection: str, project: str) -> str:
        """Where ``project`` of a git connection lives: ``<baseurl>/<project>``."""
        settings = self.connections.get(connection)
        if settings is None:
            raise InvalidJobError(f"unknown connection {connection!r}")
        if not settings.baseurl:
            raise InvalidJobError(f"connection {connection!r} has no baseurl")
        encode_project(project)
        return settings.project_url(project)

    def repo_path(self, connection: str, project: str) -> Path:
        if not _CONNECTION_NAME.match(connection):
            raise InvalidJobError(f"invalid connection name {connection!r}")
        return self.root / connection / encode_project(project)

    # ------------------------------------------------------------------
    # Access

    @contextmanager
    def open(self, connection: str, project: str) -> Iterator[Repo]:
        """The project's repo, cloned and checked, locked for the block.

        A :class:`CorruptRepoError` raised in the block discards the repo
        (the next open re-clones) and propagates.
        """
        url = self.remote_url(connection, project)
        path = self.repo_path(connection, project)
        path.parent.mkdir(parents=True, exist_ok=True)
        label = f"{connection}/{project}"
        # a private GitHub repository: its token for the git processes that reach the remote
        git = self.git.with_env(
            **forges.installed().git_env(self.connections.get(connection), project, self.git.env)
        )
        with self._locked(path, label):
            self._ensure(path, url, label, git)
            repo = Repo(
                path,
                git,
                label,
                files_memo=self._files_memo.setdefault(path, {}),
                config_memo=self._config_memo.setdefault(path, {}),
                job_refs=self._job_refs.setdefault(path, JobRefs(path, self.keep_refs)),
                upkeep=self._upkeep.setdefault(path, Upkeep()),
            )
            try:
                yield repo
            except CorruptRepoError:
                repo.close()
                self._discard(path)
                raise
            finally:
                repo.park()  # its git processes, for this process's next use (parking.py)
                repo.job_refs.release()

    def run(self, connection: str, project: str, work: Callable[[Repo], T]) -> T:
        """``work(repo)`` under the lock, repaired and retried once if need be.

        Corruption: the repo was discarded, the retry clones it afresh. A
        stale git lock file (a git process killed mid-update): we hold the
        repo lock, so no git process of ours is running in it; the lock
        files are removed and the work retried.
        """
        try:
            with self.open(connection, project) as repo:
                return work(repo)
        except CorruptRepoError as exc:
            log.warning(
                "%s/%s: corrupt repo discarded, cloning again: %s", connection, project, exc
            )
        except StaleGitLockError as exc:
            with self.open(connection, project) as repo:
                removed = repo.remove_stale_git_locks()
            log.warning(
                "%s/%s: removed %d stale git lock files: %s", connection, project, removed, exc
            )
        with self.open(connection, project) as repo:
            return work(repo)

    # ------------------------------------------------------------------
    # Locking

    @contextmanager
    def _locked(self, path: Path, label: str) -> Iterator[None]:
        """The repo's lock for the block; the holder's pid is in the lock file meanwhile.

        A pid found there on taking the lock is that of a holder killed
        with it: its git processes may still be working in the repo, its
        worktree or a clone's temporary folder, and are ended first
        (:mod:`.orphans`), so the sweep of that folder is final.
        """
        lock_path = path.with_name(path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, label)
            if _note_holder(fd, f"{os.getpid()}\n".encode(), label):
                end_processes_in((path, Repo.worktree_path(path), *_leftovers(path)), label)
            try:
                yield
            finally:
                _note_holder(fd, b"", label)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _acquire(self, fd: int, label: str) -> None:
        polls = RetryPolicy(max_tries=None, delay=0.002, max_delay=0.05, deadline=self.lock_timeout)
        for _ in polls.tries():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                continue
        raise RepoLockTimeoutError(f"{label}: repo lock still held after {self.lock_timeout}s")

    # ------------------------------------------------------------------
    # Clone, check, discard (all under the repo lock)

    def _ensure(self, path: Path, url: str, label: str, git: Git) -> None:
        self._sweep_leftovers(path)
        if path in self._checked and path.is_dir():
            return
        if path.exists():
            if self._is_sound(path):
                # a repo cloned by an older version still runs git's auto maintenance
                self.git.run(["config", *_MAINTENANCE_OFF], path)
                if self.git.run(["config", _SHARED[0]], path, check=False).returncode:
                    self.git.run(["config", *_SHARED], path)  # and was private to its user
                    readable_by_all(path)
                self._checked.add(path)
                return
            self._discard(path)
        self._clone(path, url, label, git)
        self._checked.add(path)

    def _sweep_leftovers(self, path: Path) -> None:
        """Delete clones that a killed process left half-done (we hold the lock).

        A killed clone's git, which may still be filling its folder, was
        ended when the lock was taken (:meth:`_locked`).
        """
        for leftover in _leftovers(path):
            shutil.rmtree(leftover, ignore_errors=True)

    def _is_sound(self, path: Path) -> bool:
        """A cheap fsck: a bare repo whose every ref points at an existing object."""
        try:
            if self.git.text(["rev-parse", "--is-bare-repository"], path) != "true":
                return False
            shas = self.git.run(["for-each-ref", "--format=%(objectname)"], path).stdout
            if not shas.strip():
                return True
            check = self.git.run(["cat-file", "--batch-check"], path, stdin=shas).stdout
        except GitCommandError:
            return False
        return b" missing" not in check

    def _clone(self, path: Path, url: str, label: str, git: Git) -> None:
        tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        log.info("%s: cloning %s", label, redact_url(url))
        started = time.monotonic()
        try:
            # --no-local: a local remote is cloned through the pack protocol
            # like any other, so its objects are checked on the way in and
            # the cache shares no object files with it. git runs in the
            # folder it fills, so a killed worker's clone is found there.
            tmp.mkdir()
            shared = "=".join(_SHARED)
            git.run(["clone", "-c", shared, "--bare", "--quiet", "--no-local", "--", url, "."], tmp)
            readable_by_all(tmp)  # what git wrote before it read its config
            for key, value in _REPO_CONFIG:
                self.git.run(["config", key, value], tmp)
            self.git.run(
                ["config", "--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*"], tmp
            )
            if not self._is_sound(tmp):
                raise CorruptRepoError(f"{label}: clone of {redact_url(url)} is incomplete")
            os.rename(tmp, path)
            log.info("%s: cloned in %.2fs", label, time.monotonic() - started)
        except GitCommandError as exc:
            raise classify(exc, f"{label}: clone of {redact_url(url)}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _discard(self, path: Path) -> None:
        """Move a broken repo (and its worktree) aside, then delete it."""
        self._checked.discard(path)
        log.warning("%s: discarding a broken repo", path)
        aside = path.with_name(f".broken-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        if path.exists():
            os.rename(path, aside)
        shutil.rmtree(aside, ignore_errors=True)
        shutil.rmtree(Repo.worktree_path(path), ignore_errors=True)


def readable_by_all(top: Path) -> None:
    """``top`` (a file or a folder and all in it) readable by all: folders passable,
    executables runnable. Never a link followed; a missing ``top`` is nothing to do.

    A sandboxed job is a user of its own: it reads its projects' objects
    through its checkout's alternates, and the executor's files made for it
    (workers/executor/sandbox.py); the state dir above keeps others out.
    """
    try:
        info = os.lstat(top)
    except FileNotFoundError:
        return
    paths = [str(top)]
    if stat.S_ISDIR(info.st_mode):
        paths += [os.path.join(f, n) for f, dirs, files in os.walk(top) for n in (*dirs, *files)]
    for path in paths:
        mode = os.lstat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            continue
        wanted = mode | (0o555 if stat.S_ISDIR(mode) or mode & 0o100 else 0o444)
        if wanted != mode:
            os.chmod(path, wanted)


def _note_holder(fd: int, holder: bytes, label: str) -> bool:
    """Write ``holder`` (a pid, or nothing on release) into a held lock file.

    True if the file named a holder already: the last one died with the
    lock. The note is bookkeeping: a lock file that cannot be read or
    written (a full disk) is logged, and the lock holds all the same.
    """
    try:
        died = bool(os.pread(fd, 32, 0).strip())
        os.ftruncate(fd, 0)
        if holder:
            os.pwrite(fd, holder, 0)
    except OSError as exc:
        log.warning("%s: repo lock file not updated: %s", label, exc)
        return False
    return died


def _leftovers(path: Path) -> list[Path]:
    """The folders a killed process left beside the repo: a clone, a repo set aside."""
    return [
        leftover
        for prefix in (".tmp-", ".broken-")
        for leftover in path.parent.glob(f"{prefix}{path.name}-*")
    ]
