"""The merger's ref transactions, through one ``git update-ref --stdin`` per repo and process.

Every merge writes its refs, and drops those of old jobs
(:mod:`.jobrefs`), in one transaction. Instead of a ``git update-ref
--stdin`` of its own for each, one process carries them all, each in
git's interactive transaction commands (git 2.27 and later): ``start``,
the ``update`` and ``delete`` lines, ``commit``; git answers ``start: ok``
and ``commit: ok``. A transaction is all or nothing, as the command's
was. Between transactions git holds no lock, only the packs it has read;
:class:`~workers.merger.repo.Repo` parks the process with the repo's lock
(:mod:`.parking`) and takes it back under the lock, after the checks of
:mod:`.gitproc` (the same repo at the path, its packs still there).

What it sees: every ref it locks is read afresh, the packed refs again
when their file changed, and the loose refs it lists (to report a name
conflict) after each commit; objects are read afresh (a new pack is
found when an object seems missing), so the commits of a later fetch or
merge are found.

Errors: git refuses a transaction by exiting with its message (a ref
lock held, a bad value, a missing object). :meth:`RefUpdates.transaction`
then raises :class:`RefTransactionError`, a
:class:`~workers.merger.errors.GitCommandError` with git's stderr and
exit status, which the caller classifies as it did the command's
(:func:`~workers.merger.gitcmd.classify`); a process that does not answer
within the git time limit is killed (status -9, as a command that timed
out). The process is not used again. ``begun`` says whether git may have
begun the transaction: False when git had exited before it acknowledged
the ``start``, so it did nothing and the transaction may be sent again
to a new process.
"""

from __future__ import annotations

from pathlib import Path

from workers.merger.errors import GitCommandError
from workers.merger.gitcmd import Git
from workers.merger.gitproc import GitProcess, GitProcessError

COMMAND = ("update-ref", "--stdin")


class RefTransactionError(GitCommandError):
    """git refused a ref transaction, or its process failed; ``begun``: it started it."""

    def __init__(self, returncode: int, stderr: str, begun: bool) -> None:
        super().__init__(list(COMMAND), returncode, stderr)
        self.begun = begun


class RefUpdates:
    """A running ``git update-ref --stdin`` in ``repo``, a transaction at a time."""

    def __init__(self, git: Git, repo: Path) -> None:
        self.process = GitProcess(git, repo, COMMAND, GitProcessError, stderr=True)
        self.transactions = 0  # carried out by this process

    def transaction(self, lines: str) -> None:
        """Carry out ``lines`` (``update``/``delete`` lines, each ending in a newline) at once."""
        if not lines:
            return
        begun = False
        try:
            self.process.drain_stderr()
            self.process.send(f"start\n{lines}commit\n".encode())
            self._expect(b"start: ok")
            begun = True
            self._expect(b"commit: ok")
            self.process.done()
        except GitProcessError as exc:
            status = self.process.returncode
            stderr = self.process.stderr_text().strip() or str(exc)
            # killed while it ran (no answer in time), git may have begun all the same
            begun = begun or self.process.killed
            raise RefTransactionError(-1 if status is None else status, stderr, begun) from None
        self.transactions += 1

    def close(self) -> None:
        """End the process (it exits when its input ends) and reap it."""
        self.process.close()

    def _expect(self, answer: bytes) -> None:
        line = self.process.read_line()
        if line != answer:
            raise self.process.failed(f"answered {line[:200]!r} instead of {answer!r}")
