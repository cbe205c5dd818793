"""One step fork server (``zygote.py``) per executor process, started on first use.

:func:`fork_reaper` asks this process's zygote to fork the reaper of one
step, instead of starting ``python -I -S reaper.py`` for it (~9 ms of CPU
a step). The zygote belongs to the process that started it: it is kept in a
:class:`~scheduler.processlocal.ProcessLocal` (forgotten in a child after
``fork()``: a Celery prefork pool child forks from its parent) and checked
against ``os.getpid()``, so a forked child starts its own on first use; a
worker's shutdown closes it (``close_all``).

Lifetimes. The zygote gets ``PR_SET_PDEATHSIG``, which the kernel ties to
the *thread* that started it; so it is started from a thread of its own
that lives exactly as long as the zygote (it waits for it and reaps it),
whatever thread asks for steps and however long that one lives. Its reapers
die with it (their own parent-death signal) and kill their trees: a worker
killed with ``kill -9`` leaves no job processes behind.

Failures. A zygote that cannot be started, dies, hangs past
:data:`REPLY_TIMEOUT` or cannot fork raises :class:`ZygoteError`; the
zygote is then stopped and forgotten, and the caller starts that step's
reaper directly (:mod:`workers.executor.process`). The next step starts a
new zygote. The first failure of a process is logged as a warning, later
ones at debug level. Requests from several threads are served one at a time
(a lock around the socket); the exchange is a few hundred microseconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from scheduler.processlocal import ProcessLocal
from workers.executor.errors import ExecutorError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

ZYGOTE = Path(__file__).with_name("zygote.py")
# How long a zygote may take to say it is ready, and to answer a request.
START_TIMEOUT = 10.0
REPLY_TIMEOUT = 10.0


class ZygoteError(ExecutorError):
    """The zygote could not fork a step's reaper (the step starts it directly).

    ``maybe_started``: the request went out and no answer came back, so a
    reaper may have been forked before the zygote died (it dies with it).
    """

    def __init__(self, message: str, maybe_started: bool = False) -> None:
        super().__init__(message)
        self.maybe_started = maybe_started


@dataclass
class _Zygote:
    """A running zygote: its pid, our end of its socket, set when it exited."""

    pid: int
    owner: int  # os.getpid() of the process that started it
    sock: socket.socket
    exited: threading.Event

    def usable(self) -> bool:
        return self.owner == os.getpid() and not self.exited.is_set()

    def request(self, message: bytes, fds: Sequence[int]) -> int:
        """Send one request with ``fds``; the forked reaper's pid."""
        try:
            self.sock.settimeout(REPLY_TIMEOUT)
            sent = socket.send_fds(self.sock, [message], list(fds))
            if sent < len(message):
                self.sock.sendall(message[sent:])
        except OSError as exc:  # nothing is forked before the whole request is in
            raise ZygoteError(f"cannot send to the zygote: {exc}") from None
        try:
            reply = self.read_line()
        except (OSError, ZygoteError) as exc:
            raise ZygoteError(f"no answer from the zygote: {exc}", maybe_started=True) from None
        kind, _, value = reply.partition(" ")
        if kind == "pid" and value.isdigit():
            return int(value)
        raise ZygoteError(f"the zygote did not fork: {reply}")

    def namespaces(self, message: bytes) -> list[int]:
        """Ask for a build's namespaces; their descriptors ([] when the kernel refused)."""
        try:
            self.sock.settimeout(REPLY_TIMEOUT)
            self.sock.sendall(message)
            # recvmsg, not socket.recv_fds: Python 3.11's drops its flags (close-on-exec)
            data, ancillary, _, _ = self.sock.recvmsg(
                256, socket.CMSG_SPACE(8), socket.MSG_CMSG_CLOEXEC
            )
        except OSError as exc:
            raise ZygoteError(f"no namespaces from the zygote: {exc}") from None
        fds = [
            int.from_bytes(payload[i : i + 4], sys.byteorder, signed=True)
            for level, kind, payload in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
            for i in range(0, len(payload) - len(payload) % 4, 4)
        ]
        if not data.endswith(b"\n"):  # the reply is one short line, sent at once
            for fd in fds:
                os.close(fd)
            raise ZygoteError(f"the zygote said {data!r}")
        if data != b"namespaces\n":
            for fd in fds:
                os.close(fd)
            log.warning("no namespaces for a build: %s", data.decode(errors="replace").strip())
            return []
        return fds

    def read_line(self) -> str:
        line = b""
        while not line.endswith(b"\n"):
            chunk = self.sock.recv(256)
            if not chunk:
                raise ZygoteError("the zygote exited")
            line += chunk
        return line.decode(errors="replace").strip()

    def stop(self) -> None:
        """Kill it (its reapers get SIGTERM and kill their trees) and close our end."""
        if self.owner == os.getpid() and not self.exited.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.sock.close()


@dataclass
class _Started:
    """What the zygote's thread hands back: the pid or why it failed; when it exited."""

    ready: threading.Event = field(default_factory=threading.Event)
    exited: threading.Event = field(default_factory=threading.Event)
    pid: int = 0
    error: OSError | None = None


class _ZygoteClient:
    """This process's zygote, the lock around it, whether a failure was logged."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.zygote: _Zygote | None = None
        self.failed_before = False

    def fork_reaper(self, message: bytes, fds: Sequence[int]) -> int:
        return self._call(lambda zygote: zygote.request(message, fds))

    def namespaces(self, message: bytes) -> list[int]:
        return self._call(lambda zygote: zygote.namespaces(message))

    def _call(self, exchange: Callable[[_Zygote], _T]) -> _T:
        """One exchange with the zygote (started if need be; stopped if it fails)."""
        with self.lock:
            zygote = self.zygote
            if zygote is None or not zygote.usable():
                if zygote is not None:
                    zygote.stop()
                    self.zygote = None
                zygote = self.zygote = self._start()
            try:
                return exchange(zygote)
            except BaseException as exc:
                zygote.stop()
                self.zygote = None
                if isinstance(exc, ZygoteError):
                    self._report(exc)
                raise

    def current(self) -> _Zygote | None:
        zygote = self.zygote
        return zygote if zygote is not None and zygote.usable() else None

    def close(self) -> None:
        """Stop the zygote (a worker's shutdown: no step runs any more)."""
        with self.lock:
            if self.zygote is not None:
                self.zygote.stop()
                self.zygote = None

    def _start(self) -> _Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        started = _Started()
        keeper = threading.Thread(
            target=_keep, args=(theirs, started), name="sluice-zygote", daemon=True
        )
        try:
            keeper.start()
            started.ready.wait()
        except RuntimeError as exc:  # no thread to be had
            started.error = OSError(str(exc))
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        if started.error is not None:
            ours.close()
            failure = ZygoteError(f"cannot start the zygote: {started.error}")
            self._report(failure)
            raise failure
        zygote = _Zygote(started.pid, os.getpid(), ours, started.exited)
        try:
            ours.settimeout(START_TIMEOUT)
            reply = zygote.read_line()
            if reply != "ready":
                raise ZygoteError(f"the zygote said {reply!r}")
        except (OSError, ZygoteError) as exc:
            zygote.stop()
            failure = ZygoteError(f"the zygote did not start: {exc}")
            self._report(failure)
            raise failure from None
        return zygote

    def _report(self, failure: ZygoteError) -> None:
        level = logging.DEBUG if self.failed_before else logging.WARNING
        self.failed_before = True
        log.log(level, "%s; the step starts its reaper directly", failure)


def _keep(theirs: socket.socket, started: _Started) -> None:
    """The zygote's thread: start it, hand it over, reap it when it exits.

    The zygote's parent-death signal follows this thread, which therefore
    lives as long as the zygote does.
    """
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(ZYGOTE), str(os.getpid()), str(theirs.fileno())],
            cwd="/",
            env={},  # each step brings its own; the worker's (credentials) is not for the reapers
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            close_fds=True,
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # a Ctrl-C on the worker's terminal is not for it
        )
    except OSError as exc:
        started.error = exc
        started.ready.set()
        return
    started.pid = process.pid
    started.ready.set()
    process.wait()
    started.exited.set()


_clients: ProcessLocal[str, _ZygoteClient] = ProcessLocal("step zygote", _ZygoteClient.close)


def client() -> _ZygoteClient:
    """This process's zygote client (made on first use, a new one after ``fork()``)."""
    return _clients.get("zygote", _ZygoteClient)


def fork_reaper(
    command: Sequence[str],
    env: Mapping[str, str],
    grace: float,
    *,
    output_fd: int,
    status_fd: int,
    cwd_fd: int,
    namespaces: Sequence[int] = (),
) -> int:
    """Fork the reaper of ``command`` in this process's zygote (started if need be).

    The reaper runs ``command`` with ``env`` in the folder ``cwd_fd`` (an
    ``O_PATH`` descriptor), its output to ``output_fd`` and its status to
    ``status_fd`` (write ends of the step's pipes; the caller closes its
    own); a sandboxed command in ``namespaces`` (its build's, from
    :func:`build_namespaces`). Returns the reaper's pid; raises
    :class:`ZygoteError` when the zygote could not, and ``ValueError`` for
    an argument that no program can be given (a NUL byte, a ``=`` in a
    variable name).
    """
    message = encode_request(command, env, grace)
    return client().fork_reaper(message, (output_fd, status_fd, cwd_fd, *namespaces))


def build_namespaces(inside: int, outside: int, *, network: bool) -> list[int]:
    """A build's user namespace (``inside`` is host uid ``outside``) and, with ``network``,
    its network namespace, made once by the zygote (``reaper.user_namespace``).

    Their descriptors, the caller's to close; [] when the kernel refused.
    Raises :class:`ZygoteError` when the zygote could not be asked.
    """
    fields = [b"namespaces", str(inside).encode(), str(outside).encode(), b"1" if network else b"0"]
    body = b"\0".join(fields)
    return client().namespaces(len(body).to_bytes(4, "big") + body)


def zygote_pid() -> int | None:
    """The pid of this process's running zygote; None before the first step or after a failure."""
    zygote = client().current()
    return zygote.pid if zygote is not None else None


def encode_request(command: Sequence[str], env: Mapping[str, str], grace: float) -> bytes:
    """A request as ``zygote.py`` reads it: length, then NUL-separated fields."""
    words = [os.fsencode(word) for word in command]
    entries = []
    for name, value in env.items():
        key, data = os.fsencode(name), os.fsencode(value)
        if not key or b"=" in key:
            raise ValueError(f"illegal environment variable name {name!r}")
        entries.append(key + b"=" + data)
    fields = [str(grace).encode(), str(len(words)).encode(), *words, *entries]
    if any(b"\0" in item for item in fields):
        raise ValueError("embedded null byte")
    body = b"\0".join(fields)
    return len(body).to_bytes(4, "big") + body
