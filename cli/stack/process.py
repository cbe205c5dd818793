"""Spawning and stopping service processes, and probing them.

Every service runs in its own session (process group) so that stopping it
stops its whole tree, and liveness is read from ``/proc/PID/stat`` rather
than ``kill -0`` (a zombie answers ``kill -0`` until it is reaped).
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
from pathlib import Path

from scheduler.errors import StackError

# Linux prctl option: the signal a child gets when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1
_children_die_with_parent = False


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


def spawn(
    argv: Sequence[str],
    log_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session with stdout and stderr to ``log_file``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    bind = _children_die_with_parent and threading.current_thread() is threading.main_thread()
    with open(log_file, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if bind else None,  # noqa: PLW1509
        )


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    # The state follows the parenthesised command name, which may hold spaces.
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def stop_group(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``; SIGKILL what is left after ``timeout``."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
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
