"""Spawning and stopping service processes, and probing them.

Every service runs in its own session (process group) so that stopping it
stops its whole tree, and liveness is read from ``/proc/PID/stat`` rather
than ``kill -0`` (a zombie answers ``kill -0`` until it is reaped).

A service writes private files: it starts with umask 077 and its log is
made (or tightened to) mode 0600 in a 0700 folder. What proves that a pid
is still the process spawned, not a later one that got the same pid, is
its :class:`Identity`: the boot, its start time (field 22 of
``/proc/PID/stat``, in clock ticks since boot) and its executable, read
right after the spawn (:func:`identity`) and compared before any signal
(:func:`mismatch`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from scheduler.errors import StackError

# Linux prctl option: the signal a child gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1
_children_die_with_parent = False
# what a spawned service may let others read of what it writes: nothing
SERVICE_UMASK = 0o077
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def children_die_with_parent(enabled: bool = True) -> None:
    """From now on, services this process spawns are killed when it dies.

    The local stack's servers must outlive the ``sluice`` command that
    started them, so this is off by default; a test run turns it on so that
    a run killed from outside (not by pytest-timeout) leaves no ZooKeeper,
    Redis or worker behind. Only spawns from the main thread are bound (the
    signal follows the forking *thread*).
    """
    global _children_die_with_parent  # noqa: PLW0603 (one process-wide policy)
    _children_die_with_parent = enabled


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def private_dir(path: Path) -> Path:
    """``path`` as a folder of mode 0700 (made, or tightened); its parents as they come."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o777 != 0o700:
        path.chmod(0o700)
    return path


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_CREAT | os.O_APPEND) -> int:
    """A descriptor of ``path`` opened with ``flags``, the file made or tightened to 0600."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # an older file keeps its mode through O_CREAT
    return fd


def spawn(
    argv: Sequence[str],
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, umask 077, stdout and stderr to ``log_file`` (0600)."""
    private_dir(log_file.parent)
    bind = _children_die_with_parent and threading.current_thread() is threading.main_thread()
    with os.fdopen(open_private(log_file), "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            umask=SERVICE_UMASK,
            preexec_fn=_die_with_parent if bind else None,  # noqa: PLW1509
        )


@dataclass(frozen=True)
class Identity:
    """What tells a process from a later one with the same pid."""

    start_time: int  # clock ticks after boot: field 22 of /proc/PID/stat
    boot_id: str
    exe: str  # /proc/PID/exe


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` from the third (state) on; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name, in parentheses, may hold spaces and parentheses
    return stat.rsplit(")", 1)[1].split()


def identity(pid: int) -> Identity | None:
    """The identity of the live process ``pid``; None when it is gone or not ours to read."""
    fields = _stat_fields(pid)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        boot = BOOT_ID.read_text().strip()
    except OSError:
        return None
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return Identity(int(fields[19]), boot, exe)


def mismatch(pid: int, recorded: Identity) -> str | None:
    """Why the process ``pid`` is not the one ``recorded`` (None: it is), as words."""
    now = identity(pid)
    fields = _stat_fields(pid)
    if now is None or fields is None:
        return "no such process"
    checks = (
        (bool(recorded.start_time and recorded.boot_id), "no start time is recorded for it"),
        (now.boot_id == recorded.boot_id, "it was recorded before the last boot"),
        (now.start_time == recorded.start_time, "it started at another time (pid reused)"),
        (now.exe == recorded.exe, f"it runs {now.exe}, not {recorded.exe}"),
        (int(fields[2]) == pid, "it does not lead its own process group"),
    )
    return next((why for holds, why in checks if not holds), None)


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def stop_group(pid: int, timeout: float = 10.0, recorded: Identity | None = None) -> None:
    """SIGTERM the process group led by ``pid``; SIGKILL what is left after ``timeout``.

    With ``recorded``, a leader that no longer matches it (:func:`mismatch`)
    gets no further signal: its pid may be another process's by then.
    """
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if recorded is not None and is_alive(pid) and mismatch(pid, recorded) is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not is_alive(pid) and not _group_alive(pid):
                return
            time.sleep(0.05)
    if is_alive(pid):
        raise StackError(f"process {pid} did not stop after SIGKILL")


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _group_alive(pgid: int) -> bool:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields: state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server(Protocol):
    """A service started on a port: ZooKeeperServer, RedisServer."""

    @property
    def log_file(self) -> Path: ...

    def start(self) -> int: ...

    def wait_ready(self, timeout: float) -> None: ...

    def stop(self, timeout: float = ...) -> None: ...


# what a server's log says when its port was taken between free_port() and its bind
PORT_TAKEN = ("Address already in use", "BindException")


S = TypeVar("S", bound=Server)


def start_on_free_port(
    make: Callable[[int], S],
    *,
    timeout: float,
    attempts: int = 3,
    ports: Callable[[], int] = free_port,
) -> S:
    """``make(port)`` started and ready on a port that was free.

    :func:`free_port` closes its socket before the server binds, and in the
    gap another process's outgoing connection can be given that port: the
    server then exits during start-up. When its log says so, it is started
    again on another port, up to ``attempts`` times; any other failure is
    raised at once.
    """
    attempt = 1
    while True:
        server = make(ports())
        log = server.log_file
        seen = log.stat().st_size if log.exists() else 0
        server.start()
        try:
            server.wait_ready(timeout)
        except StackError:
            server.stop()
            if attempt >= attempts or not _says_port_taken(log, seen):
                raise
            attempt += 1
            continue
        return server


def _says_port_taken(log: Path, offset: int) -> bool:
    try:
        with log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return False
    return any(sign in text for sign in PORT_TAKEN)


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(
    probe: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    log_file: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``probe`` until it is true; raise a :class:`StackError` naming ``what``."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        if probe():
            return
        if alive is not None and not alive():
            raise StackError(f"{what} exited during start-up{_see(log_file)}")
        if time.monotonic() >= deadline:
            raise StackError(f"{what} did not become ready within {timeout:.0f}s{_see(log_file)}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _see(log_file: Path | None) -> str:
    if log_file is None:
        return ""
    tail = ""
    try:
        lines = log_file.read_text(errors="replace").splitlines()[-5:]
        tail = "".join(f"\n    {line}" for line in lines)
    except OSError:
        pass
    return f"; see {log_file}{tail}"
