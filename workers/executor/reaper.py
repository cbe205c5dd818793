"""The supervisor of one job step: it keeps the step's whole process tree.

The runner runs every executable of a job under this small program, in a
session of its own, in one of two ways:

* forked by the runner's zygote (``zygote.py``, the usual way), which calls
  :func:`run` in the forked child, its parent (PARENT_PID) the zygote;
* started as ``python -I -S reaper.py GRACE PARENT_PID STATUS_FD --
  EXECUTABLE`` when the zygote fails, and for the SSH agent of a build; its
  parent is then the runner.

It is a script with no imports beyond the standard library so it starts in
a few milliseconds (and forks a small process) and never loads Sluice (or
Celery) into the job's tree.

How it keeps the tree (no cgroups needed):

* It marks itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``):
  a descendant orphaned by its parent (a daemon that double-forks, or
  ``setsid``s into a session of its own, which ``killpg`` would miss) is
  re-parented to the reaper instead of to init. Every process the step
  started is therefore still a descendant of the reaper, found by walking
  ``/proc/*/stat`` parent links.
* When the executable exits, whatever it left behind is terminated: SIGTERM
  to every descendant, SIGKILL after GRACE seconds to whatever is left,
  repeated until the tree is empty. Then the reaper writes how the
  executable ended (``exit N`` or ``signal N``) to STATUS_FD, a pipe of the
  runner's that the job cannot write to (an ``exit 137`` stays an exit
  code), and exits, which closes the last write end of the output pipe.
* On SIGTERM, SIGINT or SIGHUP (the runner's timeout or cancel) it does the
  same at once and reports ``stopped N``.
* ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` makes the death of its parent (the
  zygote, which dies with its worker, or the runner) a SIGTERM here, so a
  worker killed with ``kill -9`` leaves no job processes behind either.

Limits: a process that forks faster than it can be killed could outlast a
few rounds (the reaper gives up after 10 s and says so on stderr); a
process that changes user or enters another PID namespace is out of reach
(there is no sandbox yet).

Cost: it runs once per step (started directly, an interpreter's start;
forked, a copy of the zygote), so it is kept to what a bare interpreter
loads. The tree is walked from the reaper down through
``/proc/<pid>/task/<tid>/children`` (a few reads; the whole of ``/proc``
is read only on a kernel without that file). ``_signal`` and ``_ctypes``
are the C halves of ``signal`` and ``ctypes``: their Python halves
(``enum``, ``struct``, ...) would double the start-up (~5 ms of CPU).
"""

from __future__ import annotations

import _ctypes
import os
import sys
import time

TYPE_CHECKING = False  # mypy takes it as true; ``typing`` is a costly import
if TYPE_CHECKING:
    import signal
    from collections.abc import Mapping

    Environment = Mapping[str, str] | Mapping[bytes, bytes]
else:  # the same functions and numbers, without the enums of ``signal``
    import _signal as signal

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
WAKE_SIGNALS = {*STOP_SIGNALS, signal.SIGCHLD}
GIVE_UP_AFTER = 10.0
USAGE = "GRACE PARENT_PID STATUS_FD -- EXECUTABLE [ARG...]"


def _prctl(option: int, value: int) -> None:
    # prctl(2) through the C half of ctypes (the CDLL wrapper costs ~1.5 ms to import)
    program = _ctypes.dlopen(None)  # type: ignore[arg-type]  # dlopen(NULL): libc is in it
    prctl = _ctypes.dlsym(program, "prctl")
    if _ctypes.call_function(prctl, (option, value, 0, 0, 0)) != 0:
        raise OSError(f"prctl({option}, {value}) failed")


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid``; [] when it is gone."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found: list[int] = []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found += [int(child) for child in handle.read().split()]
        except OSError:
            continue
    return found


def descendants(root: int) -> set[int]:
    """Live (non-zombie) descendants of ``root`` and members of its process group.

    While ``root`` (the reaper: a session leader and child subreaper) lives,
    every member of its group is one of its descendants, so walking down
    from it finds them all; the whole of ``/proc`` is read only where the
    kernel has no ``children`` files (``CONFIG_PROC_CHILDREN``).
    """
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return _scanned_descendants(root)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in _children(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if (_stat(pid) or [b"X"])[0] not in (b"Z", b"X")}


def _scanned_descendants(root: int) -> set[int]:
    """:func:`descendants` from every process's ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    group: set[int] = set()
    alive: set[int] = set()
    pgid = os.getpgid(root)
    for entry in os.listdir("/proc"):
        fields = _stat(int(entry)) if entry.isdigit() else None
        if fields is None:
            continue
        pid, state, ppid, pgrp = int(entry), fields[0], int(fields[1]), int(fields[2])
        children.setdefault(ppid, []).append(pid)
        if state not in (b"Z", b"X"):
            alive.add(pid)
        if pgrp == pgid:
            group.add(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return (found | group) & alive - {root}


def reap() -> dict[int, int]:
    """Collect every exited child without blocking: ``{pid: wait status}``."""
    statuses: dict[int, int] = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return statuses
        if pid == 0:
            return statuses
        statuses[pid] = status


def kill_tree(grace: float) -> None:
    """SIGTERM every descendant, SIGKILL the rest after ``grace`` seconds, until none."""
    me = os.getpid()
    deadline = time.monotonic() + grace
    give_up = deadline + GIVE_UP_AFTER
    sig = signal.SIGTERM
    signalled: set[int] = set()
    while True:
        reap()
        pids = descendants(me)
        if not pids:
            # A child that died since the reap above is a zombie, which
            # descendants() leaves out: reaped here, not left to init. (Under
            # bubblewrap with --unshare-pid, the namespace's pid 1 exits just
            # after bwrap's monitor, so this is one step in four.)
            reap()
            return
        now = time.monotonic()
        if now >= deadline:
            sig = signal.SIGKILL
        if now >= give_up:
            print(f"sluice reaper: processes survive SIGKILL: {sorted(pids)}", file=sys.stderr)
            return
        for pid in pids if sig == signal.SIGKILL else pids - signalled:
            try:  # noqa: SIM105 (contextlib would be one more import per step)
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            signalled.add(pid)
        time.sleep(0.02)


def describe(status: int) -> tuple[int, str]:
    """The reaper's exit code for a wait status, and the status line for the runner."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status), f"signal {os.WTERMSIG(status)}"
    code = os.waitstatus_to_exitcode(status)
    return code, f"exit {code}"


def default_signals() -> None:
    """Every signal back to its default action.

    An ignored signal stays ignored across ``exec``: without this a job
    would inherit Python's ignored SIGPIPE (``yes | head`` would never end)
    and whatever its worker process chose to ignore.
    """
    for sig in signal.valid_signals():
        try:  # noqa: SIM105 (contextlib would be one more import per step)
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


def start(argv: list[str] | list[bytes], env: Environment) -> int | None:
    """Start ``argv`` with no signal blocked; its pid, None when it cannot be executed.

    ``posix_spawn`` (a vfork, not a copy of this process) is enough: every
    handler is already back to its default (:func:`default_signals`), so
    only the blocked signals need undoing in the child.
    """
    try:
        return os.posix_spawn(argv[0], argv, env, setsigmask=())
    except OSError as exc:
        program = os.fsdecode(argv[0])
        os.write(2, f"sluice: cannot execute {program}: {exc.strerror}\n".encode())
        return None


def supervise(main_pid: int | None, grace: float) -> tuple[int, str]:
    """Wait for the executable or a stop signal; clean up the tree; how it ended."""
    if main_pid is None:
        return 127, "exit 127"  # as a shell says a command cannot be run
    while True:
        info = signal.sigtimedwait(WAKE_SIGNALS, 1.0)
        if info is not None and info.si_signo in STOP_SIGNALS:
            kill_tree(grace)
            return 128 + info.si_signo, f"stopped {info.si_signo}"
        status = reap().get(main_pid)
        if status is not None:
            kill_tree(grace)
            return describe(status)


def run(
    grace: float, parent: int, status_fd: int, argv: list[str] | list[bytes], env: Environment
) -> int:
    """Be the reaper of ``argv`` (run with ``env``) until its tree is gone; our exit code.

    ``parent`` is the process this one must die with (the runner, or the
    zygote that forked it); the status line goes to ``status_fd``.
    """
    os.set_inheritable(status_fd, False)  # the job must not write our status
    default_signals()  # a signal ignored by the worker would be lost to sigtimedwait
    signal.pthread_sigmask(signal.SIG_BLOCK, WAKE_SIGNALS)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before PDEATHSIG was set
        return 128 + signal.SIGTERM
    code, status = supervise(start(argv, env), grace)
    try:  # noqa: SIM105 (contextlib would be one more import per step)
        os.write(status_fd, f"{status}\n".encode())
    except OSError:
        pass
    return code


def main(args: list[str]) -> int:
    if len(args) < 5 or args[3] != "--":
        print(f"usage: reaper.py {USAGE}", file=sys.stderr)
        return 2
    grace, parent, status_fd = float(args[0]), int(args[1]), int(args[2])
    return run(grace, parent, status_fd, args[4:], os.environ)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
