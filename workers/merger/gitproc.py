"""A long-lived git process in one cache repo, driven through its pipes.

Two git commands answer a merge many times over: ``git cat-file
--batch-command`` (:mod:`.catfile`) and ``git update-ref --stdin``
(:mod:`.reftx`). Each runs as one :class:`GitProcess`, which
:mod:`.parking` keeps from one lock session of the repo to the next. This
module is what they share: starting git in the repo, writing requests and
reading answers within the git time limit, ending the process, and
telling whether a process found again still serves the repo at its path.

**Which repo.** The ``(st_dev, st_ino)`` of the repo folder and of its
``objects`` folder, taken just before git starts. The repo folder is
git's working directory, and a process's working directory stays
allocated while the process lives: a repo deleted and cloned again at the
same path (the cache's recovery, or another worker's) is a new folder
that cannot have the same pair while the process runs, so
:meth:`GitProcess.serves` is False for it.

**Packs.** git keeps the packs it has read open, also once a ``gc`` has
deleted them, and their disk space with them. A process notes the repo's
packs when it is parked (:meth:`GitProcess.note_packs`) and serves no
more once one of them is gone.

**Errors.** git that cannot start, exits, or does not read or answer
within the git time limit is killed and reaped, and the caller's error
class (``error``) is raised; the process is not used again.

**Fork.** A forked child must neither use nor end its parent's git: in
the child, every process of the parent is abandoned (its copy of the
pipes closed, so the parent's git still sees its input end when the
parent closes it; never waited for nor killed), and a process refuses
requests from any process but the one that started it.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from workers.merger.errors import MergerError
from workers.merger.gitcmd import Git

_READ_BYTES = 64 * 1024
# How long a closing git may take to exit before it is killed (it only
# has to notice that its input ended).
_CLOSE_GRACE = 5.0
# The end of git's stderr kept for an error message.
_STDERR_KEPT = 16 * 1024


class GitProcessError(MergerError):
    """A long-lived git process failed: it exited, stalled or answered what does not parse."""


@dataclass(frozen=True)
class RepoIdentity:
    """The repo folder and its ``objects`` folder, as ``(st_dev, st_ino)`` pairs."""

    repo: tuple[int, int]
    objects: tuple[int, int]

    @classmethod
    def of(cls, path: Path) -> RepoIdentity | None:
        """The identity of the repo at ``path`` now (None: no bare repo there)."""
        try:
            repo, objects = os.stat(path), os.stat(path / "objects")
        except OSError:
            return None
        return cls((repo.st_dev, repo.st_ino), (objects.st_dev, objects.st_ino))


def pack_files(path: Path) -> frozenset[tuple[str, int]]:
    """The packs of the bare repo at ``path``: file name and inode of each.

    The inode, since a repack of the same objects writes a pack of the
    same name (renamed over the old one, which lives on in the processes
    that hold it open).
    """
    try:
        with os.scandir(path / "objects" / "pack") as entries:
            return frozenset((e.name, e.inode()) for e in entries if e.name.endswith(".pack"))
    except OSError:
        return frozenset()


class GitProcess:
    """A running ``git <args>`` in ``repo``: requests to its stdin, answers from its stdout."""

    def __init__(
        self,
        git: Git,
        repo: Path,
        args: Sequence[str],
        error: type[MergerError],
        *,
        stderr: bool = False,
    ) -> None:
        self.git = git
        self.repo = repo
        self.name = f"git {args[0]}"
        self._error = error
        # Taken before git starts: a repo replaced in between shows as another one.
        self.identity = RepoIdentity.of(repo)
        self.packs = pack_files(repo)
        self._owner = os.getpid()
        self._buffer = bytearray()  # read from git, not yet taken
        self._deadline = 0.0
        self._busy = False  # requests sent whose answers are not all read
        self._stderr_tail = b""  # what git wrote last before it ended
        self.killed = False  # ended by kill() while it ran (not exited by itself)
        try:
            self._proc = git.popen(args, repo, stderr=stderr)
        except OSError as exc:
            raise error(f"cannot start {self.name}: {exc}") from None
        stdin, stdout = self._proc.stdin, self._proc.stdout
        if stdin is None or stdout is None:  # pragma: no cover - Popen was given pipes
            self._proc.kill()
            self._proc.wait()
            raise error(f"{self.name} has no pipes")
        self._stdin_fd = stdin.fileno()
        os.set_blocking(self._stdin_fd, False)  # a write never blocks past the time limit
        self._stdout_fd = stdout.fileno()
        self._stderr_fd: int | None = None
        if self._proc.stderr is not None:
            self._stderr_fd = self._proc.stderr.fileno()
            os.set_blocking(self._stderr_fd, False)
        # poll(), not select(): no limit on descriptor numbers
        self._writable = select.poll()
        self._writable.register(self._stdin_fd, select.POLLOUT)
        self._readable = select.poll()
        self._readable.register(self._stdout_fd, select.POLLIN)
        _running.add(self)

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """git's exit status once it has ended (negative: killed by that signal)."""
        return self._proc.returncode

    # ------------------------------------------------------------------
    # Requests and answers

    def send(self, data: bytes) -> None:
        """Write ``data`` to git; its answers are due within the git time limit from now."""
        if os.getpid() != self._owner:
            raise self._error(f"{self.name} belongs to process {self._owner}")
        self._busy = True
        self._deadline = time.monotonic() + self.git.timeout
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._stdin_fd, view) :]
            except BlockingIOError:
                self._wait(self._writable, "its input not read")
            except OSError as exc:  # a broken pipe: git has exited
                raise self.failed(f"does not read: {exc}") from None

    def read_line(self) -> bytes:
        """The next line of git's answers, without its newline."""
        while (end := self._buffer.find(b"\n")) < 0:
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def read_exact(self, size: int) -> bytes:
        """The next ``size`` bytes of git's answers."""
        while len(self._buffer) < size:
            self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def done(self) -> None:
        """Every answer to what was sent has been read: the process may serve again."""
        if self._buffer:
            raise self.failed(f"answered more than asked: {bytes(self._buffer[:200])!r}")
        self._busy = False

    def failed(self, message: str) -> MergerError:
        """Kill the process; the error to raise."""
        self.kill()
        return self._error(f"{self.name}: {message}")

    def drain_stderr(self) -> None:
        """Drop what git wrote to stderr so far (so an error shows only its own message)."""
        self._stderr_tail = b""
        self._read_stderr()

    def stderr_text(self) -> str:
        """The end of what git wrote to stderr since the last drain (all of it once git ended)."""
        return (self._stderr_tail + self._read_stderr()).decode("utf-8", "replace")

    # ------------------------------------------------------------------
    # Reuse

    @property
    def idle(self) -> bool:
        """Running, in this process, with no request half answered: fit to be parked."""
        return not self._busy and os.getpid() == self._owner and self._proc.poll() is None

    def serves(self, git: Git, repo: Path) -> bool:
        """Whether the process can serve ``repo`` for ``git`` (the same environment) now."""
        return (
            self.idle
            and git == self.git
            and repo == self.repo
            and self.identity is not None
            and RepoIdentity.of(repo) == self.identity
            and self.packs <= pack_files(repo)
        )

    def note_packs(self) -> None:
        """Note the repo's packs as those git may hold open (it is parked now)."""
        self.packs = pack_files(self.repo)

    # ------------------------------------------------------------------
    # The end

    def close(self) -> None:
        """End the process (git exits when its input ends) and reap it."""
        if os.getpid() != self._owner:
            self.abandon()
            return
        if self._proc.returncode is None:
            self._close(self._proc.stdin)
            try:
                self._proc.wait(timeout=_CLOSE_GRACE)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._close_pipes()

    def kill(self) -> None:
        """Kill the process at once and reap it; what it wrote to stderr last is kept."""
        if os.getpid() != self._owner:
            self.abandon()
            return
        if self._proc.poll() is None:
            self.killed = True
            self._proc.kill()
            self._proc.wait()
        self._stderr_tail = (self._stderr_tail + self._read_stderr())[-_STDERR_KEPT:]
        self._close_pipes()

    def abandon(self) -> None:
        """In a forked child: close this copy of the pipes; the process is the parent's."""
        self._close_pipes()

    # ------------------------------------------------------------------

    def _fill(self) -> None:
        self._wait(self._readable, "no answer")
        try:
            data = os.read(self._stdout_fd, _READ_BYTES)
        except OSError as exc:
            raise self.failed(f"cannot read: {exc}") from None
        if not data:
            raise self.failed("exited")
        self._buffer += data

    def _wait(self, poll: select.poll, failure: str) -> None:
        remaining = self._deadline - time.monotonic()
        if remaining <= 0 or not poll.poll(remaining * 1000):
            raise self.failed(f"{failure} within {self.git.timeout}s")

    def _read_stderr(self) -> bytes:
        kept = bytearray()
        while self._stderr_fd is not None:
            try:
                data = os.read(self._stderr_fd, _READ_BYTES)
            except OSError:  # nothing more for now (BlockingIOError), or closed
                break
            if not data:
                break
            kept += data
            del kept[:-_STDERR_KEPT]
        return bytes(kept)

    def _close_pipes(self) -> None:
        for pipe in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            self._close(pipe)
        self._stderr_fd = None

    @staticmethod
    def _close(pipe: IO[bytes] | None) -> None:
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


# Every process of this process's, for the fork below.
_running: weakref.WeakSet[GitProcess] = weakref.WeakSet()
# The parent's processes in a forked child, kept so that their Popen
# objects never try to reap a process that is not this one's child.
_abandoned: list[GitProcess] = []


def _abandon_all() -> None:
    for process in list(_running):
        process.abandon()
        _abandoned.append(process)
    _running.clear()


os.register_at_fork(after_in_child=_abandon_all)
