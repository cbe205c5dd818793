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


def start(
    argv: list[str] | list[bytes], env: Environment, joined: tuple[int, int] = (-1, -1)
) -> int | None:
    """Start ``argv`` with no signal blocked; its pid, None when it cannot be executed.

    ``posix_spawn`` (a vfork, not a copy of this process) is enough: every
    handler is already back to its default (:func:`default_signals`), so
    only the blocked signals need undoing in the child. A command that
    begins with :data:`SANDBOX` is prepared first (:func:`enter_sandbox`),
    in the build's namespaces ``joined`` (user, network; -1: none).
    """
    userns = -1
    try:
        if argv and os.fsdecode(argv[0]) == SANDBOX:
            argv, userns = enter_sandbox([os.fsdecode(word) for word in argv[1:]], joined)
        return os.posix_spawn(argv[0], argv, env, setsigmask=())
    except OSError as exc:
        program = os.fsdecode(argv[0])
        os.write(2, f"sluice: cannot execute {program}: {exc.strerror or exc}\n".encode())
        return None
    finally:
        if userns >= 0:
            os.close(userns)  # bubblewrap holds it now


# -- the sandbox directive ------------------------------------------------------
#
# The runner starts a sandboxed step as ``SANDBOX LIMITS bwrap ARG...``
# (workers/executor/sandbox.py). LIMITS is ``name=value`` pairs joined by
# commas: ``userns=INSIDE:OUTSIDE`` asks for a user namespace made here in
# which the job's uid and gid INSIDE are OUTSIDE on the host (a root
# reaper may map any host uid; bubblewrap would map only its own, root);
# ``nproc``, ``as``, ``fsize``, ``nofile`` and ``core`` are resource limits
# set on this process, which the job inherits. USERNS_FD in bwrap's argv
# becomes the namespace's file descriptor.
#
# A step of a build whose namespaces were made once (:func:`user_namespace`
# in the zygote, for the build's untrusted steps) is given them: the user
# namespace given replaces the one USERNS asks for, and a network namespace
# given is joined here (bwrap keeps it); UNSHARE_NET in bwrap's argv becomes
# ``--unshare-net`` when none was given (a network namespace of the step's own).
#
# bubblewrap resolves the sources of its binds as the job's user, who may
# not pass through the folders above them (a state dir is 0700). So
# ``STAGED_BIND SRC DEST`` (and STAGED_RO_BIND) in bwrap's argv is bound
# here first, in a mount namespace of this reaper's own, under STAGE (a
# tmpfs any user may pass through), and becomes ``--bind STAGE/N DEST``.

SANDBOX = "sluice-sandbox"
USERNS_FD = "sluice-userns-fd"
UNSHARE_NET = "--sluice-unshare-net"
STAGED_BIND = "--sluice-staged-bind"
STAGED_RO_BIND = "--sluice-staged-ro-bind"
STAGE = "/run/sluice-sandbox"
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS, IFF_UP = 0x8914, 1
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
RLIMITS = {"nproc": 6, "as": 9, "fsize": 1, "nofile": 7, "core": 4}  # RLIMIT_* numbers


def enter_sandbox(words: list[str], joined: tuple[int, int] = (-1, -1)) -> tuple[list[str], int]:
    """The command after the directive, and the user namespace's fd (-1: none).

    ``joined`` are the build's user and network namespaces (-1: none given).
    """
    limits, command = words[0], words[1:]
    userns, netns = joined
    for pair in filter(None, limits.split(",")):
        name, _, value = pair.partition("=")
        if name == "userns":
            if userns < 0:
                inside, _, outside = value.partition(":")
                userns = user_namespace(int(inside), int(outside))[0]
        elif name in RLIMITS:
            import resource  # a C module; only sandboxed steps need it

            resource.setrlimit(RLIMITS[name], (int(value), int(value)))
        else:
            raise OSError(f"unknown sandbox directive {name!r}")
    if netns >= 0 and _libc("setns", netns, CLONE_NEWNET) != 0:
        raise OSError("cannot join the build's network namespace")
    if userns >= 0:
        os.set_inheritable(userns, True)
        command = [str(userns) if word == USERNS_FD else word for word in command]
    if UNSHARE_NET in command:
        command.remove(UNSHARE_NET)
        if netns < 0:
            command.insert(command.index("--"), "--unshare-net")
    if STAGED_BIND in command or STAGED_RO_BIND in command:
        command = stage(command)
    return command, userns


def stage(command: list[str]) -> list[str]:
    """bwrap's argv with each staged bind's source bound under :data:`STAGE` first."""
    if _libc("unshare", CLONE_NEWNS) != 0:
        raise OSError("cannot make the reaper's own mount namespace")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing of ours reaches the host
    os.makedirs(STAGE, mode=0o755, exist_ok=True)
    _mount(b"tmpfs", STAGE, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=64k")
    staged: list[str] = []
    words = iter(command)
    for word in words:
        if word not in (STAGED_BIND, STAGED_RO_BIND):
            staged.append(word)
            continue
        source, dest = next(words), next(words)
        target = f"{STAGE}/{len(staged)}"
        if os.path.isdir(source):
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(source, target, None, MS_BIND | MS_REC)
        staged += ["--bind" if word == STAGED_BIND else "--ro-bind", target, dest]
    return staged


def _mount(
    source: str | bytes | None,
    target: str,
    kind: bytes | None,
    flags: int,
    data: bytes | None = None,
) -> None:
    encoded = os.fsencode(source) if source is not None else None
    if _libc("mount", encoded, os.fsencode(target), kind, flags, data) != 0:
        raise OSError(f"cannot bind {os.fsdecode(source or b'none')} for the sandbox")


def user_namespace(inside: int, outside: int, *, network: bool = False) -> tuple[int, int]:
    """A new user namespace where ``inside`` is host uid and gid ``outside``; its fd.

    A child makes the namespace (``unshare``), we write its maps (root may
    map any host id), the child then forbids user namespaces below it
    (``user.max_user_namespaces`` 0: a job cannot become root of a nested
    one) and exits; the open fd keeps the namespace for ``bwrap --userns``.
    With ``network``, the child also makes a network namespace of that user
    namespace's, with its loopback up and nothing else: the second fd
    (-1 without).
    """
    ready_read, ready_write = os.pipe()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (a child; its exit code says how it went)
        code = 1
        try:
            os.close(ready_read)
            os.close(go_write)
            if _libc("unshare", CLONE_NEWUSER | (CLONE_NEWNET if network else 0)) == 0:
                os.write(ready_write, b"u")
                code = 2
                if os.read(go_read, 1) == b"g":
                    with open("/proc/sys/user/max_user_namespaces", "w") as handle:
                        handle.write("0")
                    code = 3
                    if network:
                        _loopback_up()
                    code = 0
        finally:
            os._exit(code)
    os.close(ready_write)
    os.close(go_read)
    fds: list[int] = []
    try:
        if os.read(ready_read, 1) != b"u":
            raise OSError("the kernel gives no user namespace (user.max_user_namespaces)")
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}", "w") as handle:
                handle.write(f"{inside} {outside} 1\n")
        fds.append(os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC))
        if network:
            fds.append(os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        os.write(go_write, b"g")
    finally:
        os.close(ready_read)
        os.close(go_write)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            for fd in fds:
                os.close(fd)
    if status != 0:
        raise OSError(f"the job's user namespace could not be closed to nesting ({status})")
    return fds[0], fds[1] if network else -1


def _loopback_up() -> None:
    """Bring up ``lo`` in this process's (new) network namespace (the kernel adds its addresses)."""
    import _socket  # C modules; only the maker of a network namespace needs them
    import fcntl

    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        request = b"lo".ljust(16, b"\0") + IFF_UP.to_bytes(2, sys.byteorder)
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, request.ljust(40, b"\0"))
    finally:
        sock.close()


def _libc(name: str, *args: int | bytes | None) -> int:
    program = _ctypes.dlopen(None)  # type: ignore[arg-type]
    return int(_ctypes.call_function(_ctypes.dlsym(program, name), args))


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
    grace: float,
    parent: int,
    status_fd: int,
    argv: list[str] | list[bytes],
    env: Environment,
    *,
    joined: tuple[int, int] = (-1, -1),
) -> int:
    """Be the reaper of ``argv`` (run with ``env``) until its tree is gone; our exit code.

    ``parent`` is the process this one must die with (the runner, or the
    zygote that forked it); the status line goes to ``status_fd``;
    ``joined`` are the build's namespaces a sandboxed step runs in.
    """
    os.set_inheritable(status_fd, False)  # the job must not write our status
    default_signals()  # a signal ignored by the worker would be lost to sigtimedwait
    signal.pthread_sigmask(signal.SIG_BLOCK, WAKE_SIGNALS)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before PDEATHSIG was set
        return 128 + signal.SIGTERM
    code, status = supervise(start(argv, env, joined), grace)
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
