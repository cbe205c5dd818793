"""The step fork server (zygote): forks the reaper of every step of one runner.

Starting the reaper as an interpreter of its own (``python -I -S
reaper.py``) costs ~9 ms of CPU a step. This small program is started once
per executor process instead (:mod:`workers.executor.forkserver`), as
``python -I -S zygote.py PARENT_PID SOCKET_FD``, and forks a copy of itself
for each step, which becomes exactly the reaper that ``reaper.py`` would
have been (:func:`reaper.run`: subreaper, parent-death signal, tree kill,
status line). Like ``reaper.py`` it imports only C modules and that file,
never Sluice or Celery, so a fork copies a small, idle process.

Protocol, on the stream socket SOCKET_FD (its other end is the runner's;
one request at a time):

* once started: ``ready``;
* a request: a 4-byte big-endian length, then NUL-separated fields
  ``GRACE``, ``ARGC``, the ``ARGC`` words of the command, then the
  environment as ``NAME=VALUE`` entries; with its first byte, three file
  descriptors (``SCM_RIGHTS``): the write end of the step's output pipe,
  the write end of its status pipe and its working directory (``O_PATH``),
  and, for a step that runs in its build's namespaces, those (user, then
  network if the build has one of its own) for the reaper to join;
* the reply: ``pid N`` (the reaper's pid) or ``error TEXT`` (nothing was
  started). Lines end with a newline;
* or a build's namespaces: the fields ``namespaces``, ``INSIDE``,
  ``OUTSIDE``, ``NETWORK`` (``1``: a network namespace too), no
  descriptor; the reply ``namespaces`` with their descriptors
  (:func:`reaper.user_namespace`), or ``error TEXT``.

The zygote itself runs with an empty environment (each request brings its
step's) in ``/``. The reaper writes its status line (``exit N``, ``signal N``, ``stopped N``)
to the status pipe as it does when started directly. When the zygote reaps
it, it adds how the reaper itself ended (``reaper exit N`` or ``reaper
signal N``) and closes its copy of that pipe: end of file on the status
pipe means the reaper is gone and reaped. The forked reaper is in a session
of its own, with the given working directory and environment, stdin from
``/dev/null``, stdout and stderr to the output pipe, and no other file of
the zygote's open (another step's status pipe, the socket).

Lifetimes: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` ties the zygote to the
thread that started it (the runner keeps that thread for as long as the
zygote lives) and end of file on the socket ends it too; every reaper it
forked has its own parent-death signal (SIGTERM) tied to the zygote, so a
runner killed with ``kill -9`` still leaves no job processes behind: the
zygote dies, each reaper kills its tree. A zygote that dies on its own
therefore stops the steps it is running, as a killed worker would.
"""

from __future__ import annotations

import _socket
import fcntl  # noqa: F401 (a C module, loaded once here, not by each maker of namespaces)
import os
import resource  # noqa: F401 (a C module, loaded once here rather than by each sandboxed reaper)
import select
import sys

TYPE_CHECKING = False  # mypy takes it as true; ``typing`` is a costly import
if TYPE_CHECKING:
    import signal

    from workers.executor import reaper

    Request = tuple[float, list[bytes], dict[bytes, bytes]]
else:  # the C half of ``signal``; ``reaper`` from this folder (-I leaves it off sys.path)
    import _signal as signal

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import reaper

USAGE = "PARENT_PID SOCKET_FD"
FDS_PER_REQUEST = 3  # output pipe, status pipe, working directory
JOINED_FDS = 2  # at most: the build's user and network namespaces
NAMESPACES = b"namespaces"
CHUNK = 65536


class Zygote:
    """The serving loop: requests on the socket, reaped reapers on SIGCHLD."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.pid = os.getpid()
        self.children: dict[int, int] = {}  # reaper pid -> its status pipe
        self.devnull = _open_devnull()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)

    def serve(self) -> None:
        """Serve until the runner closes its end (or dies: then so do we)."""
        # A Python handler, so that SIGCHLD is written to the wake-up pipe
        signal.signal(signal.SIGCHLD, _ignore)
        signal.set_wakeup_fd(self.wake_write)
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.wake_read, select.POLLIN)
        self.sock.sendall(b"ready\n")
        while True:
            for fd, _ in poller.poll():
                if fd == self.wake_read:
                    self._reap()
                elif not self._serve_one():
                    return

    def _reap(self) -> None:
        try:
            while os.read(self.wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        for pid, status in reaper.reap().items():
            status_fd = self.children.pop(pid, None)
            if status_fd is None:
                continue
            try:  # noqa: SIM105 (contextlib would be one more import)
                os.write(status_fd, f"reaper {reaper.describe(status)[1]}\n".encode())
            except OSError:  # the runner gave up on this step
                pass
            os.close(status_fd)

    def _serve_one(self) -> bool:
        """One request, a step's or a build's namespaces; False when the runner is gone."""
        try:
            data, fds = self._receive()
        except OSError:
            return False
        if not data:
            _close(fds)
            return False
        if data.split(b"\0", 1)[0] == NAMESPACES:
            _close(fds)
            return self._make_namespaces(data)
        return self._fork_step(data, fds)

    def _fork_step(self, data: bytes, fds: list[int]) -> bool:
        """A step's request: fork its reaper and reply; False when the runner is gone."""
        try:
            request = _decode(data)
        except ValueError as exc:
            _close(fds)
            return self._reply(f"error bad request: {exc}")
        if not FDS_PER_REQUEST <= len(fds) <= FDS_PER_REQUEST + JOINED_FDS or -1 in fds:
            _close(fds)
            return self._reply(f"error {len(fds)} file descriptors, not {FDS_PER_REQUEST}")
        output_fd, status_fd, cwd_fd, *joined = fds
        try:
            pid = os.fork()
        except OSError as exc:
            _close(fds)
            return self._reply(f"error fork: {exc.strerror}")
        if pid == 0:
            self._become_reaper(request, output_fd, status_fd, cwd_fd, joined)
        _close([output_fd, cwd_fd, *joined])  # the output pipe must end when the step's tree does
        self.children[pid] = status_fd
        return self._reply(f"pid {pid}")

    def _make_namespaces(self, data: bytes) -> bool:
        """A build's namespaces made, their descriptors sent back; False when the runner is gone."""
        try:
            _, inside, outside, network = data.split(b"\0")
            made = reaper.user_namespace(int(inside), int(outside), network=network == b"1")
        except (OSError, ValueError) as exc:
            return self._reply(f"error namespaces: {exc}")
        fds = [fd for fd in made if fd >= 0]
        payload = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
        try:
            self.sock.sendmsg(
                [NAMESPACES + b"\n"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, payload)]
            )
        except OSError:
            return False
        finally:
            _close(fds)
        return True

    def _receive(self) -> tuple[bytes, list[int]]:
        """A whole request (its length prefix removed), the descriptors sent with it."""
        space = _socket.CMSG_SPACE(4 * (FDS_PER_REQUEST + JOINED_FDS))
        data, ancillary, flags, _ = self.sock.recvmsg(CHUNK, space, _socket.MSG_CMSG_CLOEXEC)
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += [
                    int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True)
                    for i in range(0, usable, 4)
                ]
        if flags & _socket.MSG_CTRUNC:
            fds.append(-1)  # more were sent than expected: the count check refuses it
        while data and (len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big")):
            chunk = self.sock.recv(CHUNK)
            if not chunk:
                return b"", fds
            data += chunk
        return data[4:], fds

    def _reply(self, line: str) -> bool:
        try:
            self.sock.sendall(f"{line}\n".encode())
        except OSError:
            return False
        return True

    def _become_reaper(
        self, request: Request, output_fd: int, status_fd: int, cwd_fd: int, joined: list[int]
    ) -> None:
        """In the forked child: set the step's process up, then be its reaper; never returns."""
        code = 127
        grace, argv, env = request
        try:
            signal.set_wakeup_fd(-1)
            os.setsid()
            os.fchdir(cwd_fd)
            os.dup2(self.devnull, 0)
            os.dup2(output_fd, 1)
            os.dup2(output_fd, 2)
            # Nothing else of the zygote's stays open: not the socket, not the
            # status pipes of the other steps (their end of file would wait for us).
            low = 3
            for fd in sorted({status_fd, *joined}):
                os.closerange(low, fd)
                low = fd + 1
            os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), low + 1))
            userns, netns = (*joined, -1, -1)[:2]
            code = reaper.run(grace, self.pid, status_fd, argv, env, joined=(userns, netns))
        except BaseException as exc:
            try:  # noqa: SIM105 (contextlib would be one more import)
                os.write(2, f"sluice reaper: cannot start the step: {exc}\n".encode())
            except OSError:
                pass
        finally:
            try:
                if sys.stderr is not None:
                    sys.stderr.flush()
            finally:
                os._exit(code)


def _decode(data: bytes) -> Request:
    """A request's fields: the grace, the command, the environment."""
    fields = data.split(b"\0")
    if len(fields) < 3:
        raise ValueError("too few fields")
    grace, argc = float(fields[0]), int(fields[1])
    argv = fields[2 : 2 + argc]
    if argc < 1 or len(argv) != argc:
        raise ValueError(f"argc {argc}")
    env: dict[bytes, bytes] = {}
    for entry in fields[2 + argc :]:
        name, equals, value = entry.partition(b"=")
        if not name or not equals:
            raise ValueError(f"environment entry {entry!r}")
        env[name] = value
    return grace, argv, env


def _open_devnull() -> int:
    """``/dev/null``, opened so that descriptors 0 to 2 are surely open (on it if they were not)."""
    fd = os.open(os.devnull, os.O_RDWR)
    while fd < 3:
        fd = os.open(os.devnull, os.O_RDWR)
    os.set_inheritable(fd, False)
    return fd


def _close(fds: list[int]) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD: the wake-up pipe says it; the serving loop reaps."""


def main(args: list[str]) -> int:
    if len(args) != 2:
        print(f"usage: zygote.py {USAGE}", file=sys.stderr)
        return 2
    parent, socket_fd = int(args[0]), int(args[1])
    reaper._prctl(reaper.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the runner died before PDEATHSIG was set
        return 1
    sock = _socket.socket(fileno=socket_fd)
    os.set_inheritable(socket_fd, False)
    Zygote(sock).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
