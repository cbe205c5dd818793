"""Git processes kept from one lock session of a repo to the next, per worker process.

A merge asks its repo's ``git cat-file`` (:mod:`.catfile`) and writes its
refs through ``git update-ref --stdin`` (:mod:`.reftx`). Each git process
costs the worker 2.5 to 4 ms of CPU to start (fork, exec and git's
start-up), a good share of a no-op merge (``docs/merger.md``). So a worker
process that is done with a repo parks them here when it releases the
repo's lock, and its next merge in the same repo takes them back: in the
steady state (merge after merge of one repo in one process) neither is
started again.

Guarantees:

* **Used under the repo's lock only.** :class:`~workers.merger.repo.Repo`
  takes a process back on its first use under the lock and parks it
  before the lock is released (``RepoCache.open``); a parked process
  waits for its input and holds no git lock.
* **Only a process that still serves the repo at the path** is taken back
  (:meth:`~workers.merger.gitproc.GitProcess.serves`): it runs, it was
  started in this process with the same git environment, the repo folder
  and its ``objects`` folder are the ones it started in (a repo cloned
  again at the path, by the cache's recovery or another worker, is not),
  and none of the packs it may hold open was deleted. Any other is ended
  and the caller starts a new one.
* **Only an idle process is parked:** one that failed, or whose answers
  were not all read (an error in the middle of a question), is ended.
* **Bounded:** one process of each kind per repo, for the
  :data:`PARKED_REPOS` repos used last; the process of the repo used
  least recently is ended first.
* **Per process:** the parkings are :class:`~scheduler.processlocal.ProcessLocal`,
  so a forked child (a Celery pool child) starts with empty ones, and
  :mod:`.gitproc` closes the child's copies of its parent's pipes. The
  worker's shutdown ends every parked process
  (:func:`scheduler.processlocal.close_all`); a process that dies
  without it leaves nothing behind either, since each git exits when its
  input ends, which is when the last holder of the pipe dies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from scheduler.processlocal import ProcessLocal
from workers.merger.gitcmd import Git
from workers.merger.gitproc import GitProcess

if TYPE_CHECKING:
    from workers.merger.catfile import CatFile
    from workers.merger.reftx import RefUpdates

# Repos whose processes a worker process keeps (of each kind). An idle git
# costs a few MB of memory and nothing else.
PARKED_REPOS = 32


class Parkable(Protocol):
    """What is parked: anything that drives one git process."""

    @property
    def process(self) -> GitProcess: ...


P = TypeVar("P", bound=Parkable)


class Parking(Generic[P]):
    """Idle git processes of one kind by repo path, at most ``size``, least recently used first."""

    def __init__(self, size: int = PARKED_REPOS) -> None:
        self.size = size
        self._parked: OrderedDict[Path, P] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, path: Path, git: Git) -> P | None:
        """The process parked for the repo at ``path``, if it still serves it (under its lock)."""
        with self._lock:
            parked = self._parked.pop(path, None)
        if parked is None:
            return None
        if parked.process.serves(git, path):
            return parked
        parked.process.close()
        return None

    def park(self, path: Path, item: P) -> None:
        """Keep ``item`` for the next holder of the repo's lock in this process, if it is idle."""
        if not item.process.idle:
            item.process.close()
            return
        item.process.note_packs()
        with self._lock:
            ended = [self._parked.pop(path)] if path in self._parked else []
            self._parked[path] = item
            while len(self._parked) > self.size:
                ended.append(self._parked.popitem(last=False)[1])
        for old in ended:
            old.process.close()

    def end(self, path: Path) -> None:
        """End the process parked for ``path``, if any."""
        with self._lock:
            parked = self._parked.pop(path, None)
        if parked is not None:
            parked.process.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._parked)

    def close_all(self) -> None:
        """End every parked process (the worker's shutdown)."""
        with self._lock:
            parked, self._parked = list(self._parked.values()), OrderedDict()
        for item in parked:
            item.process.close()


_cat_files: ProcessLocal[str, Parking[CatFile]] = ProcessLocal(
    "parked git cat-file processes", Parking.close_all
)
_ref_updates: ProcessLocal[str, Parking[RefUpdates]] = ProcessLocal(
    "parked git update-ref processes", Parking.close_all
)


def parked_cat_files() -> Parking[CatFile]:
    """This process's parked ``git cat-file`` processes, one per repo path."""
    return _cat_files.get("parking", Parking)


def parked_ref_updates() -> Parking[RefUpdates]:
    """This process's parked ``git update-ref --stdin`` processes, one per repo path."""
    return _ref_updates.get("parking", Parking)


def close_parked() -> None:
    """End every git process parked in this process (tests, measurements)."""
    parked_cat_files().close_all()
    parked_ref_updates().close_all()
