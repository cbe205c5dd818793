"""The git processes of a killed merger, found and ended before its repo is used again.

A worker process killed with ``kill -9`` (or by the OOM killer) loses its
repo lock at once (a ``flock`` dies with its holder) but not its git
children: they are re-parented and go on, a fetch writing refs and packs
into the repo that the next holder of the lock is now working in, a clone
filling a temporary folder that the next holder sweeps. Two gits in one
repo race for its ref locks; and :meth:`RepoCache.run` removes git lock
files on the premise that no git of ours runs in the repo while we hold
its lock.

So every holder of a repo lock writes its pid into the lock file and
clears it when it lets go (:meth:`RepoCache._locked`): a pid found there
by the next holder means the last one died holding the lock, and the next
holder ends every process working in the repo, its worktree or a killed
clone's temporary folder before it touches them.
"Working in" is the process's working directory: git runs every command
in its repo (the merger starts each one there, a clone in its temporary
folder), and the processes git starts inherit it.

Nothing else works in a cache repo: its folder is the merger's own, and
every git the merger starts runs under the repo's lock. A process that
ignores SIGKILL cannot exist; a zombie (a re-parented process whose new
parent has not reaped it yet) counts as ended.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

PROC = Path("/proc")
# How long the processes have to go after SIGKILL (they are gone in
# milliseconds; a process in uninterruptible sleep on a hung disk is not).
WAIT_SECONDS = 10.0


def working_in(folders: Sequence[Path]) -> list[int]:
    """The pids of the processes (other than this one) working in one of ``folders``."""
    wanted = [Path(os.path.realpath(folder)) for folder in folders]
    found = []
    try:
        entries = list(PROC.iterdir())
    except OSError as exc:  # no /proc: nothing can be found, and nothing is ended
        log.warning("cannot list processes in %s: %s", PROC, exc)
        return []
    for entry in entries:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:  # gone, or a kernel thread
            continue
        if any(cwd == folder or folder in cwd.parents for folder in wanted):
            found.append(int(entry.name))
    return found


def end_processes_in(folders: Sequence[Path], label: str) -> list[int]:
    """SIGKILL every process working in ``folders`` and wait for them to go; their pids."""
    pids = working_in(folders)
    if not pids:
        return []
    log.warning(
        "%s: ending %d process(es) a killed worker left working in %s: %s",
        label,
        len(pids),
        ", ".join(str(folder) for folder in folders),
        " ".join(str(pid) for pid in pids),
    )
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECONDS
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            log.error("%s: processes %s outlived SIGKILL by %.0fs", label, pids, WAIT_SECONDS)
            break
        time.sleep(0.01)
    return pids


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: it only waits to be reaped)."""
    try:
        stat = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return False
    # the state follows the command name, which is in parentheses and may hold any byte
    state = stat[stat.rindex(b")") + 2 :][:1]
    return state != b"Z"
